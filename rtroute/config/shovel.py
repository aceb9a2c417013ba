"""Shovel configuration: the plugin's names, checked field by field.

The parts of a shovel table (its sides, publish properties and fields, filter) are read by
:mod:`rtroute.config.shovel_fields`; this module puts them together. A :class:`ShovelConfig`
comes from a ``[[shovel]]`` table of ``rtroute.toml`` or from an
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

from rtroute.config.lines import (
    ConfigError,
    Path,
    TableReader,
    Where,
    shown,
)
from rtroute.config.shovel_fields import (
    BASIC_PROPERTIES,
    DECLARATION_METHODS,
    FILTER_KINDS,
    ON_MISMATCH,
    PUBLISH_FIELDS,
    Endpoint,
    ShovelFilter,
    check_shortstr,
    normalize_key,
    optional_string,
    pairs_table,
    parse_endpoint,
    parse_filter,
    parse_publish_fields,
    parse_publish_properties,
    raw_key,
)
from rtroute.config.validators import (
    amqp_uri_problem,
    management_uri_problem,
    selector_problem,
)

__all__ = [
    "ACK_MODES",
    "BASIC_PROPERTIES",
    "DECLARATION_METHODS",
    "FILTER_KINDS",
    "ON_MISMATCH",
    "ON_REFUSED",
    "ON_UNROUTABLE",
    "PUBLISH_FIELDS",
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
#: The plugin's largest ``src-delete-after-duration`` (``rabbit_misc:check_expiry``: ten years).
MAX_DELETE_AFTER_DURATION = 315_360_000
#: The plugin's ``internal_owner.kind`` values.
INTERNAL_OWNER_KINDS = ("exchange", "queue")
DEFAULT_PREFETCH = 1000
DEFAULT_RECONNECT_DELAY = 1.0
DEFAULT_NACK_RETRIES = 5
DEFAULT_NACK_RETRY_DELAY = 0.5


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
        src_delete_after_duration: seconds after which the shovel ends for good, as the 4.3
            plugin's ``src-delete-after-duration`` (which then deletes the shovel): counted
            from the moment the shovel first consumes, raised to the plugin's floor of 60 s
            (see :data:`rtroute.shovel.worker.DELETE_AFTER_DURATION_FLOOR`); ``None`` = never.
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
        consumer_name: the consumer tag of the source's ``basic.consume`` (the 4.3 plugin's
            ``src-consumer-name``/``consumer_name``); ``None`` (or ``""``) = a generated one.
        internal: the 4.3 plugin's ``internal`` flag (its own shovels, which
            ``rabbitmqctl delete_shovel`` removes only with ``--force``). Accepted and shown
            in ``/status``; rtroute's ``delete`` does not check it.
        internal_owner: the 4.3 plugin's ``internal_owner`` (``{"name", "kind",
            "virtual_host"}`` of the exchange or queue that owns an internal shovel), or
            ``None``. Accepted and shown in ``/status``; it changes nothing else.
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
    src_delete_after_duration: int | None = None
    consumer_name: str | None = None
    internal: bool = False
    internal_owner: dict[str, str] | None = None


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
    reader = TableReader(data, path, where, context, normalize=normalize_key)
    if name is None:
        name = reader.string("name", empty=False)
    reader.context = f"shovel {name!r}"

    sources = parse_endpoint(reader, "sources")
    destinations = parse_endpoint(reader, "destinations")

    queue = optional_string(reader, "queue", "src_queue")
    src_exchange = optional_string(reader, "src_exchange")
    src_exchange_key = optional_string(reader, "src_exchange_key")
    durable = reader.take("durable_queue")
    dest_exchange = optional_string(reader, "dest_exchange")
    dest_exchange_key = optional_string(reader, "dest_exchange_key")
    dest_queue = optional_string(reader, "dest_queue")

    prefetch = reader.integer("prefetch_count", "src_prefetch_count", default=DEFAULT_PREFETCH,
                              minimum=0, maximum=65535)
    ack_mode = reader.choice("ack_mode", ACK_MODES, default="on_confirm",
                             normalize=normalize_key)
    publish_properties = parse_publish_properties(reader)
    publish_fields = parse_publish_fields(reader)
    reconnect_delay = reader.number("reconnect_delay", default=DEFAULT_RECONNECT_DELAY,
                                    minimum=0)
    delete_after = _parse_delete_after(reader)
    forward = reader.boolean("add_forward_headers", "dest_add_forward_headers", default=False)
    timestamp = reader.boolean("dest_add_timestamp_header", "add_timestamp_header",
                               default=False)
    unroutable_raw = raw_key(reader, "on_unroutable")
    on_unroutable = reader.choice("on_unroutable", ON_UNROUTABLE, default=None)
    nack_retries = reader.integer("nack_retries", default=DEFAULT_NACK_RETRIES, minimum=0)
    nack_retry_delay = reader.number("nack_retry_delay", default=DEFAULT_NACK_RETRY_DELAY,
                                     minimum=0)
    refused_raw = raw_key(reader, "on_refused")
    on_refused = reader.choice("on_refused", ON_REFUSED, default="requeue",
                               normalize=normalize_key)
    management_raw = raw_key(reader, "src_management_uri")
    src_management_uri = optional_string(reader, "src_management_uri")
    shovel_filter = parse_filter(reader)
    consumer_args = _parse_consumer_args(reader)
    consumer_name = optional_string(reader, "consumer_name", "src_consumer_name") or None
    delete_after_duration = _parse_delete_after_duration(reader)
    internal = reader.boolean("internal", default=False)
    internal_owner = _parse_internal_owner(reader)
    reader.finish()

    def at(*names: str) -> Path:
        raw = raw_key(reader, *names)
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
        src_delete_after_duration=delete_after_duration,
        consumer_name=consumer_name,
        internal=internal,
        internal_owner=internal_owner,
    )


def _parse_consumer_args(reader: TableReader) -> dict[str, Any]:
    got = reader.take("consumer_args", "src_consumer_args")
    if got is None:
        return {}
    raw, value = got
    return dict(pairs_table(reader, raw, value))


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


def _parse_delete_after_duration(reader: TableReader) -> int | None:
    got = reader.take("src_delete_after_duration", "delete_after_duration")
    if got is None:
        return None
    raw, value = got
    if type(value) is not int or value <= 0:
        raise reader.error_at((raw,), f"{reader.label(raw)} must be a positive integer "
                              f"(seconds), got {shown(value)}")
    if value > MAX_DELETE_AFTER_DURATION:
        raise reader.error_at((raw,), f"{reader.label(raw)} is {value} seconds, more than the "
                              f"plugin's maximum of {MAX_DELETE_AFTER_DURATION} (ten years)")
    return value


def _parse_internal_owner(reader: TableReader) -> dict[str, str] | None:
    """The plugin's ``internal_owner``: ``name``, ``kind`` (exchange or queue) and
    ``virtual_host``, all required (``rabbit_shovel_parameters:validate_internal_owner``)."""
    got = reader.take("internal_owner")
    if got is None:
        return None
    raw, value = got
    if not isinstance(value, Mapping):
        raise reader.error_at((raw,), f"{reader.label(raw)} must be a table with name, kind "
                              f"and virtual_host, got {shown(value)}")
    owner = TableReader(value, reader.path + (raw,), reader.where, reader.context,
                        label_start=reader.label_start)
    out = {"name": owner.string("name"),
           "kind": owner.choice("kind", INTERNAL_OWNER_KINDS),
           "virtual_host": owner.string("virtual_host")}
    owner.finish()
    return out


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
        check_shortstr(reader, raw, value)
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

