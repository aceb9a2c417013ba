"""The dynamic shovels of a RabbitMQ definitions export, imported unchanged.

:func:`from_definitions` takes the export as the plugin of RabbitMQ 4.0 to 4.3 writes it, every
current key included (``src-predeclared``, ``dest-predeclared``, ``src-consumer-args``,
list-valued ``publish-properties``, and 4.3's ``src-consumer-name``,
``src-delete-after-duration``, ``internal`` and ``internal_owner``), translates each
``component: "shovel"`` parameter into the ``[[shovel]]`` form and validates it through
:func:`rtroute.config.shovel.parse_shovel`, so errors name the shovel, the field as written, and
its line in the export.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Callable

from rtroute.config.lines import (
    MAX_DEFINITIONS_BYTES,
    ConfigError,
    Path,
    SourceMap,
    Where,
    check_size,
    json_source_map,
    parse_json,
    shown,
    suggest,
)
from rtroute.config.shovel import RefusedShovel, ShovelConfig, check_unique, parse_shovel

__all__ = ["PLUGIN_RECONNECT_DELAY", "from_definitions"]

LOGGER = logging.getLogger("rtroute.shovel")

#: The plugin's ``?DEFAULT_RECONNECT_DELAY`` (its docs say 1; its code uses 5).
PLUGIN_RECONNECT_DELAY = 5

# the keys of an AMQP 0-9-1 shovel in RabbitMQ 4.3 (rabbit_shovel_parameters.erl and
# rabbit_amqp091_shovel.erl's validate_src_funs/validate_dest_funs), old names too
_DYNAMIC_KEYS = (
    "src-uri", "src-protocol", "src-queue", "src-queue-args", "src-consumer-args",
    "src-exchange", "src-exchange-key", "src-prefetch-count", "prefetch-count",
    "src-delete-after", "delete-after", "src-predeclared", "dest-uri", "dest-protocol",
    "dest-exchange", "dest-exchange-key", "dest-queue", "dest-queue-args", "dest-predeclared",
    "ack-mode", "add-forward-headers", "dest-add-forward-headers", "add-timestamp-header",
    "dest-add-timestamp-header", "publish-properties", "dest-publish-properties",
    "reconnect-delay", "src-consumer-name", "src-delete-after-duration", "internal",
    "internal_owner",
)
_AMQP10_KEYS = ("src-address", "dest-address", "dest-properties",
                "dest-application-properties", "dest-message-annotations")
# keys whose value passes to parse_shovel as is (it knows the dashed names)
_PASSED = tuple(k for k in _DYNAMIC_KEYS
                if k not in ("src-uri", "dest-uri", "src-protocol", "dest-protocol",
                             "src-queue-args", "dest-queue-args", "src-predeclared",
                             "dest-predeclared"))


class _Refused(Exception):
    """A shovel rtroute does not run (the rest of the file does)."""


def from_definitions(
    definitions: str | bytes | Mapping[str, Any] | list, path: str | None = None, *,
    refused: list[RefusedShovel] | None = None,
) -> list[ShovelConfig]:
    """Dynamic shovels of a RabbitMQ definitions export.

    Args:
        definitions: the export as JSON text or as parsed data: an object whose
            ``parameters`` hold ``{"component": "shovel", "name", "vhost", "value"}`` entries
            (other components are skipped), or a bare list of such parameters.
        path: the file name, for error messages.
        refused: where the shovels rtroute does not run go (AMQP 1.0 ones, and ones with a
            key rtroute does not know); each is also logged as a warning.

    Returns:
        One :class:`ShovelConfig` per shovel parameter that rtroute runs, with ``vhost`` set.
        ``src-queue`` and ``dest-queue`` become a ``queue.declare`` with ``if_missing``
        (passive check, then a durable declare with ``*-queue-args``), as the plugin does; with
        ``src-predeclared``/``dest-predeclared`` a passive ``queue.declare`` only, so a missing
        queue fails the start (404) instead of being created.

    Raises:
        ConfigError: invalid JSON (also: larger than 16 MiB, or nested too deep), or a
            malformed value (with the line when the input was text).
    """
    if isinstance(definitions, (str, bytes)):
        check_size(definitions, path, MAX_DEFINITIONS_BYTES)
        if isinstance(definitions, bytes):
            try:
                text = definitions.decode("utf-8")
            except UnicodeDecodeError as exc:
                line = definitions[: exc.start].count(b"\n") + 1
                raise ConfigError("the file is not UTF-8", line, path) from None
        else:
            text = definitions
        params, base = _parameters(parse_json(text, path, MAX_DEFINITIONS_BYTES))
        # the rest of a big export is freed before json_source_map skips over it
        source = json_source_map(text, _shovel_paths(params, base), path)
    else:
        params, base = _parameters(definitions)
        source = SourceMap()
    where = Where(source, path)
    if not isinstance(params, list):
        raise where.error(base, "parameters must be an array")
    shovels: list[ShovelConfig] = []
    paths: list[Path] = []
    for i, param in enumerate(params):
        ppath = base + (i,)
        if not isinstance(param, Mapping) or param.get("component") != "shovel":
            continue
        name = param.get("name")
        if not isinstance(name, str) or not name:
            raise where.error(ppath, f"shovel parameter #{i + 1}: name must be a non-empty "
                              "string")
        vhost = param.get("vhost", "/")
        if not isinstance(vhost, str):
            raise where.error(ppath + ("vhost",), f"shovel {name!r}: vhost must be a string")
        value = param.get("value")
        vpath = ppath + ("value",)
        if not isinstance(value, Mapping):
            raise where.error(vpath, f"shovel {name!r}: value must be an object")
        try:
            shovel_data = _translate_dynamic(name, value, vpath, where)
        except _Refused as exc:
            at_line = where.source.line(vpath)
            at = f"{path or 'definitions'}{f':{at_line}' if at_line else ''}"
            LOGGER.warning("%s: shovel %r in vhost %r is not run: %s", at, name, vhost, exc)
            if refused is not None:
                refused.append(RefusedShovel(name=name, vhost=vhost, reason=str(exc)))
            continue
        shovels.append(parse_shovel(shovel_data, where, vpath, name=name, vhost=vhost))
        paths.append(ppath)
    check_unique(shovels, where, paths)
    return shovels


def _parameters(data: Any) -> tuple[Any, Path]:
    """The parameters of a definitions export (or a bare list of them), and their path."""
    if isinstance(data, Mapping):
        return data.get("parameters", []), ("parameters",)
    return data, ()


def _shovel_paths(params: Any, base: Path) -> Callable[[Path], bool]:
    """Which paths of a definitions export to map line by line: its shovel parameters (an
    export lists every queue and binding of the cluster; mapping them all is slow)."""
    shovels = set()
    if isinstance(params, list):
        shovels = {i for i, param in enumerate(params)
                   if isinstance(param, Mapping) and param.get("component") == "shovel"}

    def keep(path: Path) -> bool:
        if len(path) <= len(base):
            return path == base[: len(path)]
        return path[: len(base)] == base and path[len(base)] in shovels

    return keep


def _translate_dynamic(
    name: str, value: Mapping[str, Any], vpath: Path, where: Where
) -> dict[str, Any]:
    """A dynamic shovel's value in the ``[[shovel]]`` form (plus lines and names)."""
    context = f"shovel {name!r}"
    value = {k: v for k, v in value.items() if v is not None}  # the HTTP API writes nulls
    for key, v in value.items():
        if key in ("src-protocol", "dest-protocol"):
            if v == "amqp10":
                raise _Refused(f"{key} amqp10 is not supported: rtroute shovels speak "
                               "AMQP 0-9-1 only")
            if v == "local":
                # 4.3's in-broker protocol: no connection, so nothing rtroute can run as is
                raise _Refused(f"{key} local runs inside the broker and is not supported: "
                               "rtroute shovels speak AMQP 0-9-1 only (set amqp091 to "
                               "shovel through a connection to the URI)")
            if v != "amqp091":
                raise where.error(vpath + (key,), f"{context}: {key} must be amqp091, got "
                                  f"{shown(v)}")
    for key in value:
        if key in _AMQP10_KEYS:
            raise _Refused(f"{key} is an AMQP 1.0 setting: rtroute shovels speak AMQP 0-9-1 "
                           "only")
        if key not in _DYNAMIC_KEYS:
            # the plugin refuses the parameter too ("Unrecognised terms"); running the shovel
            # without the key could send messages where the user did not mean them to go
            raise _Refused(f"unknown key '{key}'" + suggest(key, _DYNAMIC_KEYS))
    data: dict[str, Any] = {k: v for k, v in value.items() if k in _PASSED}
    lines, names = where.source.lines, where.source.names
    for side, uri_key, queue_key, predeclared_key in (
            ("sources", "src-uri", "src-queue", "src-predeclared"),
            ("destinations", "dest-uri", "dest-queue", "dest-predeclared")):
        predeclared = value.get(predeclared_key, False)
        if not isinstance(predeclared, bool):
            raise where.error(vpath + (predeclared_key,), f"{context}: {predeclared_key} must "
                              f"be true or false, got {shown(predeclared)}")
        if uri_key not in value:
            raise where.error(vpath, f"{context}: {uri_key} is required")
        side_path = vpath + (side,)
        _copy_line(lines, vpath + (uri_key,), side_path)
        _copy_line(lines, vpath + (uri_key,), side_path + ("brokers",))
        names[side_path] = ""
        names[side_path + ("brokers",)] = uri_key
        uris = value[uri_key]
        if isinstance(uris, list):
            for j in range(len(uris)):
                _copy_line(lines, vpath + (uri_key, j), side_path + ("brokers", j))
        declarations = []
        args_key = queue_key + "-args"
        if args_key in value and queue_key not in value:
            raise where.error(vpath + (args_key,), f"{context}: {args_key} needs {queue_key}")
        if queue_key in value:
            args = value.get(args_key, {})
            if not isinstance(args, Mapping):
                raise where.error(vpath + (args_key,), f"{context}: {args_key} must be an "
                                  "object")
            if predeclared:
                # the plugin only checks that the queue exists: the start fails without it
                declarations.append({"method": "queue.declare", "queue": value[queue_key],
                                     "passive": True})
            else:
                # the plugin checks passively and declares a durable queue only if missing
                declarations.append({"method": "queue.declare", "queue": value[queue_key],
                                     "durable": True, "arguments": dict(args),
                                     "if_missing": True})
            decl_path = side_path + ("declarations", 0)
            _copy_line(lines, vpath + (queue_key,), decl_path)
            names[side_path + ("declarations",)] = ""
            names[decl_path] = ""
            names[decl_path + ("queue",)] = queue_key
        data[side] = {"brokers": uris, "declarations": declarations}
    data.setdefault("reconnect-delay", PLUGIN_RECONNECT_DELAY)
    return data


def _copy_line(lines: dict[Path, int], origin: Path, target: Path) -> None:
    """Give ``target`` (a translated key) the line of ``origin`` (the key as written)."""
    if origin in lines:
        lines[target] = lines[origin]
