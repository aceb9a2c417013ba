"""The destination side of a shovel: declare, publish, and report each outcome.

As the plugin's destination behaviour (``rabbit_amqp091_shovel``'s destination half), a
:class:`Destination` connects (see :class:`~rtroute.shovel.side.Side`), runs the
destination declarations and, with ``ack_mode = "on_confirm"``, puts its channel in confirm mode
through :class:`rtroute.amqp.confirm_window.ConfirmWindow`, whose outcomes (acked, nacked,
returned, failed) go to the source's :meth:`~rtroute.shovel.source.Source.on_outcome`.

Messages pass through as frames (:mod:`rtroute.amqp.frames`): the content header and body
frames the source sent are written to the destination behind a new ``basic.publish``; the
properties are decoded only when the shovel changes them (``publish_properties``, the forward
and timestamp headers). Every publish is ``mandatory``.

Flow control: while the destination is blocked the shovel publishes nothing; deliveries that
arrive meanwhile wait in order (:attr:`Destination.pending`) and go first once it is unblocked.
The prefetch window bounds them; without one (``no_ack``, ``prefetch_count = 0``) the source
stops reading its socket after :data:`~rtroute.shovel.source.PENDING_LIMIT` waiting messages, so
TCP back-pressure holds the rest in the source broker.
"""
from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pika.exceptions

from rtroute.amqp import frames, pika_internals
from rtroute.amqp.confirm_window import ConfirmWindow, WindowClosed, WindowFull
from rtroute.amqp.content_header import ContentHeader
from rtroute.amqp.field_table import FieldTable, Int64
from rtroute.amqp.uri import AmqpUri
from rtroute.shovel.config import ShovelConfig
from rtroute.shovel.side import Side
from rtroute.shovel.status import ShovelState, uri_without_credentials

if TYPE_CHECKING:
    from rtroute.shovel.session import Session
    from rtroute.shovel.source import Source, SourceDelivery

__all__ = ["Destination", "forward_header_table"]

LOGGER = logging.getLogger("rtroute.shovel")

#: Confirm window when ``prefetch_count`` is 0 (unlimited).
UNLIMITED_WINDOW = 5000
#: Destination socket buffer (bytes) above which publishing without confirms pauses.
WRITE_BUFFER_HIGH = 4 << 20
WRITE_BUFFER_LOW = 1 << 20
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
    """The destination side of one session (see the module docstring).

    ``on_resumed`` is called after a pause ended and the waiting deliveries went out (the
    session reads the source again and checks whether a drain is done).
    """

    def __init__(self, session: Session, uris: list[AmqpUri]) -> None:
        super().__init__(session, "destination", uris, session.cfg.destinations.declarations)
        cfg = self.cfg
        self.blocked = False
        self.pause_reasons: set[str] = set()
        self.pending: collections.deque[SourceDelivery] = collections.deque()
        self.buffer_timer: Any = None
        # publisher confirms and returns (on_confirm), once the channel is open
        self.confirm_window: ConfirmWindow | None = None
        # the prefetch window bounds the publishes awaiting a confirm; without one, this does
        self.window_size = cfg.prefetch_count + 1 if cfg.prefetch_count else UNLIMITED_WINDOW
        self.confirms = cfg.ack_mode == "on_confirm"
        self.ack_on_publish = cfg.ack_mode == "on_publish"
        self.forward_table: dict[str, str] | None = None
        self.transform_needed = bool(cfg.publish_properties or cfg.add_forward_headers
                                     or cfg.dest_add_timestamp_header)
        # where to publish: a fixed short string, or None to keep the message's own
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
        self.out: list[bytes] = []          # frames to write at the end of this ioloop turn
        self.channel_number = 0
        self.same_framing = True
        self.frame_max = 0
        # the source's (see link)
        self.settler: Any = None
        self.on_outcome: Any = None
        self.on_resumed: Callable[[], Any] = lambda: None

    def link(self, source: Source, on_resumed: Callable[[], Any]) -> None:
        """Report outcomes to ``source`` and acknowledge through its settler (``on_publish``)."""
        self.settler = source.settler
        self.on_outcome = source.on_outcome
        self.on_resumed = on_resumed

    # -- starting ------------------------------------------------------------------------------

    def connected_to(self, connection: Any, uri: AmqpUri) -> None:
        self.status.current_destination = uri.masked()
        connection.add_on_connection_blocked_callback(self._on_blocked)
        connection.add_on_connection_unblocked_callback(self._on_unblocked)

    def channel_opened(self, connection: Any, channel: Any) -> None:
        self.declare(connection, channel, self._declared)

    def _declared(self, _last_queue: str | None) -> None:
        if not self.confirms:
            self.channel.add_on_return_callback(self._on_unconfirmed_return)
            self._now_ready()
            return
        window = ConfirmWindow(self.channel, window=self.window_size,
                               low_watermark=self.window_size // 2,
                               on_writable=lambda: self.resume("window"))
        window.read_confirms_from(self.reader)
        self.confirm_window = window
        window.start(on_ready=self.guard(self._now_ready))

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

    def publish(self, entry: SourceDelivery) -> None:
        """Publish one message (``mandatory``); with confirms its outcome goes to the source."""
        exchange = self.fixed_exchange if self.fixed_exchange is not None else entry.exchange
        key = self.fixed_key if self.fixed_key is not None else entry.routing_key
        method = self.method_frames.get(exchange, key)  # type: ignore[union-attr]
        parts = entry.parts if self.same_framing \
            else frames.rechannel(entry.parts, self.channel_number, self.frame_max)
        window = self.confirm_window
        if window is not None:
            try:
                window.publish_frames(
                    self.fixed_exchange_text if self.fixed_exchange is not None
                    else exchange[1:].decode("utf-8", "replace"),
                    self.fixed_key_text if self.fixed_key is not None
                    else key[1:].decode("utf-8", "replace"),
                    [method, *parts], len(parts) + 1,
                    body=lambda: frames.body_of(entry.parts), mandatory=True,
                    callback=self.on_outcome, context=entry)
            except (WindowClosed, pika.exceptions.ChannelWrongStateError):
                return  # the session is ending; the source requeues the message
            except WindowFull:  # not reached: the shovel pauses on a full window
                self.pending.appendleft(entry)
                self.pause("window")
                return
            if not entry.attempts:
                self.counters["forwarded"] += 1
            if not window.has_room:
                self.pause("window")
            return
        connection = self.connection
        if connection.is_closing or connection.is_closed:
            return  # the session is ending; the source requeues the message
        out = self.out
        if not out:
            self.ioloop.call_later(0, self._flush_frames)
        out.append(method)
        out.extend(parts)
        counters = self.counters
        counters["moved"] += 1
        counters["forwarded"] += 1
        if self.ack_on_publish:
            self.settler.ack(entry)

    def _flush_frames(self) -> None:
        """Write the publishes of this ioloop turn to the destination in one piece (without
        confirms; with them, :meth:`ConfirmWindow.flush_frames` does it)."""
        out, self.out = self.out, []
        connection = self.connection
        if not out or not self.alive or connection.is_closing or connection.is_closed:
            return
        frames.emit(connection, b"".join(out), len(out))
        if pika_internals.write_buffer_size(connection) > WRITE_BUFFER_HIGH:
            self.pause("buffer")
            self._watch_buffer()

    def _on_unconfirmed_return(self, _channel: Any, method: Any, _props: Any, _body: bytes
                               ) -> None:
        """basic.return without confirms: the message is already acknowledged at the source."""
        if not self.alive:
            return
        self.counters["returned"] += 1
        LOGGER.warning("shovel %r: the destination returned a message (%s %s); without "
                       "confirms it is already acknowledged at the source", self.cfg.name,
                       method.reply_code, method.reply_text)

    # -- flow control --------------------------------------------------------------------------

    def pause(self, reason: str) -> None:
        self.pause_reasons.add(reason)

    def resume(self, reason: str) -> None:
        self.pause_reasons.discard(reason)
        if not self.alive:
            return
        pending = self.pending
        while pending and not self.pause_reasons:
            self.publish(pending.popleft())
            if not self.alive:
                return
        self.on_resumed()

    def _on_blocked(self, _connection: Any, frame: Any) -> None:
        if not self.alive:
            return
        reason = getattr(frame.method, "reason", "") or "resources low"
        LOGGER.warning("shovel %r: destination blocked (%s)", self.cfg.name, reason)
        self.blocked = True
        self.pause("blocked")
        if self.session.running:
            self.status.set_state(ShovelState.BLOCKED)

    def _on_unblocked(self, _connection: Any, _frame: Any) -> None:
        if not self.alive:
            return
        LOGGER.info("shovel %r: destination unblocked", self.cfg.name)
        self.blocked = False
        if self.session.running:
            self.status.set_state(ShovelState.RUNNING)
        self.resume("blocked")

    def _watch_buffer(self) -> None:
        if self.buffer_timer is not None:
            return

        def check() -> None:
            self.buffer_timer = None
            if not self.alive:
                return
            if pika_internals.write_buffer_size(self.connection) <= WRITE_BUFFER_LOW:
                self.resume("buffer")
            else:
                self.buffer_timer = self.session.later(0.005, check)

        self.buffer_timer = self.session.later(0.005, check)

    def timers_cancelled(self) -> None:
        """The session cancelled every timer: the buffer watch runs no more."""
        self.buffer_timer = None
