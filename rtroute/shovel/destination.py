"""The destination side of a shovel: declare, open the publish channel, address and rewrite.

As the plugin's destination behaviour (``rabbit_amqp091_shovel``'s destination half), a
:class:`Destination` connects (see :class:`~rtroute.shovel.side.Side`), runs the
destination declarations and hands its channel to the session's :class:`~rtroute.relay.Relay`,
which publishes (with ``ack_mode = "on_confirm"`` in confirm mode, through
:class:`rtroute.amqp.confirm_window.ConfirmWindow`) and maps each outcome back to its source
message.

Messages pass through as frames (:mod:`rtroute.amqp.frames`): the content header and body
frames the source sent are written to the destination behind a new ``basic.publish``; the
properties are decoded only when the shovel changes them (``publish_properties``, the forward
and timestamp headers, see :meth:`Destination.transform`). Every publish is ``mandatory``.

Flow control (:class:`~rtroute.relay.flow.FlowControl`): while the destination is blocked the
shovel publishes nothing; deliveries that arrive meanwhile wait in order
(:attr:`Destination.pending`) and go first once it is unblocked. The prefetch window bounds
them; without one (``no_ack``, ``prefetch_count = 0``) the source stops reading its socket
after :data:`~rtroute.shovel.source.PENDING_LIMIT` waiting messages, so TCP back-pressure holds
the rest in the source broker.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rtroute.amqp import frames
from rtroute.amqp.content_header import ContentHeader
from rtroute.amqp.field_table import FieldTable, Int64
from rtroute.amqp.uri import AmqpUri
from rtroute.config.shovel import ShovelConfig
from rtroute.shovel.side import Side
from rtroute.shovel.status import uri_without_credentials

if TYPE_CHECKING:
    from rtroute.relay import Relay
    from rtroute.shovel.session import Session
    from rtroute.shovel.source import Source, SourceDelivery

__all__ = ["Destination", "forward_header_table"]

#: Confirm window when ``prefetch_count`` is 0 (unlimited).
UNLIMITED_WINDOW = 5000
#: Publish method frames kept per session, by (exchange, routing key).
METHOD_CACHE = 1024

ROUTING_HEADER = "x-shovelled"
TIMESTAMP_HEADER = "x-shovelled-timestamp"
INVALID_HEADERS = "x-invalid-headers"


def forward_header_table(
    config: ShovelConfig, shovelled_by: str, src_uri: str, dest_uri: str
) -> dict[str, str]:
    """The table the plugin prepends to the ``x-shovelled`` header array.

    Static shovels (from ``rtroute.toml`` or ``rabbitmq.config``): ``shovelled-by``,
    ``shovel-type`` (``static``), ``shovel-name``, ``src-uri``, ``dest-uri``. Dynamic ones (from
    a definitions export, so ``config.vhost`` is set) add ``shovel-vhost`` after the name, and
    after the URIs ``src-queue`` (or ``src-exchange`` and ``src-exchange-key``) and whichever
    of ``dest-exchange``, ``dest-exchange-key``, ``dest-queue`` are set. Every value is a
    string (AMQP longstr); the URIs carry no credentials.
    """
    dynamic = config.vhost is not None
    table = {
        "shovelled-by": shovelled_by,
        "shovel-type": "dynamic" if dynamic else "static",
        "shovel-name": config.name,
    }
    if dynamic:
        table["shovel-vhost"] = config.vhost or ""
    table["src-uri"] = uri_without_credentials(src_uri)
    table["dest-uri"] = uri_without_credentials(dest_uri)
    if dynamic:
        if config.src_exchange is not None:
            table["src-exchange"] = config.src_exchange
            table["src-exchange-key"] = config.src_exchange_key
        else:
            table["src-queue"] = config.queue or ""
        for key, value in (("dest-exchange", config.dest_exchange),
                           ("dest-exchange-key", config.dest_exchange_key),
                           ("dest-queue", config.dest_queue)):
            if value is not None:
                table[key] = value
    return table


class Destination(Side):
    """The destination side of one session (see the module docstring)."""

    def __init__(self, session: Session, uris: list[AmqpUri]) -> None:
        super().__init__(session, "destination", uris, session.cfg.destinations.declarations)
        cfg = self.cfg
        # the prefetch window bounds the publishes awaiting a confirm; without one, this does
        self.window_size = cfg.prefetch_count + 1 if cfg.prefetch_count else UNLIMITED_WINDOW
        self.forward_table: dict[str, str] | None = None
        self.transform_needed = bool(cfg.publish_properties or cfg.add_forward_headers
                                     or cfg.dest_add_timestamp_header)
        # where to publish: a fixed short string, or None to keep the message's own
        exchange: str | None
        key: str | None
        if cfg.dest_queue is not None:
            exchange, key = "", cfg.dest_queue
        else:
            exchange = cfg.dest_exchange if cfg.dest_exchange is not None \
                else cfg.publish_fields.get("exchange")
            key = cfg.dest_exchange_key if cfg.dest_exchange_key is not None \
                else cfg.publish_fields.get("routing_key")
        self.fixed_exchange = frames.shortstr(exchange) if exchange is not None else None
        self.fixed_key = frames.shortstr(key) if key is not None else None
        self.fixed_exchange_text = exchange or ""
        self.fixed_key_text = key or ""
        self.method_frames: frames.PublishFrames | None = None  # once running
        self.channel_number = 0
        self.same_framing = True
        self.frame_max = 0
        self.relay: Relay = None  # type: ignore[assignment]  # the session's (see link)

    def link(self, relay: Relay) -> None:
        """Publish through ``relay``."""
        self.relay = relay

    @property
    def pending(self) -> Any:
        """Deliveries waiting for the destination (blocked, or a full confirm window), in
        order (read it, do not change it)."""
        return self.relay.queued

    @property
    def blocked(self) -> bool:
        """True while the destination broker blocks the connection."""
        return self.relay.blocked

    # -- starting ------------------------------------------------------------------------------

    def connected_to(self, connection: Any, uri: AmqpUri) -> None:
        self.status.current_destination = uri.masked()
        self.relay.watch(connection)

    def channel_opened(self, connection: Any, channel: Any) -> None:
        self.declare(connection, channel, self._declared)

    def _declared(self, _last_queue: str | None) -> None:
        self.relay.attach(self.channel, self.reader, on_ready=self.guard(self._now_ready))

    def _now_ready(self) -> None:
        self.ready = True
        self.session.maybe_run()

    def prepare(self, source: Source) -> None:
        """Both sides are ready: settle how frames pass from ``source`` to this side."""
        self.channel_number = self.channel.channel_number
        self.method_frames = frames.PublishFrames(self.channel_number, METHOD_CACHE)
        self.frame_max = self.connection.params.frame_max
        # content frames pass through as received when channel and frame size allow
        self.same_framing = self.channel_number == source.channel.channel_number \
            and source.connection.params.frame_max <= self.frame_max
        if self.cfg.add_forward_headers:
            assert source.uri is not None and self.uri is not None
            worker = self.worker
            self.forward_table = forward_header_table(
                self.cfg, worker.shovelled_by or "", worker.uri_text(source.uri),
                worker.uri_text(self.uri))
        source.address(self)

    # -- the hot path --------------------------------------------------------------------------

    def transform(self, entry: SourceDelivery) -> None:
        """Apply publish_properties, then the forward and timestamp headers (the plugin's
        order). Only what they change is encoded again: every other property and header entry
        keeps its bytes (:class:`rtroute.amqp.content_header.ContentHeader`)."""
        cfg = self.cfg
        header = entry.parts[0]
        edited = ContentHeader(header)
        for key, value in cfg.publish_properties.items():
            edited.set(key, dict(value) if key == "headers" else value)
        if self.forward_table is not None:
            previous = edited.header(ROUTING_HEADER)
            if isinstance(previous, list):
                edited.set_header(ROUTING_HEADER, [self.forward_table, *previous])
            else:
                if previous is not None:
                    invalid = edited.header(INVALID_HEADERS)
                    invalid = invalid.copy() if isinstance(invalid, FieldTable) else FieldTable()
                    invalid[ROUTING_HEADER] = [previous]
                    edited.set_header(INVALID_HEADERS, invalid)
                edited.set_header(ROUTING_HEADER, [self.forward_table])
        if cfg.dest_add_timestamp_header:
            edited.set_header(TIMESTAMP_HEADER, Int64(int(time.time())))  # the plugin's long
        channel = header[1] << 8 | header[2]
        entry.parts = [edited.frame(channel), *entry.parts[1:]]
