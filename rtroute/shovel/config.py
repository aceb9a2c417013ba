"""Shovel configuration: the plugin's names, checked field by field.

A :class:`ShovelConfig` comes from a ``[[shovel]]`` table of ``rtroute.toml`` or from an
importer (:mod:`rtroute.shovel.importers`); all of them go through :func:`parse_shovel`, so a
shovel is validated the same way wherever it was written. Keys may be spelled with ``_`` (the
static plugin's style) or ``-`` (the dynamic plugin's style): ``src_exchange`` and
``src-exchange`` are the same key, and the dynamic names (``src-queue``,
``src-prefetch-count``, ``dest-publish-properties``, ...) are accepted as aliases.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rtroute.config_lines import (
    ConfigError,
    Path,
    TableReader,
    Where,
    shown,
    suggest,
    type_name,
)
from rtroute.validators import (
    amqp_uri_problem,
    management_uri_problem,
    selector_problem,
    shortstr_problem,
)

__all__ = [
    "ACK_MODES",
    "BASIC_PROPERTIES",
    "DECLARATION_METHODS",
    "ON_REFUSED",
    "ON_UNROUTABLE",
    "ConfigError",
    "Endpoint",
    "RefusedShovel",
    "ShovelConfig",
    "ShovelFilter",
    "amqp_uri_problem",
    "check_unique",
    "parse_shovel",
    "selector_problem",
]

ACK_MODES = ("no_ack", "on_publish", "on_confirm")
ON_UNROUTABLE = ("nack", "requeue", "drop")
ON_REFUSED = ("requeue", "dead_letter")
DELETE_AFTER = ("never", "queue-length")
FILTER_KINDS = ("topic", "rtopic")
ON_MISMATCH = ("drop", "leave")
PUBLISH_FIELDS = ("exchange", "routing_key")
DEFAULT_PREFETCH = 1000
DEFAULT_RECONNECT_DELAY = 1.0
DEFAULT_NACK_RETRIES = 5
DEFAULT_NACK_RETRY_DELAY = 0.5

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


@dataclass(frozen=True)
class RefusedShovel:
    """A shovel of an imported file that rtroute does not run, and why.

    The rest of the file still runs: an AMQP 1.0 shovel, or one with a key rtroute does not
    know, is refused alone. It shows in ``/status`` as terminated with ``reason``.

    Attributes:
        name: the shovel's name.
        vhost: its virtual host (dynamic shovels), else ``None``.
        reason: why it is not run (names the key).
    """

    name: str
    vhost: str | None
    reason: str


@dataclass(frozen=True)
class ShovelConfig:
    """One shovel, with the plugin's names.

    Attributes:
        name: unique name.
        sources: where messages come from (:class:`Endpoint`).
        destinations: where they go (:class:`Endpoint`).
        queue: the source queue; ``""`` = the most recently declared queue of the source's
            declarations; ``None`` when ``src_exchange`` is used instead.
        src_exchange: consume from this exchange through a private queue bound with
            ``src_exchange_key`` (the plugin's exclusive, server-named queue unless
            ``durable_queue`` names a durable one).
        src_exchange_key: binding key for ``src_exchange`` (default ``""``).
        durable_queue: name of a durable queue to use in ``src_exchange`` mode, so messages
            published during an outage wait there; ``None`` = exclusive server-named queue.
        dest_exchange: publish to this exchange (``None``: keep the message's exchange).
        dest_exchange_key: publish with this routing key (``None``: keep the message's).
        dest_queue: publish straight to this queue (default exchange, key = queue name).
        prefetch_count: source prefetch window (0 = unlimited).
        ack_mode: ``no_ack``, ``on_publish`` or ``on_confirm``.
        publish_properties: basic properties to override, by AMQP name.
        publish_fields: ``exchange`` and/or ``routing_key`` to publish with.
        reconnect_delay: seconds between reconnects; fractions honoured; ``0`` = stop after
            the first error.
        src_delete_after: ``"never"``, ``"queue-length"`` or a message count.
        add_forward_headers: add the plugin's forwarding headers.
        dest_add_timestamp_header: add ``x-shovelled-timestamp``.
        on_unroutable: what to do when the destination returns a message (it is published
            with ``mandatory``): ``nack`` (to the source without requeue, so its dead-letter
            exchange takes it; requeued instead when the source queue has none), ``requeue``,
            or ``drop`` (ack and count; the plugin's behaviour). Defaults to ``nack`` with
            ``on_confirm`` and ``drop`` otherwise.
        nack_retries: how often a message nacked by the destination is republished (with
            back-off) before it counts as refused (see ``on_refused``).
        nack_retry_delay: seconds before the first republish; each further one waits twice as
            long (at most 30 s).
        on_refused: what happens to a refused message (``on_confirm`` only): ``requeue``
            (back to the source queue, held longer each round while the destination keeps
            refusing) or ``dead_letter`` (nacked to the source without requeue, but only when
            the source queue has a dead-letter exchange; otherwise requeued). Never dropped.
        src_management_uri: the source broker's management API, asked whether the source
            queue has a dead-letter exchange (default: derived from the source URI, port
            15672/15671, and used only if it answers for the same broker).
        filter: optional :class:`ShovelFilter`.
        vhost: the virtual host a dynamic shovel was defined in (imports only), else ``None``.
        consumer_args: arguments of the source's ``basic.consume`` (the plugin's
            ``src-consumer-args``/``consumer_args``, e.g. ``{"x-priority": 5}``).
    """

    name: str
    sources: Endpoint
    destinations: Endpoint
    queue: str | None = None
    src_exchange: str | None = None
    src_exchange_key: str = ""
    durable_queue: str | None = None
    dest_exchange: str | None = None
    dest_exchange_key: str | None = None
    dest_queue: str | None = None
    prefetch_count: int = DEFAULT_PREFETCH
    ack_mode: str = "on_confirm"
    publish_properties: dict[str, Any] = field(default_factory=dict)
    publish_fields: dict[str, str] = field(default_factory=dict)
    reconnect_delay: float = DEFAULT_RECONNECT_DELAY
    src_delete_after: str | int = "never"
    add_forward_headers: bool = False
    dest_add_timestamp_header: bool = False
    on_unroutable: str = "nack"
    nack_retries: int = DEFAULT_NACK_RETRIES
    nack_retry_delay: float = DEFAULT_NACK_RETRY_DELAY
    on_refused: str = "requeue"
    src_management_uri: str | None = None
    filter: ShovelFilter | None = None
    vhost: str | None = None
    consumer_args: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------------- helpers


def _normalize_key(key: str) -> str:
    return key.replace("-", "_")


def _check_shortstr(reader: TableReader, raw: str | None, value: str | None) -> None:
    if raw is not None and value is not None:
        problem = shortstr_problem(value)
        if problem:
            raise reader.error_at((raw,), f"{reader.label(raw)} {problem}")


def _optional_string(reader: TableReader, name: str, *aliases: str) -> str | None:
    got = reader.take(name, *aliases)
    if got is None:
        return None
    raw, value = got
    if not isinstance(value, str):
        raise reader.error_at(
            (raw,), f"{reader.label(raw)} must be a string, got {type_name(value)}"
        )
    _check_shortstr(reader, raw, value)
    return value


def _raw(reader: TableReader, name: str, *aliases: str) -> str | None:
    """The key as written for ``name`` (without consuming), for error locations."""
    for n in (name, *aliases):
        for raw in reader.data:
            if _normalize_key(raw) == n:
                return raw
    return None


# ------------------------------------------------------------------------------- endpoints


def _parse_endpoint(reader: TableReader, name: str) -> Endpoint:
    got = reader.take(name)
    if got is None:
        raise reader.error(f"{name} is required (a table with broker or brokers)")
    raw, value = got
    if not isinstance(value, Mapping):
        raise reader.error_at(
            (raw,), f"{reader.label(raw)} must be a table, got {type_name(value)}"
        )
    side = TableReader(value, reader.path + (raw,), reader.where, reader.context,
                       normalize=_normalize_key, label_start=reader.label_start)
    brokers: list[str]
    if side.has("broker") and side.has("brokers", "uris"):
        raise side.error_at((_raw(side, "broker"),), f"{side.label_path()}: give broker or "
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
        key = _normalize_key(raw_key)
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


def _pairs_table(reader: TableReader, raw: str, value: Any) -> Mapping[str, Any]:
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


def _parse_publish_properties(reader: TableReader) -> dict[str, Any]:
    got = reader.take("publish_properties", "dest_publish_properties")
    if got is None:
        return {}
    raw, value = got
    props = TableReader(_pairs_table(reader, raw, value), reader.path + (raw,), reader.where,
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


def _parse_publish_fields(reader: TableReader) -> dict[str, str]:
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


def _parse_filter(reader: TableReader) -> ShovelFilter | None:
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
                        normalize=_normalize_key, label_start=reader.label_start)
    selector = _optional_string(table, "selector")
    key = _optional_string(table, "key")
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
                (_raw(table, "selector") or "selector",),
                f"{table.label('selector')}: invalid selector{at}: {message}",
            )
    return ShovelFilter(selector=selector, key=key, kind=kind, on_mismatch=on_mismatch)


# ---------------------------------------------------------------------------------- shovel


def parse_shovel(
    data: Mapping[str, Any],
    where: Where,
    path: Path = (),
    *,
    name: str | None = None,
    vhost: str | None = None,
) -> ShovelConfig:
    """Validate one shovel table and build its :class:`ShovelConfig`.

    Args:
        data: the table (``[[shovel]]`` of ``rtroute.toml``, or an importer's translation).
        where: source map and file name, for line-precise errors.
        path: the table's path in the document.
        name: the shovel's name when it is not a key of ``data`` (imports).
        vhost: the dynamic shovel's virtual host (imports).

    Raises:
        ConfigError: naming the shovel, the field and the line.
    """
    context = "shovel"
    reader = TableReader(data, path, where, context, normalize=_normalize_key)
    if name is None:
        name = reader.string("name", empty=False)
    reader.context = f"shovel {name!r}"

    sources = _parse_endpoint(reader, "sources")
    destinations = _parse_endpoint(reader, "destinations")

    queue = _optional_string(reader, "queue", "src_queue")
    src_exchange = _optional_string(reader, "src_exchange")
    src_exchange_key = _optional_string(reader, "src_exchange_key")
    durable = reader.take("durable_queue")
    dest_exchange = _optional_string(reader, "dest_exchange")
    dest_exchange_key = _optional_string(reader, "dest_exchange_key")
    dest_queue = _optional_string(reader, "dest_queue")

    prefetch = reader.integer("prefetch_count", "src_prefetch_count", default=DEFAULT_PREFETCH,
                              minimum=0, maximum=65535)
    ack_mode = reader.choice("ack_mode", ACK_MODES, default="on_confirm",
                             normalize=_normalize_key)
    publish_properties = _parse_publish_properties(reader)
    publish_fields = _parse_publish_fields(reader)
    reconnect_delay = reader.number("reconnect_delay", default=DEFAULT_RECONNECT_DELAY,
                                    minimum=0)
    delete_after = _parse_delete_after(reader)
    forward = reader.boolean("add_forward_headers", "dest_add_forward_headers", default=False)
    timestamp = reader.boolean("dest_add_timestamp_header", "add_timestamp_header",
                               default=False)
    unroutable_raw = _raw(reader, "on_unroutable")
    on_unroutable = reader.choice("on_unroutable", ON_UNROUTABLE, default=None)
    nack_retries = reader.integer("nack_retries", default=DEFAULT_NACK_RETRIES, minimum=0)
    nack_retry_delay = reader.number("nack_retry_delay", default=DEFAULT_NACK_RETRY_DELAY,
                                     minimum=0)
    refused_raw = _raw(reader, "on_refused")
    on_refused = reader.choice("on_refused", ON_REFUSED, default="requeue",
                               normalize=_normalize_key)
    management_raw = _raw(reader, "src_management_uri")
    src_management_uri = _optional_string(reader, "src_management_uri")
    shovel_filter = _parse_filter(reader)
    consumer_args = _parse_consumer_args(reader)
    reader.finish()

    def at(*names: str) -> Path:
        raw = _raw(reader, *names)
        return (raw,) if raw is not None else ()

    if queue is None and src_exchange is None:
        raise reader.error("needs a source: queue (src-queue) or src-exchange")
    if queue == "" and not any(d["method"] == "queue.declare" for d in sources.declarations):
        raise reader.error_at(at("queue", "src_queue"), 'queue "" means the most recently '
                              "declared queue, but the sources' declarations declare none")
    if queue is not None and src_exchange is not None:
        raise reader.error_at(at("src_exchange"), "give queue or src-exchange, not both")
    if src_exchange_key is not None and src_exchange is None:
        raise reader.error_at(at("src_exchange_key"), "src-exchange-key needs src-exchange")
    durable_queue = _parse_durable_queue(reader, durable, name, src_exchange)
    if dest_queue is not None and dest_exchange is not None:
        raise reader.error_at(at("dest_queue"), "give dest-exchange or dest-queue, not both")
    if dest_queue is not None and dest_exchange_key is not None:
        raise reader.error_at(at("dest_exchange_key"),
                              "dest-exchange-key has no effect with dest-queue")
    if "exchange" in publish_fields and (dest_exchange is not None or dest_queue is not None):
        raise reader.error_at(at("publish_fields"), "publish_fields.exchange conflicts with "
                              "dest-exchange/dest-queue; give one")
    if "routing_key" in publish_fields and (
        dest_exchange_key is not None or dest_queue is not None
    ):
        raise reader.error_at(at("publish_fields"), "publish_fields.routing_key conflicts "
                              "with dest-exchange-key/dest-queue; give one")
    if isinstance(delete_after, int) and ack_mode == "no_ack":
        raise reader.error_at(at("src_delete_after", "delete_after"),
                              "a numeric src-delete-after needs acknowledgements; it cannot "
                              "be used with ack_mode no_ack")
    if shovel_filter is not None and shovel_filter.on_mismatch == "leave" \
            and ack_mode == "no_ack":
        raise reader.error_at(at("filter"), "filter.on_mismatch \"leave\" needs "
                              "acknowledgements; it cannot be used with ack_mode no_ack")
    if on_unroutable is None:
        on_unroutable = "nack" if ack_mode == "on_confirm" else "drop"
    elif on_unroutable != "drop" and ack_mode != "on_confirm":
        raise reader.error_at(
            (unroutable_raw,) if unroutable_raw else (),
            f"on_unroutable {on_unroutable!r} needs ack_mode on_confirm (the source message "
            f"is already acknowledged with {ack_mode})",
        )

    if on_refused != "requeue" and ack_mode != "on_confirm":
        raise reader.error_at(
            (refused_raw,) if refused_raw else (),
            f"on_refused {on_refused!r} needs ack_mode on_confirm (without confirms the "
            "destination refuses nothing the shovel could see)",
        )
    if src_management_uri is not None:
        problem = management_uri_problem(src_management_uri)
        if problem:
            raise reader.error_at((management_raw,) if management_raw else (),
                                  f"{reader.label(management_raw or 'src_management_uri')} "
                                  f"{problem}")

    return ShovelConfig(
        name=name,
        sources=sources,
        destinations=destinations,
        queue=queue,
        src_exchange=src_exchange,
        src_exchange_key=src_exchange_key or "",
        durable_queue=durable_queue,
        dest_exchange=dest_exchange,
        dest_exchange_key=dest_exchange_key,
        dest_queue=dest_queue,
        prefetch_count=prefetch,
        ack_mode=ack_mode,
        publish_properties=publish_properties,
        publish_fields=publish_fields,
        reconnect_delay=reconnect_delay,
        src_delete_after=delete_after,
        add_forward_headers=forward,
        dest_add_timestamp_header=timestamp,
        on_unroutable=on_unroutable,
        nack_retries=nack_retries,
        nack_retry_delay=nack_retry_delay,
        on_refused=on_refused,
        src_management_uri=src_management_uri,
        filter=shovel_filter,
        vhost=vhost,
        consumer_args=consumer_args,
    )


def _parse_consumer_args(reader: TableReader) -> dict[str, Any]:
    got = reader.take("consumer_args", "src_consumer_args")
    if got is None:
        return {}
    raw, value = got
    return dict(_pairs_table(reader, raw, value))


def _parse_delete_after(reader: TableReader) -> str | int:
    got = reader.take("src_delete_after", "delete_after")
    if got is None:
        return "never"
    raw, value = got
    if isinstance(value, str) and value.replace("_", "-") in DELETE_AFTER:
        return value.replace("_", "-")
    if type(value) is int and value >= 0:
        return value
    raise reader.error_at(
        (raw,), f"{reader.label(raw)} must be \"never\", \"queue-length\" or a message count, "
        f"got {shown(value)}"
    )


def _parse_durable_queue(
    reader: TableReader, got: tuple[str, Any] | None, name: str, src_exchange: str | None
) -> str | None:
    if got is None:
        return None
    raw, value = got
    if value is False:
        return None
    if src_exchange is None:
        raise reader.error_at((raw,), f"{reader.label(raw)} only applies with src-exchange")
    if value is True:
        return f"rtroute.shovel.{name}"
    if isinstance(value, str) and value:
        _check_shortstr(reader, raw, value)
        return value
    raise reader.error_at(
        (raw,), f"{reader.label(raw)} must be true or a queue name, got {shown(value)}"
    )


def check_unique(shovels: list[ShovelConfig], where: Where, paths: list[Path]) -> None:
    """Reject a second shovel with a name already used (within one virtual host)."""
    seen: dict[tuple[str | None, str], int] = {}
    for i, shovel in enumerate(shovels):
        key = (shovel.vhost, shovel.name)
        if key in seen:
            first = where.source.line(paths[seen[key]] + ("name",))
            also = f" (first defined on line {first})" if first else ""
            raise where.error(paths[i] + ("name",),
                              f"shovel {shovel.name!r}: name used twice{also}")
        seen[key] = i

