"""The parts of a ``[[shovel]]`` table: its two sides and the fields of what it publishes.

:func:`rtroute.config.shovel.parse_shovel` reads a shovel with these: :func:`parse_endpoint`
(``sources``/``destinations``: broker lists and declarations, checked against
:data:`DECLARATION_METHODS`), :func:`parse_publish_properties`, :func:`parse_publish_fields` and
:func:`parse_filter`, plus the key helpers shared with it (``_`` and ``-`` spell the same key).
Every name here is also importable from :mod:`rtroute.config.shovel`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rtroute.config.lines import Path, TableReader, shown, suggest, type_name
from rtroute.config.validators import amqp_uri_problem, selector_problem, shortstr_problem

__all__ = [
    "BASIC_PROPERTIES",
    "DECLARATION_METHODS",
    "FILTER_KINDS",
    "ON_MISMATCH",
    "PUBLISH_FIELDS",
    "Endpoint",
    "ShovelFilter",
    "check_shortstr",
    "normalize_key",
    "optional_string",
    "pairs_table",
    "parse_endpoint",
    "parse_filter",
    "parse_publish_fields",
    "parse_publish_properties",
    "raw_key",
]

FILTER_KINDS = ("topic", "rtopic")
ON_MISMATCH = ("drop", "leave")
PUBLISH_FIELDS = ("exchange", "routing_key")

_SHORTSTR = "shortstr"
_STRING_PROPERTIES = (
    "content_type", "content_encoding", "correlation_id", "reply_to", "message_id", "type",
    "user_id", "app_id", "cluster_id",
)
#: AMQP 0-9-1 basic properties that ``publish_properties`` may set, in the spec's order.
BASIC_PROPERTIES = (
    "content_type", "content_encoding", "headers", "delivery_mode", "priority",
    "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type", "user_id",
    "app_id", "cluster_id",
)

_REQUIRED: Any = object()
# method -> field -> (kind, default); kinds: shortstr, bool, table. ``ticket`` and ``nowait``
# are accepted for compatibility with the plugin's records and dropped: pika manages both.
_IGNORED_FIELDS = ("ticket", "nowait")
#: AMQP methods allowed in ``declarations``, with their fields and defaults.
DECLARATION_METHODS: dict[str, dict[str, tuple[str, Any]]] = {
    "exchange.declare": {
        "exchange": (_SHORTSTR, _REQUIRED), "type": (_SHORTSTR, "direct"),
        "passive": ("bool", False), "durable": ("bool", False),
        "auto_delete": ("bool", False), "internal": ("bool", False), "arguments": ("table", {}),
    },
    "exchange.delete": {"exchange": (_SHORTSTR, _REQUIRED), "if_unused": ("bool", False)},
    "exchange.bind": {
        "destination": (_SHORTSTR, _REQUIRED), "source": (_SHORTSTR, _REQUIRED),
        "routing_key": (_SHORTSTR, ""), "arguments": ("table", {}),
    },
    "exchange.unbind": {
        "destination": (_SHORTSTR, _REQUIRED), "source": (_SHORTSTR, _REQUIRED),
        "routing_key": (_SHORTSTR, ""), "arguments": ("table", {}),
    },
    "queue.declare": {
        "queue": (_SHORTSTR, ""), "passive": ("bool", False), "durable": ("bool", False),
        "exclusive": ("bool", False), "auto_delete": ("bool", False), "arguments": ("table", {}),
        # rtroute's own: declare passively first and only create the queue when it is missing
        # (the dynamic plugin does this for src-queue and dest-queue).
        "if_missing": ("bool", False),
    },
    "queue.bind": {
        "queue": (_SHORTSTR, ""), "exchange": (_SHORTSTR, _REQUIRED),
        "routing_key": (_SHORTSTR, ""), "arguments": ("table", {}),
    },
    "queue.unbind": {
        "queue": (_SHORTSTR, ""), "exchange": (_SHORTSTR, _REQUIRED),
        "routing_key": (_SHORTSTR, ""), "arguments": ("table", {}),
    },
    "queue.purge": {"queue": (_SHORTSTR, "")},
    "queue.delete": {
        "queue": (_SHORTSTR, ""), "if_unused": ("bool", False), "if_empty": ("bool", False),
    },
}


@dataclass(frozen=True)
class Endpoint:
    """One side of a shovel.

    Attributes:
        brokers: AMQP URIs; one is picked at random on every (re)connect.
        declarations: AMQP methods run on connect, in order, each a dict such as
            ``{"method": "queue.declare", "queue": "", "durable": True, ...}`` with every field
            of the method filled in (see :data:`DECLARATION_METHODS`). An empty ``queue`` in a
            later method means the most recently declared queue.
    """

    brokers: list[str]
    declarations: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class ShovelFilter:
    """Which messages a shovel moves (rtroute's addition to the plugin).

    Attributes:
        selector: a JMS/SQL-92 selector over the message headers and properties, or ``None``.
        key: a routing-key pattern, or ``None``.
        kind: ``topic`` (``key`` is a binding pattern with ``*``/``#``, matched against the
            message's routing key) or ``rtopic`` (the message's routing key is the pattern,
            matched against ``key``).
        on_mismatch: ``drop`` (ack and count) or ``leave`` (reject with requeue, so the message
            stays in the source queue for its other consumers).
    """

    selector: str | None = None
    key: str | None = None
    kind: str = "topic"
    on_mismatch: str = "drop"


# ----------------------------------------------------------------------------------- helpers


def normalize_key(key: str) -> str:
    return key.replace("-", "_")


def check_shortstr(reader: TableReader, raw: str | None, value: str | None) -> None:
    if raw is not None and value is not None:
        problem = shortstr_problem(value)
        if problem:
            raise reader.error_at((raw,), f"{reader.label(raw)} {problem}")


def optional_string(reader: TableReader, name: str, *aliases: str) -> str | None:
    got = reader.take(name, *aliases)
    if got is None:
        return None
    raw, value = got
    if not isinstance(value, str):
        raise reader.error_at(
            (raw,), f"{reader.label(raw)} must be a string, got {type_name(value)}"
        )
    check_shortstr(reader, raw, value)
    return value


def raw_key(reader: TableReader, name: str, *aliases: str) -> str | None:
    """The key as written for ``name`` (without consuming), for error locations."""
    for n in (name, *aliases):
        for raw in reader.data:
            if normalize_key(raw) == n:
                return raw
    return None


# ------------------------------------------------------------------------------- endpoints


def parse_endpoint(reader: TableReader, name: str) -> Endpoint:
    got = reader.take(name)
    if got is None:
        raise reader.error(f"{name} is required (a table with broker or brokers)")
    raw, value = got
    if not isinstance(value, Mapping):
        raise reader.error_at(
            (raw,), f"{reader.label(raw)} must be a table, got {type_name(value)}"
        )
    side = TableReader(value, reader.path + (raw,), reader.where, reader.context,
                       normalize=normalize_key, label_start=reader.label_start)
    brokers: list[str]
    if side.has("broker") and side.has("brokers", "uris"):
        raise side.error_at((raw_key(side, "broker"),), f"{side.label_path()}: give broker or "
                            "brokers, not both")
    single = side.take("broker")
    if single is not None:
        b_raw, b_value = single
        if not isinstance(b_value, str):
            raise side.error_at(
                (b_raw,), f"{side.label(b_raw)} must be a string, got {type_name(b_value)}"
            )
        brokers = [b_value]
        uri_paths: list[Path] = [(b_raw,)]
    else:
        many = side.take("brokers", "uris")
        if many is None:
            raise side.error(f"{side.label_path()} needs broker or brokers")
        b_raw, b_value = many
        if isinstance(b_value, str):  # the dynamic plugin takes one URI or a list
            b_value = [b_value]
            uri_paths = [(b_raw,)]
        elif not isinstance(b_value, (list, tuple)):
            raise side.error_at(
                (b_raw,), f"{side.label(b_raw)} must be an array of URIs, got "
                f"{type_name(b_value)}"
            )
        else:
            uri_paths = [(b_raw, i) for i in range(len(b_value))]
        if not b_value:
            raise side.error_at((b_raw,), f"{side.label(b_raw)} must not be empty")
        brokers = list(b_value)
    for uri, sub in zip(brokers, uri_paths):
        if not isinstance(uri, str):
            raise side.error_at(sub, f"{side.label(*sub)} must be a string, got {type_name(uri)}")
        problem = amqp_uri_problem(uri)
        if problem:
            raise side.error_at(sub, f"{side.label(*sub)} {problem}")
    protocol = side.take("protocol")
    if protocol is not None and protocol[1] != "amqp091":
        raise side.error_at(
            (protocol[0],), f"{side.label(protocol[0])}: only amqp091 is supported, got "
            f"{shown(protocol[1])}"
        )
    declarations = _parse_declarations(side)
    side.finish()
    return Endpoint(brokers=brokers, declarations=declarations)


def _parse_declarations(side: TableReader) -> list[dict[str, Any]]:
    got = side.take("declarations")
    if got is None:
        return []
    raw, value = got
    if not isinstance(value, (list, tuple)):
        raise side.error_at(
            (raw,), f"{side.label(raw)} must be an array, got {type_name(value)}"
        )
    return [_parse_declaration(side, (raw, i), item) for i, item in enumerate(value)]


def _parse_declaration(side: TableReader, sub: Path, item: Any) -> dict[str, Any]:
    label = side.label(*sub)
    if isinstance(item, str):
        method, args, arg_path = item, {}, sub
    elif isinstance(item, Mapping):
        if "method" not in item:
            raise side.error_at(sub, f"{label} needs a method, e.g. method = \"queue.declare\"")
        method, arg_path = item["method"], sub
        args = {k: v for k, v in item.items() if k != "method"}
        if not isinstance(method, str):
            raise side.error_at(sub + ("method",),
                                f"{label}.method must be a string, got {type_name(method)}")
    else:
        raise side.error_at(
            sub, f"{label} must be a method name or a table, got {type_name(item)}"
        )
    fields = DECLARATION_METHODS.get(method)
    if fields is None:
        raise side.error_at(
            sub + (("method",) if isinstance(item, Mapping) else ()),
            f"{label}: unknown method {shown(method)}; use one of {', '.join(DECLARATION_METHODS)}"
            + suggest(method, DECLARATION_METHODS),
        )
    out: dict[str, Any] = {"method": method}
    seen: dict[str, str] = {}
    for raw_key, value in args.items():
        key = normalize_key(raw_key)
        where = arg_path + (raw_key,)
        if key in seen:
            raise side.error_at(where, f"{label}: '{seen[key]}' and '{raw_key}' are the same "
                                "field; give it once")
        seen[key] = raw_key
        if key in _IGNORED_FIELDS:
            continue
        if key not in fields:
            raise side.error_at(
                where, f"{label}: {method} has no field '{raw_key}'; fields are "
                f"{', '.join(fields)}" + suggest(key, fields),
            )
        kind = fields[key][0]
        if kind == _SHORTSTR:
            if not isinstance(value, str):
                raise side.error_at(where, f"{label}.{raw_key} must be a string, got "
                                    f"{type_name(value)}")
            problem = shortstr_problem(value)
            if problem:
                raise side.error_at(where, f"{label}.{raw_key} {problem}")
        elif kind == "bool" and not isinstance(value, bool):
            raise side.error_at(where, f"{label}.{raw_key} must be a boolean, got "
                                f"{type_name(value)}")
        elif kind == "table":
            if not isinstance(value, Mapping):
                raise side.error_at(where, f"{label}.{raw_key} must be a table, got "
                                    f"{type_name(value)}")
            value = dict(value)
        out[key] = value
    for key, (_kind, default) in fields.items():
        if key in out:
            continue
        if default is _REQUIRED:
            raise side.error_at(sub, f"{label}: {method} needs {key}")
        out[key] = dict(default) if isinstance(default, dict) else default
    return out


# -------------------------------------------------------------------------- message fields


def pairs_table(reader: TableReader, raw: str, value: Any) -> Mapping[str, Any]:
    """A table given as the plugin also takes it: a list of ``[key, value]`` pairs (an Erlang
    proplist as JSON; ``[]`` is the empty table)."""
    if isinstance(value, Mapping):
        return value
    if not isinstance(value, (list, tuple)):
        raise reader.error_at((raw,), f"{reader.label(raw)} must be a table, got "
                              f"{type_name(value)}")
    out: dict[str, Any] = {}
    for i, pair in enumerate(value):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], str)):
            raise reader.error_at((raw, i), f"{reader.label(raw)}[{i}] must be a [key, value] "
                                  f"pair (or give a table), got {shown(pair)}")
        if pair[0] in out:
            raise reader.error_at((raw, i), f"{reader.label(raw)} has {pair[0]!r} twice")
        out[pair[0]] = pair[1]
    return out


def parse_publish_properties(reader: TableReader) -> dict[str, Any]:
    got = reader.take("publish_properties", "dest_publish_properties")
    if got is None:
        return {}
    raw, value = got
    props = TableReader(pairs_table(reader, raw, value), reader.path + (raw,), reader.where,
                        reader.context, label_start=reader.label_start)
    if not props.data:
        return {}
    out: dict[str, Any] = {}
    for raw, value in props.data.items():
        if raw not in BASIC_PROPERTIES:
            raise props.error_at(
                (raw,), f"{props.label(raw)} is not an AMQP basic property; use one of "
                f"{', '.join(BASIC_PROPERTIES)}" + suggest(raw, BASIC_PROPERTIES),
            )
        label = props.label(raw)
        if raw in _STRING_PROPERTIES:
            if not isinstance(value, str):
                raise props.error_at((raw,), f"{label} must be a string, got {type_name(value)}")
            problem = shortstr_problem(value)
            if problem:
                raise props.error_at((raw,), f"{label} {problem}")
        elif raw == "headers":
            if not isinstance(value, Mapping):
                raise props.error_at((raw,), f"{label} must be a table, got {type_name(value)}")
            value = dict(value)
        elif raw == "delivery_mode":
            if type(value) is not int or value not in (1, 2):
                raise props.error_at(
                    (raw,), f"{label} must be 1 (transient) or 2 (persistent), got {shown(value)}"
                )
        elif raw == "priority":
            if type(value) is not int or not 0 <= value <= 255:
                raise props.error_at((raw,), f"{label} must be an integer 0-255, got {shown(value)}")
        elif raw == "expiration":
            if not isinstance(value, str) or not value.isdigit() or not value.isascii():
                raise props.error_at(
                    (raw,), f"{label} must be a string of digits (milliseconds, e.g. "
                    f"\"60000\"), got {shown(value)}"
                )
        elif raw == "timestamp" and (type(value) is not int or value < 0):
            raise props.error_at(
                (raw,), f"{label} must be a non-negative integer (seconds since the "
                f"epoch), got {shown(value)}"
            )
        out[raw] = value
    return out


def parse_publish_fields(reader: TableReader) -> dict[str, str]:
    fields = reader.table("publish_fields")
    out: dict[str, str] = {}
    for raw, value in fields.data.items():
        if raw not in PUBLISH_FIELDS:
            raise fields.error_at(
                (raw,), f"{fields.label(raw)} is not a publish field; use exchange or "
                "routing_key" + suggest(raw, PUBLISH_FIELDS),
            )
        if not isinstance(value, str):
            raise fields.error_at(
                (raw,), f"{fields.label(raw)} must be a string, got {type_name(value)}"
            )
        problem = shortstr_problem(value)
        if problem:
            raise fields.error_at((raw,), f"{fields.label(raw)} {problem}")
        out[raw] = value
    return out


def parse_filter(reader: TableReader) -> ShovelFilter | None:
    got = reader.take("filter")
    if got is None:
        return None
    raw, value = got
    if not isinstance(value, Mapping):
        raise reader.error_at(
            (raw,), f"{reader.label(raw)} must be a table with selector and/or key, got "
            f"{type_name(value)}"
        )
    table = TableReader(value, reader.path + (raw,), reader.where, reader.context,
                        normalize=normalize_key, label_start=reader.label_start)
    selector = optional_string(table, "selector")
    key = optional_string(table, "key")
    kind = table.choice("kind", FILTER_KINDS, default="topic")
    on_mismatch = table.choice("on_mismatch", ON_MISMATCH, default="drop")
    table.finish()
    if selector is None and key is None:
        raise table.error(f"{table.label_path()} needs selector and/or key")
    if selector is not None:
        problem = selector_problem(selector)
        if problem:
            message, position = problem
            at = f" at position {position}" if position is not None else ""
            raise table.error_at(
                (raw_key(table, "selector") or "selector",),
                f"{table.label('selector')}: invalid selector{at}: {message}",
            )
    return ShovelFilter(selector=selector, key=key, kind=kind, on_mismatch=on_mismatch)
