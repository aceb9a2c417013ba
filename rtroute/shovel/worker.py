"""One shovel as a state machine: consume from a source broker, publish to a destination.

A :class:`ShovelWorker` owns one pika ``IOLoop`` (and its thread, see :meth:`ShovelWorker.start`);
both ends of the shovel are ``SelectConnection``s on that loop, so a message goes from the
source's socket to the destination's without crossing threads. Each connect attempt is a
:class:`_Session`; when anything fails (a connection or channel closes, a declaration is
refused, the consumer is cancelled) the session drops both ends, the broker requeues whatever
the source had not acknowledged, and after ``reconnect_delay`` seconds a new session starts.
A failure is logged once, as one line (the reason, and when the next attempt comes).

A start that fails half way (a refused declaration, the other side unreachable) stops where it
is: no further declaration is sent on a closing channel. What it declared stays, except the
server-named queues (``queue.declare`` with an empty name, not exclusive): a new start
declares new ones, so each would be left behind for good. They are unbound and deleted if
empty, on the connection still open, else at the next start; one that holds messages is
kept and named in the log. Named queues and exchanges are never deleted: they may be a
user's, and the next start declares them again anyway.

States (see :class:`~rtroute.shovel.status.ShovelState`): ``starting`` while a session connects
and declares, ``running`` while it moves messages, ``blocked`` while the destination has sent
``connection.blocked``, and ``terminated`` (with the reason) between sessions or for good
(``reconnect_delay = 0``, ``src-delete-after`` reached, or stopped).

Messages pass through as frames (:mod:`rtroute.amqp.frames`): the content header and body
frames the source sent are written to the destination behind a new ``basic.publish``; the
properties are decoded only for a selector filter or when the shovel changes them.

Acknowledgements (``ack_mode``):

- ``on_confirm``: the destination channel is in confirm mode; a source message is acknowledged
  only once the destination confirmed it. Acks go out with ``multiple`` once per ioloop turn.
- ``on_publish``: the source message is acknowledged once handed to the destination socket.
- ``no_ack``: the source delivers without acknowledgements.

Where the plugin loses or loops messages, this worker does not:

- every publish is ``mandatory``; a returned (unroutable) message is nacked to the source
  without requeue (its dead-letter exchange takes it) by default, see ``on_unroutable``;
- a destination nack is retried with exponential back-off ``nack_retries`` times; then the
  message is *refused*: requeued at the source, held longer each round while the destination
  keeps refusing (``on_refused = "requeue"``), or dead-lettered there (``"dead_letter"``);
- the shovel never drops a message by itself: it nacks without requeue only when the source
  queue has a dead-letter exchange (asked of the source's management API, see
  :meth:`_Session._source_has_dlx`), and requeues otherwise;
- ``durable_queue`` consumes ``src-exchange`` through a durable named queue that keeps what
  arrives while the shovel is away;
- a fractional ``reconnect_delay`` is honoured; passwords never reach logs, status or headers.

Flow control: while the destination is blocked the worker publishes nothing; deliveries that
arrive meanwhile wait in order and go first once it is unblocked. The prefetch window bounds
them; without one (``no_ack``, ``prefetch_count = 0``) the worker stops reading the source
socket after :data:`PENDING_LIMIT` waiting messages, so TCP back-pressure holds the rest in the
source broker.
"""
from __future__ import annotations

import collections
import logging
import random
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
from pika.adapters.select_connection import IOLoop

from rtroute.amqp import (
    ManagementClient,
    ManagementError,
    declare_async,
    frames,
    parse_uri,
    pika_internals,
)
from rtroute.amqp.broker_identity import identity_from_server_properties
from rtroute.amqp.confirm_window import (
    ConfirmWindow,
    Outcome,
    PublishFuture,
    WindowClosed,
    WindowFull,
)
from rtroute.amqp.content_header import ContentHeader, decode_properties
from rtroute.amqp.field_table import FieldTable, Int64
from rtroute.amqp.settle import Delivery, Settler
from rtroute.amqp.uri import AmqpUri
from rtroute.shovel.config import ShovelConfig
from rtroute.shovel.status import ShovelState, ShovelStatus, scrub, uri_without_credentials

__all__ = ["PENDING_LIMIT", "ShovelWorker", "forward_header_table", "uri_without_credentials"]

LOGGER = logging.getLogger("rtroute.shovel")

#: Waiting deliveries after which an unbounded source (no prefetch) is no longer read.
PENDING_LIMIT = 2000
#: Seconds a message the shovel gives back (filter ``leave``, ``on_unroutable = "requeue"``)
#: is held before it is requeued, so that a lone consumer does not spin on it.
HOLD_DELAY = 1.0
#: Longest wait between two republishes of a nacked message, and longest hold of a refused
#: message before it is requeued.
RETRY_DELAY_MAX = 30.0
#: Seconds an answer of the source's management API (dead-letter exchange or not) is trusted.
DLX_CHECK_TTL = 60.0
#: Seconds between two warnings about refused messages (the counters keep the full count).
REFUSED_LOG_INTERVAL = 60.0
#: Confirm window when ``prefetch_count`` is 0 (unlimited).
UNLIMITED_WINDOW = 5000
#: Destination socket buffer (bytes) above which publishing without confirms pauses.
WRITE_BUFFER_HIGH = 4 << 20
WRITE_BUFFER_LOW = 1 << 20
#: How long :meth:`ShovelWorker.stop` waits for confirms before closing anyway.
STOP_TIMEOUT = 10.0
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


class _Entry(Delivery):
    """One source delivery on its way: where it was published and its content frames as
    received (see :mod:`rtroute.amqp.frames`). ``parked`` (see
    :class:`~rtroute.amqp.settle.Settler`) while it waits for a retry or a requeue."""

    __slots__ = ("attempts", "exchange", "parts", "routing_key")

    def __init__(self, tag: int, exchange: bytes, routing_key: bytes, parts: list) -> None:
        # Delivery's fields set here: one call less per message
        self.tag = tag
        self.awaiting = 0
        self.failed = self.settled = self.parked = False
        self.exchange = exchange        # short strings, length octet included
        self.routing_key = routing_key
        self.parts = parts              # header frame, body frames
        self.attempts = 0


class _Filter:
    """The optional message filter (selector and/or key pattern)."""

    def __init__(self, config: ShovelConfig) -> None:
        spec = config.filter
        assert spec is not None
        self.leave = spec.on_mismatch == "leave"
        self._selector = None
        self._facts = None
        if spec.selector is not None:
            from rtroute.selector import MessageFacts, compile

            self._selector = compile(spec.selector)
            self._facts = MessageFacts
        self._key_matcher = None
        if spec.key is not None:
            from rtroute.core import ForwardMatcher, ReverseMatcher

            matcher = ForwardMatcher() if spec.kind == "topic" else ReverseMatcher()
            matcher.add(spec.key)
            self._key_matcher = matcher

    def matches(self, entry: _Entry) -> bool:
        if self._key_matcher is not None:
            key = entry.routing_key[1:].decode("utf-8", "replace")
            if not self._key_matcher.match(key):
                return False
        if self._selector is not None:
            header = entry.parts[0]
            properties = decode_properties(header)  # without loss: a double stays a double
            facts = self._facts(properties=properties, body_size=frames.body_size(header),
                                exchange=entry.exchange[1:].decode("utf-8", "replace"))
            body = frames.body_of(entry.parts) if self._selector.needs_body else None
            return bool(self._selector.matches(properties.headers or {}, message=facts,
                                               body=body))
        return True


class ShovelWorker:
    """Runs one shovel until stopped.

    Args:
        config: the shovel.
        status: where state and counters go (default: a fresh :class:`ShovelStatus`).
        connection_name: the ``connection_name`` client property of both connections, as
            the brokers show it (default ``Shovel NAME``, the plugin's own).
        shovelled_by: ``shovelled-by`` of the ``x-shovelled`` header (default: the source
            broker's cluster name, as when the plugin runs on the source).
        rng: picks the broker of each side on every connect.

    Raises:
        ValueError: a malformed broker URI.
    """

    def __init__(
        self,
        config: ShovelConfig,
        status: ShovelStatus | None = None,
        connection_name: str | None = None,
        shovelled_by: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.status = status or ShovelStatus(config)
        self.connection_name = connection_name or f"Shovel {config.name}"
        self.shovelled_by = shovelled_by
        self.source_uris = [parse_uri(u) for u in config.sources.brokers]
        self.dest_uris = [parse_uri(u) for u in config.destinations.brokers]
        self._uri_text = dict(zip(map(id, self.source_uris), config.sources.brokers))
        self._uri_text.update(zip(map(id, self.dest_uris), config.destinations.brokers))
        self.rng = rng or random.Random()
        self.filter = _Filter(config) if config.filter is not None else None
        self.ioloop = IOLoop()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._ran = False
        self._finished = False
        self._session: _Session | None = None
        self._sessions = 0
        self.connected_once = False
        self._timer: Any = None
        self._stopping = False
        self._done = threading.Event()
        # messages still to take when src-delete-after is a number / the queue length
        delete_after = config.src_delete_after
        self.remaining: int | None = delete_after if isinstance(delete_after, int) else None
        self.measure_queue = delete_after == "queue-length"
        # role -> server-named queues declared by failed starts and not removed yet -> the
        # bindings those starts gave them (exchange, routing key, arguments)
        self.leftover_queues: dict[str, dict[str, list[tuple[str, str, Any]]]] = {
            "source": {}, "destination": {}}
        self.refused_logged_at = -REFUSED_LOG_INTERVAL

    def uri_text(self, uri: AmqpUri) -> str:
        """The configured text of a parsed broker URI (with its credentials: never log it)."""
        return self._uri_text[id(uri)]

    # -- control (any thread) ------------------------------------------------------------------

    def start(self) -> ShovelWorker:
        """Run the shovel in a daemon thread named after it; returns at once."""
        self._thread = threading.Thread(target=self.run, name=f"shovel-{self.config.name}",
                                        daemon=True)
        self._thread.start()
        return self

    def run(self) -> None:
        """Run the shovel in this thread until it stops or terminates for good."""
        with self._lock:
            if self._ran:
                raise RuntimeError("ShovelWorker.run() can be called once")
            self._ran = True
        self.ioloop.add_callback_threadsafe(self._begin_session)
        try:
            while True:
                try:
                    self.ioloop.start()
                    break
                except Exception as exc:
                    LOGGER.exception("shovel %r: error in the ioloop", self.config.name)
                    session = self._session
                    if session is not None and session.alive:
                        session.fail(f"internal error: {_reason(exc)}")
                    elif self._stopping and (session is None or session.closed):
                        break
        finally:
            with self._lock:
                self._finished = True
                self.ioloop.close()
            self._done.set()

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop taking messages, wait up to ``timeout`` s for confirms, then close both ends.

        Returns at once; :meth:`join` waits. A no-op once stopped.
        """
        with self._lock:
            if not self._finished:
                self.ioloop.add_callback_threadsafe(lambda: self._stop(timeout))

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the worker's loop has ended; True if it has."""
        return self._done.wait(timeout)

    @property
    def finished(self) -> bool:
        """True once the worker's loop has ended."""
        return self._done.is_set()

    def call_in_loop(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` in the worker's ioloop thread (from any thread); dropped once the
        loop has ended."""
        with self._lock:
            if not self._finished:
                self.ioloop.add_callback_threadsafe(callback)

    # -- lifecycle (ioloop thread) -------------------------------------------------------------

    def _begin_session(self) -> None:
        self._timer = None
        if self._stopping:
            return
        # src-delete-after 0 still connects once and declares, as the plugin does
        if self.remaining == 0 and self.connected_once:
            self._delete_after_reached()
            return
        self._sessions += 1
        self.status.set_state(ShovelState.STARTING)
        self._session = _Session(self, self._sessions)
        self._session.start()

    def session_ended(self, session: _Session, reason: str, *, fatal: bool = False,
                      failed: bool = False) -> None:
        """A session failed (or was stopped); decide whether and when to reconnect, and log
        a failure once."""
        if session is not self._session:
            return
        self.status.current_source = None
        self.status.current_destination = None
        if self._stopping:
            if failed:
                LOGGER.warning("shovel %r: %s (while stopping)", self.config.name, reason)
            self.status.set_state(ShovelState.TERMINATED, reason)
            self._finish_when_closed(session)
            return
        if self.remaining == 0 and self.connected_once:
            self._delete_after_reached(session)
            return
        delay = self.config.reconnect_delay
        if fatal or delay <= 0:
            LOGGER.error("shovel %r terminated: %s", self.config.name, reason)
            self.status.set_state(ShovelState.TERMINATED, reason)
            self._stopping = True
            self._finish_when_closed(session)
            return
        LOGGER.warning("shovel %r terminated: %s; reconnecting in %g s", self.config.name,
                       reason, delay)
        self.status.set_state(ShovelState.TERMINATED, reason)
        self._timer = self.ioloop.call_later(delay, self._begin_session)

    def _delete_after_reached(self, session: _Session | None = None) -> None:
        moved = self.status.counters["acked"] + self.status.counters["dead_lettered"]
        self.status.completed = True
        self.status.set_state(ShovelState.TERMINATED,
                              f"src-delete-after reached: {moved} messages taken from the source")
        LOGGER.info("shovel %r finished (src-delete-after)", self.config.name)
        self._stopping = True
        if session is not None and session.alive:
            session.stop_gracefully(STOP_TIMEOUT, "src-delete-after reached")
            return
        self._finish_when_closed(session)

    def _finish_when_closed(self, session: _Session | None) -> None:
        if session is None or session.closed:
            self.ioloop.stop()
            return
        session.on_closed = self.ioloop.stop
        # a broker that does not answer close must not keep the thread forever
        self.ioloop.call_later(STOP_TIMEOUT, self.ioloop.stop)

    def _stop(self, timeout: float) -> None:
        if self._stopping and self._session is None:
            return
        self._stopping = True
        if self._timer is not None:
            self.ioloop.remove_timeout(self._timer)
            self._timer = None
        session = self._session
        if session is None or not session.alive:
            if self.status.state is not ShovelState.TERMINATED:
                self.status.set_state(ShovelState.TERMINATED, "stopped")
            self._finish_when_closed(session)
            return
        session.stop_gracefully(timeout, "stopped")


class _Session:
    """One connect attempt: both connections, their channels, and the messages in flight."""

    def __init__(self, worker: ShovelWorker, number: int) -> None:
        self.w = worker
        self.cfg = cfg = worker.config
        self.status = worker.status
        self.counters = worker.status.counters
        self.ioloop = worker.ioloop
        self.number = number
        self.alive = True
        self.closed = False
        self.on_closed: Callable[[], Any] | None = None
        self.connections: dict[str, Any] = {}
        self.open_connections: set[str] = set()
        self.readers: dict[str, frames.FrameReader] = {}
        self.src_ch: Any = None
        self.dst_ch: Any = None
        self.dst_conn: Any = None
        self.src_uri: AmqpUri | None = None
        self.dst_uri: AmqpUri | None = None
        self.queue: str | None = None
        self.consumer_tag: str | None = None
        self.src_ready = False
        self.dst_ready = False
        self.running = False
        self.draining = False
        self.drain_reason = "stopped"
        self.blocked = False
        self.reading = True
        self.read_pause_refused = False
        self.pause_reasons: set[str] = set()
        self.pending: collections.deque[_Entry] = collections.deque()
        # acks to the source in delivery order (the source channel once open)
        self.settler = Settler(self.ioloop, on_error=self._settling_failed,
                               after_acks=self._after_acks)
        self.held: list[_Entry] = []
        self.hold_timer: Any = None
        # refused messages (and ones to dead-letter without a dead-letter exchange) wait here
        # before they are requeued; the wait doubles each round the destination accepts nothing
        self.backoff_held: list[_Entry] = []
        self.backoff_timer: Any = None
        self.backoff_delay = HOLD_DELAY
        # does the source queue have a dead-letter exchange: (answer, monotonic time) or None;
        # messages to dead-letter wait in dlx_waiting while the management API is asked
        self.dlx_answer: tuple[bool, float] | None = None
        self.dlx_asking = False
        self.dlx_waiting: list[_Entry] = []
        self.buffer_timer: Any = None
        # per role: server-named queues this start declared -> the bindings it gave them, and
        # the declaration being run (named when the channel closes under it)
        self.created: dict[str, dict[str, list[tuple[str, str, Any]]]] = {
            "source": {}, "destination": {}}
        self.declaring: dict[str, str] = {}
        self.naming: set[str] = set()   # roles awaiting the name of a server-named queue
        self.timers: dict[int, Any] = {}
        # publisher confirms and returns (on_confirm), once the destination channel is open
        self.confirm_window: ConfirmWindow | None = None
        # the prefetch window bounds the publishes awaiting a confirm; without one, this does
        self.window_size = cfg.prefetch_count + 1 if cfg.prefetch_count else UNLIMITED_WINDOW
        self.ack_mode = cfg.ack_mode
        self.filter = worker.filter
        self.confirms = cfg.ack_mode == "on_confirm"
        # no_ack with a delete-after limit still acks (at once), to take exactly N messages
        self.auto_ack = cfg.ack_mode == "no_ack" and worker.remaining is None \
            and not worker.measure_queue
        self.acked_mode = not self.auto_ack
        self.ack_on_publish = cfg.ack_mode == "on_publish"
        self.unbounded = self.auto_ack or cfg.prefetch_count == 0
        self.take_budget: int | None = None
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
        self.method_frames: frames.PublishFrames | None = None  # once the channel is open
        self.out: list[bytes] = []          # frames to write at the end of this ioloop turn
        self.dst_channel = 0
        self.same_framing = True
        self.frame_max = 0

    # -- connecting ----------------------------------------------------------------------------

    def start(self) -> None:
        self._open("source", self.w.source_uris, self._source_open)
        self._open("destination", self.w.dest_uris, self._dest_open)

    def _alive(self, callback: Callable[..., Any]) -> Callable[..., None]:
        """``callback`` as a pika callback of the start: a no-op once the session has ended, and
        a call that pika refuses (a channel closing under it) ends the session in one log line
        instead of a traceback."""
        def run(*args: Any) -> None:
            if not self.alive:
                return
            try:
                callback(*args)
            except pika.exceptions.AMQPError as exc:
                self.fail(f"start failed: {_reason(exc)}")

        return run

    def _open(self, role: str, uris: list[AmqpUri], on_channel: Callable[[Any, Any], Any]
              ) -> None:
        order = list(uris)
        self.w.rng.shuffle(order)
        errors: list[str] = []

        def attempt() -> None:
            if not self.alive:
                return
            if not order:
                self.fail(f"{role}: could not connect: {'; '.join(errors)}")
                return
            uri = order.pop(0)
            try:
                parameters = uri.connection_parameters(self.w.connection_name)
            except ValueError as exc:
                errors.append(f"{uri.masked()}: {exc}")
                attempt()
                return
            connection = pika.SelectConnection(
                parameters,
                on_open_callback=lambda conn: opened(conn, uri),
                on_open_error_callback=lambda conn, error: open_failed(uri, error),
                on_close_callback=lambda conn, reason: closed(reason),
                custom_ioloop=self.ioloop,
            )
            self.connections[role] = connection
            self.open_connections.add(role)

        def opened(connection: Any, uri: AmqpUri) -> None:
            if not self.alive:
                # the session ended while this connection was opening (closing it then trips
                # pika's connection workflow): close it now
                connection.close()
                return
            try:
                self.readers[role] = frames.install(connection)
            except RuntimeError as exc:
                self.fail(str(exc), fatal=True)
                return
            if role == "source":
                self.src_uri = uri
                self.status.current_source = uri.masked()
            else:
                self.dst_uri = uri
                self.dst_conn = connection
                self.status.current_destination = uri.masked()
                connection.add_on_connection_blocked_callback(self._on_blocked)
                connection.add_on_connection_unblocked_callback(self._on_unblocked)
            LOGGER.info("shovel %r: %s connected to %s", self.cfg.name, role, uri.masked())
            # the shovel's channel first, so that both ends get the same channel number
            connection.channel(on_open_callback=self._alive(
                lambda ch: channel_open(connection, ch)))
            leftovers = self.w.leftover_queues[role]
            if leftovers:
                self._remove_queues(role, connection, leftovers)

        def channel_open(connection: Any, channel: Any) -> None:
            channel.add_on_close_callback(
                lambda _ch, reason: channel_closed(connection, reason))
            on_channel(connection, channel)

        def channel_closed(connection: Any, reason: Any) -> None:
            if role in self.naming:
                self.naming.discard(role)   # no answer comes on a closed channel
                if not self.alive:   # _shutdown kept the connection open for that answer
                    self._clean_up_and_close(role, connection)
                    return
            step = self.declaring.get(role)
            during = f" during {step}" if step else ""
            self.fail(f"{role} channel closed{during}: {_reason(reason)}")

        def open_failed(uri: AmqpUri, error: Any) -> None:
            self._connection_gone(role)
            if not self.alive:
                return
            errors.append(f"{uri.masked()}: {_reason(error)}")
            if order:  # the last failure is in the session's failure line
                LOGGER.info("shovel %r: %s %s failed: %s; trying the next broker",
                            self.cfg.name, role, uri.masked(), _reason(error))
            attempt()

        def closed(reason: Any) -> None:
            self._connection_gone(role)
            self.fail(f"{role} connection closed: {_reason(reason)}")

        attempt()

    def _connection_gone(self, role: str) -> None:
        self.open_connections.discard(role)
        if not self.alive and not self.open_connections and not self.closed:
            self.closed = True
            if self.on_closed is not None:
                self.on_closed()

    def _source_open(self, connection: Any, channel: Any) -> None:
        self.src_ch = channel
        self.settler.reset(channel)
        if self.w.shovelled_by is None:
            props = getattr(connection, "server_properties", None) or {}
            name = props.get("cluster_name")
            if isinstance(name, bytes):
                name = name.decode("utf-8", "replace")
            self.w.shovelled_by = name or f"rtroute@{socket.gethostname()}"
        self._declare("source", connection, channel, self.cfg.sources.declarations,
                      self._source_declared)

    def _source_declared(self, last_queue: str | None) -> None:
        cfg, channel = self.cfg, self.src_ch
        if cfg.src_exchange is not None:
            def bind(frame: Any) -> None:
                queue = frame.method.queue
                channel.queue_bind(queue, cfg.src_exchange, routing_key=cfg.src_exchange_key,
                                   callback=self._alive(lambda _f: self._source_queue(queue)))

            if cfg.durable_queue is not None:
                channel.queue_declare(cfg.durable_queue, durable=True, callback=self._alive(bind))
            else:
                channel.queue_declare("", exclusive=True, callback=self._alive(bind))
        elif cfg.queue == "":
            if last_queue is None:
                self.fail('queue is "" (the most recently declared queue) but the source '
                          "declarations declare no queue", fatal=True)
                return
            self._source_queue(last_queue)
        else:
            self._source_queue(cfg.queue or "")

    def _source_queue(self, queue: str) -> None:
        self.queue = queue
        if self.auto_ack:
            self._source_qos_done()
        else:
            self.src_ch.basic_qos(prefetch_count=self.cfg.prefetch_count,
                                  callback=self._alive(lambda _f: self._source_qos_done()))

    def _source_qos_done(self) -> None:
        if self.w.measure_queue and self.w.remaining is None:
            def measured(frame: Any) -> None:
                self.w.remaining = frame.method.message_count
                self.w.measure_queue = False
                self._source_ready()

            self.src_ch.queue_declare(self.queue, passive=True, callback=self._alive(measured))
        else:
            self._source_ready()

    def _source_ready(self) -> None:
        self.take_budget = self.w.remaining
        self.src_ready = True
        self._maybe_run()

    def _dest_open(self, connection: Any, channel: Any) -> None:
        self.dst_ch = channel
        self._declare("destination", connection, channel, self.cfg.destinations.declarations,
                      self._dest_declared)

    def _dest_declared(self, _last_queue: str | None) -> None:
        if not self.confirms:
            self.dst_ch.add_on_return_callback(self._on_unconfirmed_return)
            self._dest_ready()
            return
        window = ConfirmWindow(self.dst_ch, window=self.window_size,
                               low_watermark=self.window_size // 2,
                               on_writable=lambda: self.resume("window"))
        window.read_confirms_from(self.readers["destination"])
        self.confirm_window = window
        window.start(on_ready=self._alive(self._dest_ready))

    def _dest_ready(self) -> None:
        self.dst_ready = True
        self._maybe_run()

    def _declare(self, role: str, connection: Any, channel: Any,
                 declarations: list[dict[str, Any]], on_done: Callable[[str | None], Any]
                 ) -> None:
        """Run declarations one at a time, none once the session has ended; ``queue.declare``
        with ``if_missing`` declares only when a passive declare (on a channel of its own,
        since a 404 closes it) finds nothing. Server-named queues go to ``self.created``."""
        steps = list(declarations)
        created = self.created[role]

        def on_error(exc: Any) -> None:
            self.fail(f"{role} declaration {self.declaring.get(role, '')} failed: "
                      f"{_reason(exc)}")

        def run(index: int, last_queue: str | None) -> None:
            if index == len(steps):
                self.declaring.pop(role, None)
                on_done(last_queue)
                return
            step = steps[index]
            self.declaring[role] = _describe(step)

            def done(queue: str | None) -> None:
                if self.alive:
                    self.naming.discard(role)
                    _note_declared(created, step, queue, last_queue)
                    self._alive(run)(index + 1, queue)
                elif role in self.naming:
                    # answered after the start failed (see _shutdown): the queue exists
                    self.naming.discard(role)
                    _note_declared(self.w.leftover_queues[role], step, queue, last_queue)
                    self._clean_up_and_close(role, connection)

            if _names_a_queue(step):
                self.naming.add(role)

            if step.get("if_missing"):
                self._ensure_queue(connection, step, self._alive(done), on_error)
            else:
                declaration = {k: v for k, v in step.items() if k != "if_missing"}
                declare_async(channel, [declaration], done, on_error, last_queue=last_queue)

        self._alive(run)(0, None)

    def _ensure_queue(self, connection: Any, step: dict[str, Any],
                      on_ok: Callable[[str], Any], on_error: Callable[[Any], Any]) -> None:
        name = step["queue"]

        def passive(channel: Any) -> None:
            answered = []

            def on_close(_ch: Any, reason: Any) -> None:
                if answered or not self.alive:
                    return
                if getattr(reason, "reply_code", None) == 404:
                    connection.channel(on_open_callback=self._alive(create))
                else:
                    on_error(reason)

            def ok(frame: Any) -> None:
                answered.append(True)
                channel.close()
                on_ok(frame.method.queue)

            channel.add_on_close_callback(self._alive(on_close))
            channel.queue_declare(name, passive=True, callback=self._alive(ok))

        def create(channel: Any) -> None:
            answered = []

            def on_close(_ch: Any, reason: Any) -> None:
                if not answered:
                    on_error(reason)

            def ok(frame: Any) -> None:
                answered.append(True)
                channel.close()
                on_ok(frame.method.queue)

            channel.add_on_close_callback(self._alive(on_close))
            channel.queue_declare(name, durable=step.get("durable", True),
                                  exclusive=step.get("exclusive", False),
                                  auto_delete=step.get("auto_delete", False),
                                  arguments=step.get("arguments") or None,
                                  callback=self._alive(ok))

        connection.channel(on_open_callback=self._alive(passive))

    def _remove_queues(self, role: str, connection: Any,
                       queues: dict[str, list[tuple[str, str, Any]]],
                       then: Callable[[], Any] | None = None) -> None:
        """Unbind and delete (only if empty) server-named queues that failed starts left on
        ``connection``'s broker, one channel each, whether or not the session is alive; then
        call ``then``. A queue is forgotten once deleted, found gone or kept (it holds
        messages: it is named in the log); on a connection that closes meanwhile the rest
        wait for the next start."""
        tried: set[str] = set()
        name_of = self.cfg.name

        def next_queue() -> None:
            # the dict may grow meanwhile (a declare-ok that came after the failure)
            name = next((n for n in queues if n not in tried), None)
            if name is None:
                if then is not None:
                    then()
                return
            tried.add(name)
            bindings = queues[name]
            on_channel(lambda ch: remove(ch, name, bindings))

        def on_channel(callback: Callable[[Any], Any]) -> None:
            try:
                connection.channel(on_open_callback=callback)
            except pika.exceptions.AMQPError:   # the connection is going
                if then is not None:
                    then()

        def remove(channel: Any, name: str, bindings: list[tuple[str, str, Any]]) -> None:
            finished: list[bool] = []
            unbinding: list[int] = []   # the index of the binding being removed, if any

            def on_close(_ch: Any, reason: Any) -> None:
                if finished:
                    return
                finished.append(True)
                code = getattr(reason, "reply_code", None)
                if code == 404 and unbinding:
                    # no such exchange (its bindings went with it) or no such queue: go on
                    rest = bindings[unbinding[-1] + 1:]
                    on_channel(lambda ch: remove(ch, name, rest))
                    return
                if code == 406:
                    queues.pop(name, None)
                    LOGGER.warning("shovel %r: kept %s queue %r that a failed start declared: "
                                   "it holds messages (unbound; delete it once drained)",
                                   name_of, role, name)
                next_queue()

            def step(index: int, _frame: Any = None) -> None:
                if finished or not channel.is_open:
                    return
                try:
                    if index < len(bindings):
                        unbinding.append(index)
                        exchange, key, arguments = bindings[index]
                        channel.queue_unbind(name, exchange, key, arguments,
                                             callback=lambda f: step(index + 1, f))
                    else:
                        unbinding.clear()
                        channel.queue_delete(name, if_empty=True, callback=deleted)
                except pika.exceptions.AMQPError:
                    finished.append(True)   # the connection is going: left for the next start

            def deleted(_frame: Any) -> None:
                finished.append(True)
                if queues.pop(name, None) is not None:
                    LOGGER.info("shovel %r: deleted %s queue %r that a failed start declared",
                                name_of, role, name)
                if channel.is_open:
                    channel.close()
                next_queue()

            channel.add_on_close_callback(on_close)
            step(0)

        next_queue()

    def _maybe_run(self) -> None:
        if not (self.alive and self.src_ready and self.dst_ready):
            return
        self.running = True
        if self.w.connected_once:
            self.counters["reconnects"] += 1
        self.w.connected_once = True
        src_conn, dst_conn = self.connections["source"], self.dst_conn
        self.dst_channel = self.dst_ch.channel_number
        self.method_frames = frames.PublishFrames(self.dst_channel, METHOD_CACHE)
        self.frame_max = dst_conn.params.frame_max
        # content frames pass through as received when channel and frame size allow
        self.same_framing = self.dst_channel == self.src_ch.channel_number \
            and src_conn.params.frame_max <= self.frame_max
        if self.cfg.add_forward_headers:
            assert self.src_uri is not None and self.dst_uri is not None
            self.forward_table = forward_header_table(
                self.cfg, self.w.shovelled_by or "", self.w.uri_text(self.src_uri),
                self.w.uri_text(self.dst_uri))
        self.status.set_state(ShovelState.BLOCKED if self.blocked else ShovelState.RUNNING)
        if self.take_budget == 0:
            self.w.remaining = 0
            self.stop_gracefully(STOP_TIMEOUT, "src-delete-after reached")
            return
        self.src_ch.add_on_cancel_callback(
            lambda _frame: self.fail("the source broker cancelled the consumer (queue deleted?)"))
        self.readers["source"].intercept(self.src_ch.channel_number, self._on_delivery)
        self.consumer_tag = self.src_ch.basic_consume(
            self.queue, self._on_unexpected_message, auto_ack=self.auto_ack,
            arguments=self.cfg.consumer_args or None)

    def _on_unexpected_message(self, _channel: Any, method: Any, _props: Any, _body: Any) -> None:
        # deliveries go to _on_delivery through the frame reader; pika never sees them
        self.fail(f"delivery {method.delivery_tag} bypassed the frame reader")

    # -- the hot path --------------------------------------------------------------------------

    def _on_delivery(self, tag: int, exchange: bytes, routing_key: bytes, parts: list) -> None:
        if not self.alive:
            return
        entry = _Entry(tag, exchange, routing_key, parts)
        if self.acked_mode:
            if self.take_budget is not None:
                if self.take_budget <= 0 or self.draining:
                    # beyond src-delete-after: give it back untouched
                    self.settler.nack(entry, requeue=True)
                    return
                self.take_budget -= 1
            self.settler.track(entry)
            if self.filter is not None and not self.filter.matches(entry):
                self.counters["filtered"] += 1
                if self.filter.leave:
                    self._hold(entry)
                else:
                    self.settler.ack(entry)
                return
            if self.ack_mode == "no_ack":
                self.settler.ack(entry)  # acknowledged on receipt: no_ack with a limit
        elif self.filter is not None and not self.filter.matches(entry):
            self.counters["filtered"] += 1
            return
        if self.transform_needed:
            self._transform(entry)
        if self.pause_reasons or self.pending:
            self.pending.append(entry)
            if self.unbounded and self.reading and len(self.pending) >= PENDING_LIMIT:
                self._set_reading(False)
            return
        self._publish(entry)

    def _transform(self, entry: _Entry) -> None:
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

    def _publish(self, entry: _Entry) -> None:
        exchange = self.fixed_exchange if self.fixed_exchange is not None else entry.exchange
        key = self.fixed_key if self.fixed_key is not None else entry.routing_key
        method = self.method_frames.get(exchange, key)  # type: ignore[union-attr]
        parts = entry.parts if self.same_framing \
            else frames.rechannel(entry.parts, self.dst_channel, self.frame_max)
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
                    callback=self._on_published, context=entry)
            except (WindowClosed, pika.exceptions.ChannelWrongStateError):
                return  # the session is ending; the source requeues the message
            except WindowFull:  # not reached: the shovel pauses on a full window
                self.pending.appendleft(entry)
                self.pause("window")
                return
            if not window.has_room:
                self.pause("window")
            return
        connection = self.dst_conn
        if connection.is_closing or connection.is_closed:
            return  # the session is ending; the source requeues the message
        out = self.out
        if not out:
            self.ioloop.call_later(0, self._flush_frames)
        out.append(method)
        out.extend(parts)
        self.counters["moved"] += 1
        if self.ack_on_publish:
            self.settler.ack(entry)

    def _flush_frames(self) -> None:
        """Write the publishes of this ioloop turn to the destination in one piece (without
        confirms; with them, :meth:`ConfirmWindow.flush_frames` does it)."""
        out, self.out = self.out, []
        connection = self.dst_conn
        if not out or not self.alive or connection.is_closing or connection.is_closed:
            return
        frames.emit(connection, b"".join(out), len(out))
        if pika_internals.write_buffer_size(connection) > WRITE_BUFFER_HIGH:
            self.pause("buffer")
            self._watch_buffer()

    def _on_published(self, future: PublishFuture) -> None:
        """The destination's outcome of one publish: settle its source message."""
        outcome = future.outcome
        if not self.alive or outcome is Outcome.FAILED:
            return  # the destination channel closed: the session ends, the source requeues
        entry: _Entry = future.context
        if outcome is Outcome.ACKED:
            self.counters["moved"] += 1
            self.backoff_delay = HOLD_DELAY
            self.settler.ack(entry)
        elif outcome is Outcome.RETURNED:
            self.counters["returned"] += 1
            LOGGER.warning("shovel %r: the destination returned a message (%s %s)",
                           self.cfg.name, future.reply_code, future.reply_text)
            mode = self.cfg.on_unroutable
            if mode == "drop":
                self.settler.ack(entry)
            elif mode == "requeue":
                self._hold(entry)
            else:
                self._reject_to_dlx(entry)
        else:
            self.counters["nacked"] += 1
            if entry.attempts >= self.cfg.nack_retries:
                self._refused(entry)
                return
            delay = min(RETRY_DELAY_MAX, self.cfg.nack_retry_delay * 2 ** entry.attempts)
            entry.attempts += 1
            self.settler.park(entry)
            self._later(delay, lambda: self._retry(entry))

    def _on_unconfirmed_return(self, _channel: Any, method: Any, _props: Any, _body: bytes
                               ) -> None:
        """basic.return without confirms: the message is already acknowledged at the source."""
        if not self.alive:
            return
        self.counters["returned"] += 1
        LOGGER.warning("shovel %r: the destination returned a message (%s %s); without "
                       "confirms it is already acknowledged at the source", self.cfg.name,
                       method.reply_code, method.reply_text)

    def _retry(self, entry: _Entry) -> None:
        if not self.alive or self.draining:
            return
        self.counters["retried"] += 1
        self.settler.unpark(entry)
        if self.pause_reasons or self.pending:
            self.pending.appendleft(entry)
            return
        self._publish(entry)

    # -- settling towards the source -----------------------------------------------------------

    def _after_acks(self, count: int) -> None:
        """After the acks of an ioloop turn went to the source (``count`` messages)."""
        if not self.alive:
            return
        self.counters["acked"] += count
        if self.take_budget is not None:
            # what a new session would still have to take if this one died now
            self.w.remaining = self.take_budget + self.settler.outstanding
        self._maybe_end()

    def _settling_failed(self, what: str, exc: Exception) -> None:
        self.fail(f"{what} failed: {_reason(exc)}")

    def _nack_now(self, entry: _Entry, requeue: bool) -> None:
        """Nack one message to the source (requeue or dead-letter) right away."""
        if not self.settler.nack(entry, requeue):
            return
        if requeue:
            self.counters["requeued"] += 1
            if self.take_budget is not None:
                self.take_budget += 1
        else:
            self.counters["dead_lettered"] += 1

    def _refused(self, entry: _Entry) -> None:
        """The destination nacked every attempt: requeue or dead-letter (``on_refused``)."""
        self.counters["refused"] += 1
        dead_letter = self.cfg.on_refused == "dead_letter"
        now = time.monotonic()
        if now - self.w.refused_logged_at >= REFUSED_LOG_INTERVAL:
            self.w.refused_logged_at = now
            LOGGER.warning("shovel %r: the destination refused a message %d times; %s at the "
                           "source (%d refused so far; warned once a minute)", self.cfg.name,
                           entry.attempts + 1,
                           "dead-lettering it" if dead_letter else "requeueing it",
                           self.counters["refused"])
        if dead_letter:
            self._reject_to_dlx(entry)
        else:
            self._requeue_later(entry)

    def _reject_to_dlx(self, entry: _Entry) -> None:
        """Nack without requeue when the source queue has a dead-letter exchange; without one
        that would drop the message, so it is requeued (after a wait) instead."""
        has_dlx = self._source_has_dlx()
        if has_dlx is None:
            self.dlx_waiting.append(entry)
            self.settler.park(entry)
        elif has_dlx:
            self._nack_now(entry, requeue=False)
        else:
            self._requeue_later(entry)

    def _source_has_dlx(self) -> bool | None:
        """Whether the source queue has a dead-letter exchange (an argument or a policy naming
        an exchange that exists), as its broker's management API says; None while asking.
        When the API cannot be asked (unreachable, refused, another broker's): False."""
        answer = self.dlx_answer
        if answer is not None and time.monotonic() - answer[1] < DLX_CHECK_TTL:
            return answer[0]
        if self.dlx_asking:
            return None
        self.dlx_asking = True
        assert self.src_uri is not None and self.queue is not None
        uri, queue, vhost = self.w.uri_text(self.src_uri), self.queue, self.src_uri.vhost
        where = self.src_uri.masked()
        identity = identity_from_server_properties(
            getattr(self.connections["source"], "server_properties", None))
        management_uri = self.cfg.src_management_uri

        def ask() -> None:
            problem = None
            try:
                client = ManagementClient.from_amqp_uri(uri, management_uri, timeout=5)
                client.expect_broker(identity, where, "src_management_uri")
                has_dlx = _has_dead_letter_exchange(client, queue, vhost)
            except (ManagementError, ValueError) as exc:
                has_dlx, problem = False, scrub(str(exc))
            self.w.call_in_loop(lambda: self._dlx_answered(has_dlx, problem))

        threading.Thread(target=ask, name=f"shovel-{self.cfg.name}-dlx", daemon=True).start()
        return None

    def _dlx_answered(self, has_dlx: bool, problem: str | None) -> None:
        self.dlx_asking = False
        if not self.alive:
            return
        if problem is not None:
            LOGGER.warning("shovel %r: cannot tell whether source queue %r has a dead-letter "
                           "exchange (%s); requeueing instead of dead-lettering",
                           self.cfg.name, self.queue, problem)
        elif not has_dlx and (self.dlx_answer is None or self.dlx_answer[0]):
            LOGGER.warning("shovel %r: source queue %r has no dead-letter exchange; "
                           "requeueing instead of dead-lettering", self.cfg.name, self.queue)
        self.dlx_answer = (has_dlx, time.monotonic())
        waiting, self.dlx_waiting = self.dlx_waiting, []
        for entry in waiting:
            if not self.alive or self.draining:
                return  # still parked: the source requeues them when its channel closes
            self._reject_to_dlx(entry)

    def _requeue_later(self, entry: _Entry) -> None:
        """Give the message back to the source queue after ``backoff_delay``, which doubles
        (up to :data:`RETRY_DELAY_MAX`) each round until the destination accepts one."""
        self.backoff_held.append(entry)
        self.settler.park(entry)
        if self.backoff_timer is None:
            self.backoff_timer = self._later(self.backoff_delay, self._release_backoff)

    def _release_backoff(self) -> None:
        self.backoff_timer = None
        if not self.alive:
            return
        self.backoff_delay = min(RETRY_DELAY_MAX, self.backoff_delay * 2)
        held, self.backoff_held = self.backoff_held, []
        for entry in held:
            self._nack_now(entry, requeue=True)
            if not self.alive:
                return

    def _hold(self, entry: _Entry) -> None:
        """Give the message back to the source queue after :data:`HOLD_DELAY`."""
        self.held.append(entry)
        self.settler.park(entry)
        if self.hold_timer is None:
            self.hold_timer = self._later(HOLD_DELAY, self._release_held)

    def _release_held(self) -> None:
        self.hold_timer = None
        if not self.alive:
            return
        held, self.held = self.held, []
        for entry in held:
            self._nack_now(entry, requeue=True)
            if not self.alive:
                return

    def _maybe_end(self) -> None:
        if self.draining:
            # done once nothing published awaits a confirm and every ack went out; what is
            # left (parked or never published) is requeued when the source channel closes
            if (self.confirm_window is None or not self.confirm_window.in_flight) \
                    and self.settler.idle:
                self._close(self.drain_reason)
            return
        if self.take_budget is not None and self.take_budget <= 0 and not len(self.settler) \
                and not self.pending:
            self.w.remaining = 0
            self.stop_gracefully(STOP_TIMEOUT, "src-delete-after reached")

    # -- flow control --------------------------------------------------------------------------

    def pause(self, reason: str) -> None:
        self.pause_reasons.add(reason)

    def resume(self, reason: str) -> None:
        self.pause_reasons.discard(reason)
        if not self.alive:
            return
        pending = self.pending
        while pending and not self.pause_reasons:
            self._publish(pending.popleft())
            if not self.alive:
                return
        if not self.reading and len(pending) < PENDING_LIMIT // 2:
            self._set_reading(True)
        if self.draining:
            self._maybe_end()

    def _on_blocked(self, _connection: Any, frame: Any) -> None:
        if not self.alive:
            return
        reason = getattr(frame.method, "reason", "") or "resources low"
        LOGGER.warning("shovel %r: destination blocked (%s)", self.cfg.name, reason)
        self.blocked = True
        self.pause("blocked")
        if self.running:
            self.status.set_state(ShovelState.BLOCKED)

    def _on_unblocked(self, _connection: Any, _frame: Any) -> None:
        if not self.alive:
            return
        LOGGER.info("shovel %r: destination unblocked", self.cfg.name)
        self.blocked = False
        if self.running:
            self.status.set_state(ShovelState.RUNNING)
        self.resume("blocked")

    def _watch_buffer(self) -> None:
        if self.buffer_timer is not None:
            return

        def check() -> None:
            self.buffer_timer = None
            if not self.alive:
                return
            if pika_internals.write_buffer_size(self.dst_conn) <= WRITE_BUFFER_LOW:
                self.resume("buffer")
            else:
                self.buffer_timer = self._later(0.005, check)

        self.buffer_timer = self._later(0.005, check)

    def _set_reading(self, on: bool) -> None:
        """Stop or restart reading the source socket (plain TCP only: over TLS the waiting
        deliveries keep growing in memory, which is said once)."""
        if pika_internals.set_reading(self.connections.get("source"), on):
            self.reading = on
        elif not on and not self.read_pause_refused:
            self.read_pause_refused = True
            LOGGER.warning("shovel %r: cannot stop reading the source (TLS, or the socket is "
                           "gone): deliveries keep arriving while %d wait", self.cfg.name,
                           len(self.pending))

    # -- ending --------------------------------------------------------------------------------

    def _later(self, delay: float, callback: Callable[[], Any]) -> Any:
        key = id(callback)

        def run() -> None:
            self.timers.pop(key, None)
            callback()

        timer = self.ioloop.call_later(delay, run)
        self.timers[key] = timer
        return timer

    def stop_gracefully(self, timeout: float, reason: str) -> None:
        """Stop taking messages, let confirms and acks finish, then close both ends."""
        if not self.alive or self.draining:
            return
        self.draining = True
        self.drain_reason = reason
        if self.src_ready and self.consumer_tag is not None and self.src_ch.is_open:
            try:
                self.src_ch.basic_cancel(self.consumer_tag)
            except pika.exceptions.AMQPError:
                pass
            self.consumer_tag = None
        # held and waiting messages go back to the source when its channel closes: they stay
        # unacknowledged (parked), so no multiple ack covers them
        for entry in self.pending:
            self.settler.park(entry)
        self.pending.clear()
        for timer in list(self.timers.values()):
            self.ioloop.remove_timeout(timer)
        self.timers.clear()
        self.hold_timer = None
        self.backoff_timer = None
        self.buffer_timer = None
        self._later(timeout, lambda: self._close(reason))
        self.settler.send_acks_soon()
        if not self.running:
            self._close(reason)

    def _close(self, reason: str) -> None:
        if not self.alive:
            return
        self.alive = False
        self._shutdown()
        self.w.session_ended(self, reason)

    def fail(self, reason: str, fatal: bool = False) -> None:
        """Drop both ends (the source requeues what it has not been acked) and end the session
        (the worker logs the reason)."""
        if not self.alive:
            return
        self.alive = False
        self._shutdown()
        self.w.session_ended(self, reason, fatal=fatal, failed=True)

    def _shutdown(self) -> None:
        self.settler.reset(None)  # the source requeues whatever was not acked
        for timer in list(self.timers.values()):
            self.ioloop.remove_timeout(timer)
        self.timers.clear()
        self.pending.clear()
        for role, connection in list(self.connections.items()):
            leftovers = self.w.leftover_queues[role]
            if not self.running:
                # a start that did not get to run: its server-named queues are of no use
                leftovers.update(self.created[role])
            if connection.is_closed:
                self.open_connections.discard(role)
            elif connection.is_open and not self.running and role in self.naming:
                # a server-named queue.declare is under way: its answer names the queue to
                # remove, and then the connection closes (see _declare)
                self.ioloop.call_later(STOP_TIMEOUT, lambda r=role, c=connection:
                                       self._close_connection(r, c))
            elif connection.is_open and not self.running and leftovers:
                self._clean_up_and_close(role, connection)
            elif connection.is_open:
                self._close_connection(role, connection)
            # closing: its close callback follows; opening: closed in opened() or fails
        if not self.open_connections and not self.closed:
            self.closed = True

    def _clean_up_and_close(self, role: str, connection: Any) -> None:
        """Remove the leftover server-named queues of ``role``, then close its connection
        (after :data:`STOP_TIMEOUT` at the latest)."""
        def close() -> None:
            self._close_connection(role, connection)

        self._remove_queues(role, connection, self.w.leftover_queues[role], then=close)
        self.ioloop.call_later(STOP_TIMEOUT, close)

    def _close_connection(self, role: str, connection: Any) -> None:
        if not connection.is_open:
            return
        try:
            connection.close()
        except pika.exceptions.AMQPError:
            self._connection_gone(role)


def _describe(step: dict[str, Any]) -> str:
    """A declaration as logs name it: ``queue.bind(queue='q', exchange='x', routing_key='')``."""
    shown = ", ".join(f"{k}={v!r}" for k, v in step.items()
                      if k != "method" and isinstance(v, str))
    return f"{step['method']}({shown})"


def _names_a_queue(step: dict[str, Any]) -> bool:
    """A declaration that creates a server-named queue which outlives its connection."""
    return step["method"] == "queue.declare" and not step.get("queue") \
        and not step.get("exclusive") and not step.get("passive")


def _note_declared(created: dict[str, list[tuple[str, str, Any]]], step: dict[str, Any],
                   queue: str | None, last_queue: str | None) -> None:
    """Keep track of the server-named, non-exclusive queues a start declares and of the
    bindings it gives them (an exclusive queue goes with its connection)."""
    method = step["method"]
    if method == "queue.declare":
        if queue and _names_a_queue(step):
            created[queue] = []
        return
    if method not in ("queue.bind", "queue.unbind", "queue.delete"):
        return
    target = step.get("queue") or last_queue
    bindings = created.get(target or "")
    if bindings is None:
        return
    if method == "queue.delete":
        del created[target or ""]
        return
    binding = (step["exchange"], step["routing_key"], step.get("arguments") or None)
    if method == "queue.bind":
        bindings.append(binding)
    elif binding in bindings:
        bindings.remove(binding)


def _has_dead_letter_exchange(client: ManagementClient, queue: str, vhost: str) -> bool:
    """Whether ``queue`` dead-letters to an existing exchange (``x-dead-letter-exchange`` or a
    policy's ``dead-letter-exchange``; the default exchange ``""`` always exists).

    Raises:
        ManagementError: the API could not answer (NotFound: no such queue).
    """
    info = client.queue(queue, vhost)
    arguments = info.get("arguments")
    policy = info.get("effective_policy_definition")
    exchange = arguments.get("x-dead-letter-exchange") if isinstance(arguments, dict) else None
    if exchange is None and isinstance(policy, dict):
        exchange = policy.get("dead-letter-exchange")
    if not isinstance(exchange, str):
        return False
    return exchange == "" or client.exchange_exists(exchange, vhost)


def _reason(error: Any) -> str:
    """A short, password-free text for an exception or close reason."""
    for _ in range(8):  # pika wraps the cause of a failed connect in workflow exceptions
        inner = getattr(error, "exceptions", None)
        if inner:
            error = inner[-1]
            continue
        inner = getattr(error, "exception", None)
        if isinstance(inner, BaseException):
            error = inner
            continue
        if isinstance(error, pika.exceptions.AMQPConnectionError) and error.args \
                and isinstance(error.args[0], BaseException):
            error = error.args[0]
            continue
        break
    if isinstance(error, pika.exceptions.ChannelClosedByBroker):
        return f"{error.reply_code} {error.reply_text}"
    if isinstance(error, pika.exceptions.ConnectionClosedByBroker):
        return f"{error.reply_code} {error.reply_text}"
    if isinstance(error, pika.exceptions.ProbableAuthenticationError):
        return "authentication failed (ACCESS_REFUSED)"
    if isinstance(error, pika.exceptions.ProbableAccessDeniedError):
        return "access to the virtual host refused"
    text = str(error) or type(error).__name__
    return scrub(text if isinstance(error, str) else f"{type(error).__name__}: {text}")
