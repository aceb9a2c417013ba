"""Import shovels unchanged from RabbitMQ's own configuration.

* :func:`from_erlang_config`: the ``rabbitmq_shovel`` section of ``rabbitmq.config`` /
  ``advanced.config`` (static shovels), in both of the plugin's formats: the classic one
  (``sources``/``destinations`` with ``broker``/``brokers``, ``queue`` and the publish settings
  at the top) and the current one (``source``/``destination`` with ``protocol`` and ``uris``,
  the queue and prefetch inside ``source``, the publish settings inside ``destination``).
* :func:`from_definitions`: the dynamic shovels (``parameters`` with ``component: "shovel"``)
  of a definitions export (in :mod:`rtroute.shovel.definitions`, importable from here).

A definitions export is taken as the plugin of RabbitMQ 4.0 to 4.3 writes it, every current
key included (``src-predeclared``, ``dest-predeclared``, ``src-consumer-args``, list-valued
``publish-properties``, 4.3's ``src-consumer-name`` and ``src-delete-after-duration``, ...); an
Erlang config takes 4.3's ``consumer_name`` and ``delete_after_duration`` in ``source`` (and
``delete_after_duration`` at the top of the classic format). A shovel rtroute cannot run (an
AMQP 1.0 one, a 4.3 ``local`` one, or one with a key it does not know, which the plugin would
refuse too) is refused alone: it is logged and listed as a
:class:`~rtroute.config.shovel.RefusedShovel`, and the rest of the file runs.

Both translate into the ``[[shovel]]`` form and validate through
:func:`rtroute.config.shovel.parse_shovel`, so errors name the shovel, the field as the user
wrote it, and its line in the imported file. Where the plugin's defaults differ from
``rtroute.toml``'s, the plugin's are used (``reconnect_delay`` 5 s), so an imported shovel
behaves as it did in the broker.
"""
from __future__ import annotations

from typing import Any

from rtroute.config.lines import (
    ConfigError,
    Path,
    SourceMap,
    Where,
    suggest,
)
from rtroute.config.shovel import ShovelConfig, check_unique, parse_shovel
from rtroute.shovel.definitions import PLUGIN_RECONNECT_DELAY, from_definitions
from rtroute.shovel.erlang_terms import Term, parse_one

__all__ = ["PLUGIN_RECONNECT_DELAY", "from_definitions", "from_erlang_config"]


_CLASSIC_KEYS = (
    "sources", "destinations", "queue", "prefetch_count", "ack_mode", "publish_properties",
    "publish_fields", "reconnect_delay", "delete_after", "add_forward_headers",
    "add_timestamp_header", "delete_after_duration",
)
_CURRENT_KEYS = ("source", "destination", "ack_mode", "reconnect_delay")
_ENDPOINT_KEYS = ("protocol", "broker", "brokers", "uris", "declarations")
_SOURCE_MOVED = ("queue", "prefetch_count", "delete_after", "consumer_args", "consumer_name",
                 "delete_after_duration")
_DEST_MOVED = ("publish_properties", "publish_fields", "add_forward_headers",
               "add_timestamp_header")
_TEXT_KEYS = ("queue", "broker", "consumer_name")


# ---------------------------------------------------------------------------- Erlang terms


class _ErlangImport:
    """Translates one config term, recording each value's line under its data path."""

    def __init__(self, path: str | None):
        self.source = SourceMap()
        self.where = Where(self.source, path)

    def fail(self, term: Term, message: str) -> ConfigError:
        return ConfigError(message, term.line, self.where.file)

    def note(self, path: Path, term: Term, name: str | None = None) -> None:
        self.source.lines[path] = term.line
        if name is not None:
            self.source.names[path] = name

    # -- values

    def text(self, term: Term, context: str, label: str) -> str:
        if term.kind == "binary":
            try:
                return term.value.decode("utf-8")
            except UnicodeDecodeError:
                raise self.fail(term, f"{context}: {label} is not UTF-8") from None
        if term.kind == "string":
            return term.value
        if term.kind == "list" and not term.items:
            return ""  # "" and [] are the same term
        raise self.fail(term, f"{context}: {label} must be a binary (<<\"...\">>) or a string, "
                        f"got {term.describe()}")

    def plain(self, term: Term, context: str, label: str) -> Any:
        """A scalar or list as the TOML form would have it (binaries and strings -> str)."""
        if term.kind in ("binary", "string"):
            return self.text(term, context, label)
        if term.kind == "atom":
            return {"true": True, "false": False}.get(term.value, str(term.value))
        if term.kind == "list":
            return [self.plain(t, context, label) for t in term.items]
        if term.kind == "tuple":
            return tuple(self.plain(t, context, label) for t in term.items)
        return term.value

    def amqp_table(self, term: Term, context: str, label: str) -> dict[str, Any]:
        """``[{<<"x-message-ttl">>, long, 60000}, ...]`` (or 2-tuples) -> ``{key: value}``."""
        if term.kind != "list":
            raise self.fail(term, f"{context}: {label} must be a list of {{Key, Type, Value}}, "
                            f"got {term.describe()}")
        out: dict[str, Any] = {}
        for item in term.items:
            if item.kind != "tuple" or len(item.items) not in (2, 3):
                raise self.fail(item, f"{context}: {label} entries must be {{Key, Type, Value}},"
                                f" got {item.describe()}")
            key = self.text(item.items[0], context, f"{label} key")
            if key in out:
                raise self.fail(item, f"{context}: {label} has {key!r} twice")
            if len(item.items) == 3:
                out[key] = self.amqp_value(item.items[1], item.items[2], context,
                                           f"{label}.{key}")
            else:
                out[key] = self.plain(item.items[1], context, f"{label}.{key}")
        return out

    def amqp_value(self, type_term: Term, term: Term, context: str, label: str) -> Any:
        kind = str(type_term.value) if type_term.kind == "atom" else ""
        if kind == "table":
            return self.amqp_table(term, context, label)
        if kind == "array":
            if term.kind != "list":
                raise self.fail(term, f"{context}: {label} must be a list")
            values = []
            for item in term.items:
                if item.kind != "tuple" or len(item.items) != 2:
                    raise self.fail(item, f"{context}: {label} elements must be {{Type, Value}}")
                values.append(self.amqp_value(item.items[0], item.items[1], context, label))
            return values
        if kind == "void":
            return None
        return self.plain(term, context, label)

    def proplist(self, term: Term, context: str, label: str) -> list[tuple[str, Term, Term]]:
        """``[{key, Value} | key]`` -> ``[(key, key term, value term)]``, checked."""
        if term.kind != "list":
            raise self.fail(term, f"{context}: {label} must be a list of {{key, Value}}, got "
                            f"{term.describe()}")
        out: list[tuple[str, Term, Term]] = []
        seen: dict[str, Term] = {}
        for item in term.items:
            if item.kind == "atom":  # proplists:unfold: a bare atom means {atom, true}
                key_term, value = item, Term("atom", "true", item.line, item.column)
            elif item.kind == "tuple" and len(item.items) == 2 and item.items[0].kind == "atom":
                key_term, value = item.items
            else:
                raise self.fail(item, f"{context}: {label} entries must be {{key, Value}}, got "
                                f"{item.describe()}")
            key = str(key_term.value)
            if key in seen:
                raise self.fail(item, f"{context}: {label}: '{key}' is given twice (also on "
                                f"line {seen[key].line})")
            seen[key] = item
            out.append((key, key_term, value))
        return out

    # -- sections

    def run(self, text: str) -> list[ShovelConfig]:
        top = parse_one(text, self.where.file)
        section = self.find_section(top)
        shovels_term = None
        for key, _k, value in self.proplist(section, "rabbitmq_shovel", "the section"):
            if key == "shovels":
                shovels_term = value
        if shovels_term is None:
            raise self.fail(section, "rabbitmq_shovel: no {shovels, [...]} entry")
        if shovels_term.kind != "list":
            raise self.fail(shovels_term, "rabbitmq_shovel: shovels must be a list, got "
                            f"{shovels_term.describe()}")
        shovels: list[ShovelConfig] = []
        paths: list[Path] = []
        for i, item in enumerate(shovels_term.items):
            if item.kind != "tuple" or len(item.items) != 2 or item.items[0].kind != "atom":
                raise self.fail(item, "rabbitmq_shovel: each shovel must be {name, [...]}, "
                                f"got {item.describe()}")
            name = str(item.items[0].value)
            path: Path = ("shovels", i)
            self.note(path, item)
            data = self.shovel(name, item.items[1], path)
            shovels.append(parse_shovel(data, self.where, path, name=name))
            paths.append(path)
        check_unique(shovels, self.where, paths)
        return shovels

    def find_section(self, top: Term) -> Term:
        candidates = top.items if top.kind == "list" else [top]
        for item in candidates:
            if (item.kind == "tuple" and len(item.items) == 2
                    and item.items[0].is_atom("rabbitmq_shovel")):
                return item.items[1]
        raise self.fail(top, "no {rabbitmq_shovel, [...]} section in this config")

    def shovel(self, name: str, term: Term, path: Path) -> dict[str, Any]:
        context = f"shovel {name!r}"
        props = self.proplist(term, context, "the shovel")
        keys = {key for key, _k, _v in props}
        current = "source" in keys or "destination" in keys
        allowed = _CURRENT_KEYS if current else _CLASSIC_KEYS
        data: dict[str, Any] = {}
        for key, key_term, value in props:
            if key not in allowed:
                other = _CLASSIC_KEYS if current else _CURRENT_KEYS
                if key in other:
                    raise self.fail(key_term, f"{context}: '{key}' belongs to the other shovel "
                                    "format; use either source/destination or "
                                    "sources/destinations with queue")
                raise self.fail(key_term, f"{context}: unknown key '{key}'"
                                + suggest(key, allowed))
            if key in ("sources", "destinations", "source", "destination"):
                self.endpoint(key, value, path, data, context)
            elif key in ("publish_properties", "publish_fields"):
                data[key] = self.publish_table(value, path + (key,), context, key)
            else:
                data[key] = self.scalar(key, value, context, key)
                self.note(path + (key,), value)
        if "reconnect_delay" not in data:
            data["reconnect_delay"] = PLUGIN_RECONNECT_DELAY
        return data

    def scalar(self, key: str, value: Term, context: str, label: str) -> Any:
        if key in _TEXT_KEYS:
            return self.text(value, context, label)
        return self.plain(value, context, label)

    def publish_table(self, term: Term, path: Path, context: str, label: str) -> dict[str, Any]:
        self.note(path, term)
        out: dict[str, Any] = {}
        for prop, _k, value in self.proplist(term, context, label):
            self.note(path + (prop,), value)
            if prop == "headers":
                out[prop] = self.amqp_table(value, context, f"{label}.headers")
            elif value.kind == "atom" and not value.is_atom("true") and not value.is_atom(
                "false"
            ):
                raise self.fail(value, f"{context}: {label}.{prop} must be a binary or a "
                                f"number, got {value.describe()}")
            else:
                out[prop] = self.plain(value, context, f"{label}.{prop}")
        return out

    def endpoint(
        self, key: str, term: Term, path: Path, data: dict[str, Any], context: str
    ) -> None:
        """Translate ``sources``/``source`` (and the destination) into the TOML form."""
        target = "sources" if key.startswith("source") else "destinations"
        side_path = path + (target,)
        self.note(side_path, term, key)
        current = key in ("source", "destination")
        moved = (_SOURCE_MOVED if target == "sources" else _DEST_MOVED) if current else ()
        side: dict[str, Any] = {}
        for prop, key_term, value in self.proplist(term, context, key):
            if prop in moved:
                if prop in ("publish_properties", "publish_fields"):
                    data[prop] = self.publish_table(value, path + (prop,), context,
                                                    f"{key}.{prop}")
                elif prop == "consumer_args":
                    data[prop] = self.amqp_table(value, context, f"{key}.{prop}")
                    self.note(path + (prop,), value)
                else:
                    data[prop] = self.scalar(prop, value, context, f"{key}.{prop}")
                    self.note(path + (prop,), value)
                self.source.names[path + (prop,)] = f"{key}.{prop}"
                continue
            allowed = _ENDPOINT_KEYS + moved
            if prop not in allowed:
                raise self.fail(key_term, f"{context}: unknown key '{prop}' in {key}"
                                + suggest(prop, allowed))
            if prop == "declarations":
                side[prop] = self.declarations(value, side_path + (prop,), context, key)
            elif prop in ("brokers", "uris"):
                if value.kind != "list":
                    raise self.fail(value, f"{context}: {key}.{prop} must be a list of URIs, "
                                    f"got {value.describe()}")
                side[prop] = [self.text(t, context, f"{key}.{prop}") for t in value.items]
                self.note(side_path + (prop,), value)
                for j, t in enumerate(value.items):
                    self.note(side_path + (prop, j), t)
            else:
                side[prop] = self.scalar(prop, value, context, f"{key}.{prop}")
                self.note(side_path + (prop,), value)
        data[target] = side

    def declarations(self, term: Term, path: Path, context: str, side: str) -> list[Any]:
        if term.kind != "list":
            raise self.fail(term, f"{context}: {side}.declarations must be a list, got "
                            f"{term.describe()}")
        self.note(path, term)
        out: list[Any] = []
        for j, item in enumerate(term.items):
            self.note(path + (j,), item)
            label = f"{side}.declarations[{j}]"
            if item.kind == "atom":
                out.append(str(item.value))
                continue
            if item.kind != "tuple" or len(item.items) != 2 or item.items[0].kind != "atom":
                raise self.fail(item, f"{context}: {label} must be 'method' or "
                                f"{{'method', [...]}}, got {item.describe()}")
            method_term, args_term = item.items
            decl: dict[str, Any] = {"method": str(method_term.value)}
            self.note(path + (j, "method"), method_term)
            for field, _k, value in self.proplist(args_term, context, label):
                self.note(path + (j, field), value)
                if field == "arguments":
                    decl[field] = self.amqp_table(value, context, f"{label}.arguments")
                elif value.kind == "atom" and value.value not in ("true", "false"):
                    raise self.fail(value, f"{context}: {label}.{field} must be a binary or a "
                                    f"boolean, got {value.describe()}")
                else:
                    decl[field] = self.plain(value, context, f"{label}.{field}")
            out.append(decl)
        return out


def from_erlang_config(text: str, path: str | None = None) -> list[ShovelConfig]:
    """Shovels of the ``rabbitmq_shovel`` section of a ``rabbitmq.config``/``advanced.config``.

    Args:
        text: the file's text: ``[{rabbit, [...]}, {rabbitmq_shovel, [{shovels, [...]}]}].``
            (a lone ``{rabbitmq_shovel, [...]}.`` is accepted too).
        path: the file name, for error messages.

    Raises:
        ErlangSyntaxError: the text is not a valid term (with line and column).
        ConfigError: a shovel is malformed (naming the shovel, the field and the line), or
            the text is larger than 4 MiB.
    """
    return _ErlangImport(path).run(text)
