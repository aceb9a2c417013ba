"""Publisher-side routing: rtopic at native speed, with real BCC and one broker crossing.

The sidecar routes on a second hop: publishers publish to ``NAME``, the sidecar consumes,
routes and republishes to ``NAME.bindings``, so every message crosses the broker twice. A
Python publisher can hold the binding table itself and publish once, straight to
``NAME.bindings`` with ``BCC`` = the binding keys its routing key matched: RabbitMQ then gives
each bound queue one copy and strips ``BCC``, exactly as on the sidecar's republish::

    with RTopicPublisher("amqp://guest:guest@127.0.0.1:5672/%2F", "logs") as pub:
        pub.publish("*.app1.mod1.info", b"body", headers={"BCC": ["#.error"]}).result(timeout=5)

How it works: one background thread runs a :class:`~rtroute.amqp.connection.ReconnectingConnection`
(reconnect with back-off), a :class:`~rtroute.amqp.binding_watcher.BindingWatcher` (the
management API's listing of ``NAME.bindings``, kept current by the event exchange and re-listed
as a fallback, as the sidecar does) and a :class:`~rtroute.amqp.confirm_window.ConfirmWindow`.
:meth:`RTopicPublisher.publish` may be called from any thread: it queues the message and wakes
the ioloop thread once per batch; that thread routes the batch with the native core (the
sidecar's :class:`~rtroute.routing.exchange_router.ExchangeRouter`, so both decide alike: the
same CC, BCC, huge-match-set and bad-header rules) and publishes with confirms.

Differences from publishing to ``NAME`` through the sidecar:

- ``BCC`` is real: the publisher reads it before the broker strips it, so no alias header is
  needed (the alias, ``x-rtroute-bcc``, works too and is stripped);
- a message that matches no binding is published to ``NAME.bindings`` without ``BCC``: its
  alternate exchange (if the sidecar's config gave it one) takes it, a ``mandatory`` publish
  comes back as :class:`PublishReturned`, and otherwise the broker drops it, as the x-rtopic
  plugin does;
- a malformed message (``CC``/``BCC`` not an array, a key over 255 bytes) fails its future with
  :class:`~rtroute.routing.PreconditionFailed`, where the broker would close the channel;
- when the connection is lost, the publishes in flight fail with :class:`PublishFailed` (the
  broker may or may not have routed them: publish again for at-least-once); messages not yet
  sent wait for the next connection.

Size: the thread-safe front, the I/O engine and the rewrite cache are still one class here;
issue #33 moves the engine onto rtroute.relay (as the shovel's), leaving a thin facade.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, Callable

import pika

from rtroute.amqp import frames
from rtroute.amqp.binding_watcher import BindingWatcher
from rtroute.amqp.broker_identity import identity_from_server_properties
from rtroute.amqp.confirm_window import ConfirmWindow, Outcome, PublishFuture
from rtroute.amqp.connection import ReconnectingConnection
from rtroute.amqp.content_header import PROPERTY_NAMES, content_header_frame
from rtroute.amqp.management import ManagementClient, ManagementError, WrongBroker
from rtroute.amqp.uri import mask_uri, parse_uri
from rtroute.relay.flow import FlowControl, Pauses
from rtroute.relay.timers import Timers
from rtroute.routing import PreconditionFailed
from rtroute.routing.delivery_plan import Publish
from rtroute.routing.exchange_router import DEFAULT_BCC_ALIAS, ExchangeRouter

__all__ = ["MessageFuture", "PublishError", "PublishFailed", "PublishNacked", "PublishReturned",
           "PublisherClosed", "RTopicPublisher"]

LOG = logging.getLogger(__name__)
BATCH = 500  # messages routed per core call
PUBLISHED_KEY_HEADER = "x-rtroute-routing-key"  # the key as published, with delivery="matched-key"
DELIVERIES = ("bcc", "matched-key")
FRAME_CACHE = 4096  # method + header frames kept for messages without properties


class PublishError(Exception):
    """A message the broker did not take (the subclass says how)."""


class PublishNacked(PublishError):
    """The broker nacked a publish of the message (e.g. a full queue with reject-publish)."""


class PublishReturned(PublishError):
    """A ``mandatory`` message reached no queue (``reply_code``, ``reply_text`` from the
    broker's ``basic.return``)."""

    def __init__(self, message: str, reply_code: int | None = None,
                 reply_text: str | None = None) -> None:
        super().__init__(message)
        self.reply_code = reply_code
        self.reply_text = reply_text


class PublishFailed(PublishError):
    """The connection or channel closed before the broker confirmed: the message may or may
    not have been routed."""


class PublisherClosed(PublishError):
    """The publisher was closed (or could not start) before the message was sent."""


class MessageFuture:
    """The outcome of one :meth:`RTopicPublisher.publish`: settled once every broker publish
    the message needed is settled.

    Attributes:
        routing_key: as published.
        matched: the distinct binding keys the message matched (empty: unroutable), known once
            it was routed.
    """

    __slots__ = ("_awaited", "_callbacks", "_done", "_error", "_owner", "_parts", "matched",
                 "routing_key")

    def __init__(self, owner: RTopicPublisher, routing_key: str) -> None:
        self._owner = owner
        self.routing_key = routing_key
        self.matched: tuple[str, ...] = ()
        self._parts = 0
        self._done = False
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[MessageFuture], Any]] | None = None
        self._awaited = False  # a thread waits in result(): settling wakes it

    def done(self) -> bool:
        """True once the message has its outcome."""
        return self._done

    def exception(self) -> BaseException | None:
        """The error the message failed with, or None (also None while pending)."""
        return self._error

    def result(self, timeout: float | None = None) -> Outcome:
        """Wait until the broker confirmed the message; returns ``Outcome.ACKED``.

        Raises:
            TimeoutError: no outcome within ``timeout`` seconds.
            PublishNacked, PublishReturned, PublishFailed, PublisherClosed,
            rtroute.routing.PreconditionFailed: how the message failed.
        """
        if not self._done:
            self._awaited = True  # before _wait reads done: see _part_settled
            self._owner._wait(self.done, timeout)
            if not self._done:
                raise TimeoutError(f"message {self.routing_key!r} not confirmed in {timeout} s")
        if self._error is not None:
            raise self._error
        return Outcome.ACKED

    def add_done_callback(self, callback: Callable[[MessageFuture], Any]) -> None:
        """Call ``callback(self)`` once settled (in the publisher's thread; at once, in this
        one, if done). Safe from any thread: each callback runs exactly once."""
        with self._owner._condition:  # one list, made once, whoever adds
            if self._callbacks is None:
                self._callbacks = []
            self._callbacks.append(callback)
        # the settling thread marks the future done before it looks for callbacks: if it
        # looked too early, this thread sees done and runs them
        if self._done:
            self._run_callbacks()

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error

    def _settle(self) -> None:
        self._done = True
        if self._callbacks is not None:
            self._run_callbacks()

    def _run_callbacks(self) -> None:
        callbacks = self._callbacks
        while callbacks:
            try:
                callback = callbacks.pop(0)  # atomic: two threads never take the same one
            except IndexError:
                return
            try:
                callback(self)
            except Exception:
                LOG.exception("done callback failed for the message %r", self.routing_key)

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("failed" if self._error else "confirmed")
        return f"<MessageFuture {self.routing_key!r} {state}>"


class RTopicPublisher:
    """Publishes to an rtopic exchange managed by rtroute, routing on the publisher's side.

    Args:
        uri: the broker (an ``amqp://`` or ``amqps://`` URI, or a list of cluster nodes).
        exchange: the managed exchange ``NAME``; the messages go to ``NAME.bindings``, where the
            applications bind their queues (the sidecar declares it; it must exist).
        management_uri: the management API of that broker (default: derived from ``uri``, and
            checked to be the same broker before its listing is believed).
        window: publishes in flight awaiting confirms.
        max_pending: messages queued but not yet sent before :meth:`publish` blocks.
        connect_timeout: seconds the constructor waits for the connection and the first
            binding listing; ``0`` returns at once (publishes then wait in the queue).
        bcc_alias: the sidecar's BCC alias header, honoured and stripped here too.
        connection_name: shown in the management UI.
        delivery: ``"bcc"`` (default): one publish with the routing key as published and
            ``BCC`` = the matched binding keys, so consumers see the publisher's key, as with
            the plugin. ``"matched-key"``: a message without ``CC`` that matched exactly one
            binding key is published with that key as its routing key and no ``BCC``, and
            carries the key as published in the ``x-rtroute-routing-key`` header; consumers
            then see the binding key as the routing key. RabbitMQ 3.x routes that at the cost
            of a plain publish (a ``BCC`` costs it a header rewrite and a second lookup);
            other messages are published as with ``"bcc"``.
        published_key_header: with ``delivery="matched-key"``, the header that carries the
            key as published when the routing key is the matched binding key (default
            ``x-rtroute-routing-key``); ``None`` leaves it out. A header costs RabbitMQ 3.x
            about 6% more CPU per message than a plain publish (it parses the table), which
            is what ``None`` saves, at the price of consumers not knowing the publisher's key.

    Raises:
        ValueError: a malformed URI.
        ConnectionError: not ready within ``connect_timeout`` (the message says why), or the
            management API belongs to another broker.

    Size: front, engine and rewrite cache in one class until the engine moves onto
    rtroute.relay (issue #33).
    """

    def __init__(self, uri: str | list[str], exchange: str, management_uri: str | None = None,
                 *, window: int = 1000, max_pending: int = 10_000,
                 connect_timeout: float = 30.0, bcc_alias: str = DEFAULT_BCC_ALIAS,
                 connection_name: str | None = None, delivery: str = "bcc",
                 published_key_header: str | None = PUBLISHED_KEY_HEADER) -> None:
        if delivery not in DELIVERIES:
            raise ValueError(f"delivery must be one of {', '.join(DELIVERIES)}, "
                             f"not {delivery!r}")
        if published_key_header is not None and (
                not isinstance(published_key_header, str) or not published_key_header
                or published_key_header in ("CC", "BCC", bcc_alias)):
            raise ValueError("published_key_header must be None or a header name other than "
                             f"CC, BCC and {bcc_alias!r}, not {published_key_header!r}")
        self.published_key_header = published_key_header
        uris = [uri] if isinstance(uri, str) else list(uri)
        vhost = parse_uri(uris[0]).vhost  # raises ValueError on a malformed URI
        self.exchange = exchange
        self.bindings_exchange = f"{exchange}.bindings"
        self.masked_uri = mask_uri(uris[0])
        self._vhost = vhost
        self.delivery = delivery
        self._router = ExchangeRouter(exchange, "rtopic", bcc_alias,
                                      by_matched_key=delivery == "matched-key")
        self._management = ManagementClient.from_amqp_uri(uris[0], management_uri)
        self._watcher = BindingWatcher(
            self.bindings_exchange, self._management, vhost=vhost,
            on_add=lambda b: self._router.bind((b.destination_type, b.destination),
                                               b.binding_key),
            on_remove=lambda b: self._router.unbind((b.destination_type, b.destination),
                                                    b.binding_key),
            on_ready=self._on_bindings_ready, relist_interval=30.0)
        self._window_size = window
        self._max_pending = max_pending
        # publish() takes the lock alone on its common path (Condition's own __enter__ and
        # __exit__ are Python calls, a cost per message); reentrant, as a Condition's default
        self._lock = threading.RLock()
        self._condition = threading.Condition(self._lock)
        self._outbox: collections.deque[tuple] = collections.deque()
        self._wakeup_scheduled = False
        # the message being sent: (future, its publishes not yet sent, headers, body,
        # properties, mandatory)
        self._current: tuple | None = None
        # threads in _wait: settling wakes them when a future they wait for is settled or
        # the publisher becomes idle, state changes (_notify) always
        self._waiting = 0
        # threads in publish() waiting for room in the outbox: routing (which makes room) and
        # state changes notify them, settling does not (it makes no room)
        self._blocked = 0
        self._window: ConfirmWindow | None = None
        # connection.blocked (relay/flow.py, the shovel's and the sidecar's rule): while the
        # broker blocks the connection nothing is sent; queued messages wait, in order
        self._pauses = Pauses(self._drain)
        self._flow: FlowControl | None = None
        self._channel: Any = None
        self._fast: dict[bool, frames.PublishFrames] | None = None
        self._head_cache: dict[tuple, bytes] = {}  # of one connection (its channel number)
        self._last_head: tuple = (None, -1, None, b"")  # (publish, size, mandatory, head)
        # publishes of this ioloop turn not yet handed to the window (see _flush_bulk)
        self._bulk_messages: list[bytes] = []
        self._bulk_futures: list[MessageFuture] = []
        self._bulk_frames = 0
        self._frame_max = 131072
        self._closing = False
        self._closed = False
        self._fatal: str | None = None
        self._starting = True  # a missing NAME.bindings is fatal until the first connect
        self.published = 0
        self.confirmed = 0
        self.failed = 0
        self.unroutable = 0
        self._connection = ReconnectingConnection(
            uris, on_ready=self._on_connected, on_lost=self._on_lost,
            declarations=[{"method": "exchange.declare", "exchange": self.bindings_exchange,
                           "passive": True}],
            connection_name=connection_name or f"rtroute publisher {exchange}")
        self._thread = threading.Thread(target=self._connection.run, daemon=True,
                                        name=f"rtroute-publisher-{exchange}")
        self._thread.start()
        if connect_timeout:
            self._wait(lambda: self.ready or self._fatal is not None, connect_timeout)
            if not self.ready:
                fatal = self._fatal
                reason = fatal or self._not_ready_reason()
                self.close(timeout=0)
                when = "cannot start" if fatal else f"not ready after {connect_timeout:g} s"
                raise ConnectionError(f"RTopicPublisher({exchange!r}) on {self.masked_uri} "
                                      f"{when}: {reason}")
        self._starting = False

    # -- public --------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Connected, in confirm mode, and the bindings have been listed at least once."""
        window = self._window
        return window is not None and not window.closed and self._watcher.ready

    @property
    def bindings(self) -> list[tuple[tuple[str, str], str]]:
        """The bindings known now: ``((destination_type, name), binding_key)``."""
        return self._router.bindings()

    def publish(self, routing_key: str, body: bytes | str,
                properties: pika.BasicProperties | None = None,
                headers: Mapping[str, Any] | None = None,
                mandatory: bool = False) -> MessageFuture:
        """Route ``routing_key`` (with ``*``/``#``, plus the ``CC``/``BCC`` headers) and
        publish the message once to ``NAME.bindings``. Thread-safe; blocks while
        ``max_pending`` messages wait to be sent.

        Args:
            routing_key: the publisher's key, as for the x-rtopic plugin.
            body: the message body (``str`` is sent as UTF-8).
            properties: ``pika.BasicProperties`` (its ``headers`` are used unless ``headers``
                is given).
            headers: the message headers, ``CC``/``BCC`` included.
            mandatory: return the message (:class:`PublishReturned`) if no queue takes it.

        Raises:
            PublisherClosed: the publisher is closed.
            TypeError: ``routing_key`` is not a string or ``body`` not bytes/str.
        """
        if type(routing_key) is not str and not isinstance(routing_key, str):
            raise TypeError(f"routing_key must be a str, not {type(routing_key).__name__}")
        if type(body) is not bytes:
            if isinstance(body, str):
                body = body.encode("utf-8")
            elif isinstance(body, (bytes, bytearray, memoryview)):
                body = bytes(body)  # a copy: the caller may change its buffer
            else:
                raise TypeError(f"body must be bytes or str, not {type(body).__name__}")
        if headers is None and properties is not None:
            headers = properties.headers
        future = MessageFuture(self, routing_key)
        item = (future, routing_key, body, properties, dict(headers) if headers else None,
                mandatory)
        outbox = self._outbox
        with self._lock:
            if len(outbox) >= self._max_pending or self._closing:
                self._wait_for_room()
            outbox.append(item)
            wake = not self._wakeup_scheduled
            self._wakeup_scheduled = True
        if wake:
            self._connection.add_callback_threadsafe(self._drain)
        return future

    def _wait_for_room(self) -> None:
        """Block until the outbox has room (the lock held, as by publish()).

        Raises:
            PublisherClosed: the publisher is closed or closing.
        """
        while len(self._outbox) >= self._max_pending and not self._closing:
            self._blocked += 1
            self._condition.wait(1.0)
            self._blocked -= 1
        if self._closing:
            raise PublisherClosed(f"publisher of {self.exchange!r} is closed")

    def wait_for_confirms(self, timeout: float | None = None) -> bool:
        """Wait until every message published so far is settled (confirmed or failed: each
        future says which); True if so, False on timeout."""
        self._wait(self._idle, timeout)
        return self._idle()

    def close(self, timeout: float | None = 30.0) -> None:
        """Stop taking messages, wait up to ``timeout`` s for those queued and in flight to
        be confirmed, then close the connection. Messages still unsent then fail with
        :class:`PublisherClosed`."""
        with self._condition:
            if self._closed:
                return
            self._closing = True
            self._condition.notify_all()
        if timeout:
            self._wait(lambda: self._idle() or self._fatal is not None, timeout)
        self._connection.add_callback_threadsafe(self._fail_unsent)
        self._connection.stop()
        self._thread.join(10.0)
        with self._condition:
            self._closed = True
            self._fail_unsent()

    def __enter__(self):  # -> Self (typing.Self needs Python 3.11)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def status(self) -> dict[str, Any]:
        """Counters and state, for logs and health checks."""
        return {
            "exchange": self.exchange,
            "uri": self.masked_uri,
            "ready": self.ready,
            "bindings": self._router.binding_count(),
            "queued": len(self._outbox),
            "in_flight": self._window.in_flight if self._window is not None else 0,
            "published": self.published,
            "confirmed": self.confirmed,
            "failed": self.failed,
            "unroutable": self.unroutable,
            "connection": self._connection.state,
            "blocked": bool(self._pauses.reasons),
            "last_error": self._fatal or self._connection.last_error
            or self._watcher.last_error,
        }

    # -- any thread ----------------------------------------------------------------------------

    def _idle(self) -> bool:
        window = self._window
        return not self._outbox and self._current is None and \
            (window is None or window.in_flight == 0)

    def _wait(self, predicate: Callable[[], bool], timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            self._waiting += 1  # before the predicate is read: see _notify
            try:
                while not predicate():
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return
                    # settling notifies; the timeout bounds a missed notification's cost
                    self._condition.wait(0.5 if remaining is None else min(remaining, 0.5))
            finally:
                self._waiting -= 1

    def _not_ready_reason(self) -> str:
        if self._window is None:
            return self._connection.last_error or "not connected yet"
        return f"bindings of {self.bindings_exchange!r} not listed yet" + (
            f" ({self._watcher.last_error})" if self._watcher.last_error else "")

    def _notify(self) -> None:
        # the state a waiter reads changed before this line, and a waiter counts itself
        # before it reads the state: one of the two sees the other
        if self._waiting or self._blocked:
            with self._condition:
                self._condition.notify_all()

    # -- ioloop thread -------------------------------------------------------------------------

    def _on_connected(self, connection: Any, channel: Any, _last_queue: Any) -> None:
        self._frame_max = getattr(getattr(connection, "params", None), "frame_max", None) \
            or self._frame_max
        self._router.frame_max = self._frame_max
        self._management.expect_broker(
            identity_from_server_properties(getattr(connection, "server_properties", None)),
            self.masked_uri, "management_uri")
        self._channel = channel
        self._flow = FlowControl(self._pauses, Timers(connection.ioloop),
                                 label=f"publisher of {self.exchange!r}")
        self._flow.watch(connection)
        self._head_cache = {}  # frames of the last connection's channel
        self._last_head = (None, -1, None, b"")
        try:  # publish ready-made frames and read confirms without pika's per-frame dispatch
            reader = frames.install(connection)
            self._fast = {flag: frames.PublishFrames(channel.channel_number, 4096, flag)
                          for flag in (False, True)}
        except RuntimeError as exc:
            LOG.warning("publishing through pika (slower): %s", exc)
            reader, self._fast = None, None
        # resume at half a window: publishes then go out in batches, not one per confirm
        window = ConfirmWindow(channel, self._window_size, on_writable=self._drain,
                               low_watermark=self._window_size // 2,
                               on_bulk_settled=self._on_parts_settled)
        window.start(on_ready=self._drain)
        if reader is not None:
            window.read_confirms_from(reader)
        self._window = window
        threading.Thread(target=self._verify_management, args=(connection,), daemon=True).start()

    def _verify_management(self, connection: Any) -> None:
        try:
            self._management.verify_broker()
            # topic (3.x layouts) or direct (4.x): how RabbitMQ treats a bound key's
            # literal '*'/'#' words, which the planner must know
            kind = self._management.exchange(self.bindings_exchange, self._vhost).get("type")
            if kind in ("topic", "direct"):
                self._router.bindings_type = kind
        except WrongBroker as exc:
            self._give_up(str(exc))
            return
        except ManagementError:
            pass  # the watcher's listing retries and reports it
        self._connection.add_callback_threadsafe(lambda: self._start_watching(connection))

    def _start_watching(self, connection: Any) -> None:
        if connection is self._connection.connection and connection.is_open:
            self._watcher.start(connection)

    def _on_bindings_ready(self) -> None:
        self._notify()
        self._drain()

    def _give_up(self, reason: str) -> None:
        """A problem waiting will not solve: stop, and fail what is queued (any thread)."""
        self._fatal = reason
        LOG.error("publisher of %r: %s", self.exchange, reason)
        with self._condition:
            self._closing = True
        self._connection.stop()
        self._connection.add_callback_threadsafe(self._fail_unsent)
        self._notify()

    def _on_lost(self, reason: str) -> None:
        # the window has failed what was in flight; the current message's unsent parts too
        if self._current is not None:
            future = self._current[0]
            self._current = None
            future._fail(PublishFailed(f"connection lost: {reason}"))
            self._part_settled(future)
        self._window = None
        if self._flow is not None:
            self._flow.forget()
        self._pauses.reasons.clear()  # a new connection starts unblocked
        if self._starting and "NOT_FOUND" in reason and self.bindings_exchange in reason:
            self._give_up(f"exchange {self.bindings_exchange!r} does not exist: start the "
                          f"sidecar for {self.exchange!r} once (`rtroute run --rtopic "
                          f"{self.exchange}`), or declare {self.exchange!r} as x-rtopic "
                          "through `rtroute proxy`: either declares its layout (a direct "
                          "exchange on RabbitMQ 4, where it routes BCC faster; topic on 3.x)")
        self._notify()

    def _drain(self) -> None:
        """Route and send queued messages while the window has room."""
        with self._condition:
            self._wakeup_scheduled = False
        window = self._window
        if window is None or window.closed or not self._watcher.ready or self._pauses.reasons:
            return
        try:
            while self._has_room(window):
                if self._current is not None:
                    if not self._send_parts(window):
                        return
                    continue
                with self._condition:
                    if not self._outbox:
                        return
                    # no more than fits: a message routed but not sent is routed again later
                    room = window.window - window.in_flight - len(self._bulk_futures)
                    batch = [self._outbox.popleft()
                             for _ in range(min(BATCH, len(self._outbox), room))]
                    if self._blocked:
                        self._condition.notify_all()  # room for blocked publishers
                self._route(batch, window)
        finally:
            self._flush_bulk(window)

    def _has_room(self, window: ConfirmWindow) -> bool:
        """The window has room for one more publish beside those gathered in bulk."""
        return window.in_flight + len(self._bulk_futures) < window.window \
            and not window.closed

    def _route(self, batch: list[tuple], window: ConfirmWindow) -> None:
        decisions = self._router.decide_many([(item[1], item[4]) for item in batch])
        # counted down per publish (the window's state changes only in this thread: the
        # publishes of this call are gathered in bulk, the others count as in flight)
        room = 0 if window.closed else \
            window.window - window.in_flight - len(self._bulk_futures)
        for index, (item, decision) in enumerate(zip(batch, decisions)):
            future, routing_key, body, properties, _headers, mandatory = item
            if room <= 0:
                # the rest of the batch goes back to the front of the queue, in order
                with self._condition:
                    self._outbox.extendleft(reversed(batch[index:]))
                return
            if decision.error is not None:
                future._fail(PreconditionFailed(decision.error))
                self._part_settled(future)
                continue
            if decision.unroutable:  # the broker applies the alternate exchange / mandatory
                self.unroutable += 1
                parts = [Publish(self.bindings_exchange, routing_key, None)]
            else:
                future.matched = decision.matched
                parts = decision.publishes
            if len(parts) == 1:  # the common case: sent now (the window has room)
                future._parts = 1
                part = parts[0]
                last = self._last_head
                if last[0] is part and last[1] == len(body) and last[2] is False \
                        and not mandatory and properties is None and not decision.headers:
                    # a plain message of the last plain publish's destination and body size
                    # (most of a batch): _send_one's path, without its calls
                    data, count = frames.content_after(last[3], self._fast[False].channel,
                                                       body, self._frame_max)
                    self._bulk_messages.append(data)
                    self._bulk_futures.append(future)
                    self._bulk_frames += count
                    self.published += 1
                    room -= 1
                elif self._send_one(future, part, decision.headers, body, properties,
                                    mandatory, window):
                    room -= 1
                else:
                    future._parts = 0
                    self._part_settled(future)
                continue
            future._parts = len(parts)
            self._current = (future, collections.deque(parts), decision.headers, body,
                             properties, mandatory)
            sent = self._send_parts(window)
            room = window.window - window.in_flight - len(self._bulk_futures)
            if not sent:
                with self._condition:
                    self._outbox.extendleft(reversed(batch[index + 1:]))
                return

    def _send_parts(self, window: ConfirmWindow) -> bool:
        """Publish the current message's remaining parts; False if the window filled first."""
        assert self._current is not None
        future, parts, headers, body, properties, mandatory = self._current
        while parts:
            if not self._has_room(window):
                return False
            if not self._send_one(future, parts[0], headers, body, properties, mandatory,
                                  window):
                future._parts -= len(parts)
                parts.clear()
                break
            parts.popleft()
        self._current = None
        if future._parts == 0:
            self._part_settled(future)
        return True

    def _send_one(self, future: MessageFuture, part: Publish, headers: dict[str, Any],
                  body: bytes, properties: pika.BasicProperties | None, mandatory: bool,
                  window: ConfirmWindow) -> bool:
        """Publish one part of ``future``'s message (the window has room); False if it could
        not be sent, the future then failed with the reason."""
        try:
            if self._fast is not None:
                data, count = frames.content_after(
                    self._head_of(part, headers, len(body), properties, mandatory),
                    self._fast[mandatory].channel, body, self._frame_max)
                if not mandatory:  # written with the others by _flush_bulk
                    self._bulk_messages.append(data)
                    self._bulk_futures.append(future)
                    self._bulk_frames += count
                    self.published += 1
                    return True
                self._flush_bulk(window)  # the window numbers publishes in writing order
                # a return is matched to its PublishFuture
                window.publish_frames(part.exchange, part.routing_key, data, count, body,
                                      True, callback=self._on_part, context=future)
            else:
                window.publish(part.exchange, part.routing_key, body,
                               _with_headers(properties, self._sent_headers(headers, part)),
                               mandatory, callback=self._on_part, context=future)
        except ValueError as exc:  # a property or header value with no AMQP encoding
            future._fail(exc)
            return False
        except Exception as exc:  # noqa: BLE001 - the channel is closing: fail, not lose
            future._fail(PublishFailed(f"not sent: {exc}"))
            return False
        self.published += 1
        return True

    def _flush_bulk(self, window: ConfirmWindow) -> None:
        """Hand the publishes gathered by :meth:`_send_one` to the window at once."""
        futures = self._bulk_futures
        if not futures:
            return
        messages, count = self._bulk_messages, self._bulk_frames
        self._bulk_messages, self._bulk_futures, self._bulk_frames = [], [], 0
        try:
            window.publish_frames_in_bulk(messages, count, futures)
        except Exception as exc:  # noqa: BLE001 - the channel is closing: fail, not lose
            self.published -= len(futures)
            self._on_parts_settled(futures, Outcome.FAILED, f"not sent: {exc}")

    def _head_of(self, part: Publish, headers: dict[str, Any], size: int,
                 properties: pika.BasicProperties | None, mandatory: bool) -> bytes:
        """The method and content header frames of one publish of a ``size``-byte body.

        A message without properties or headers of its own (the common case) has a method and
        header frame that depend only on the publish ``part`` (where it goes, its ``BCC`` or
        key as published) and its body size: those are built once and kept (at most
        :data:`FRAME_CACHE` of them).

        Raises:
            ValueError: a property with no encoding, or a header frame over ``frame_max``.
        """
        plain = properties is None and not headers
        if plain:
            # messages of one routing key share their decision, so their publish: the last
            # head is checked by identity before the cache hashes the publish
            last = self._last_head
            if last[0] is part and last[1] == size and last[2] is mandatory:
                return last[3]
            key = (part, size, mandatory)
            head = self._head_cache.get(key)
        else:
            head = None
        if head is None:
            method_frames = self._fast[mandatory]
            headers = self._sent_headers(headers, part)
            if properties is None and not headers:
                header = content_header_frame(method_frames.channel, size, None)
            else:
                values = {} if properties is None else \
                    {name: getattr(properties, name, None) for name in PROPERTY_NAMES}
                values["headers"] = headers or None
                header = content_header_frame(method_frames.channel, size, values)
            if len(header) > self._frame_max:
                raise ValueError(f"the properties and headers take {len(header)} bytes, more "
                                 f"than the connection's frame_max ({self._frame_max})")
            head = method_frames.get(part.exchange, part.routing_key) + header
            if plain:
                if len(self._head_cache) >= FRAME_CACHE:
                    self._head_cache.clear()
                self._head_cache[key] = head
        if plain:
            self._last_head = (part, size, mandatory, head)
        return head

    def _sent_headers(self, headers: dict[str, Any], part: Publish) -> dict[str, Any]:
        """The headers one publish carries: the message's, plus its ``BCC`` or the key as
        published (``delivery="matched-key"``, unless ``published_key_header`` is None)."""
        if part.bcc:
            return {**headers, "BCC": list(part.bcc)}
        if part.published_key is not None and self.published_key_header is not None:
            return {**headers, self.published_key_header: part.published_key}
        return headers

    def _on_part(self, part: PublishFuture) -> None:
        """The outcome of a mandatory publish (the others come in bulk)."""
        future: MessageFuture = part.context
        if part.outcome is Outcome.RETURNED:
            future._fail(PublishReturned(
                f"{future.routing_key!r} was returned: {part.reply_code} {part.reply_text}",
                part.reply_code, part.reply_text))
        self._on_parts_settled([future], part.outcome, part.reason)

    def _on_parts_settled(self, futures: list[MessageFuture], outcome: Outcome,
                          reason: str | None) -> None:
        """One publish of each of ``futures`` settled with ``outcome`` (the window's
        ``on_bulk_settled``); a future is settled with its last publish."""
        if outcome is Outcome.NACKED:
            for future in futures:
                future._fail(PublishNacked(f"the broker nacked {future.routing_key!r}"))
        elif outcome is Outcome.FAILED:
            for future in futures:
                future._fail(PublishFailed(f"not confirmed: {reason}"))
        current = self._current[0] if self._current is not None else None
        complete = []
        for future in futures:
            future._parts -= 1
            if future._parts <= 0 and future is not current:
                complete.append(future)
        self._settle_futures(complete)

    def _part_settled(self, future: MessageFuture) -> None:
        self._settle_futures((future,))

    def _settle_futures(self, futures: list[MessageFuture] | tuple[MessageFuture]) -> None:
        """Give each of ``futures`` its outcome (once: a settled one is skipped)."""
        awaited = False
        for future in futures:
            if future._done:
                continue
            if future._error is None:
                self.confirmed += 1
            else:
                self.failed += 1
            future._settle()
            awaited = awaited or future._awaited
        # not _notify: a publisher blocked for room needs no wake-up here, and a thread in
        # wait_for_confirms none until the last message settles (each wake-up is a switch of
        # threads, which once per message costs the publishing loop dearly)
        if awaited or (self._waiting and self._idle()):
            with self._condition:
                self._condition.notify_all()

    def _fail_unsent(self) -> None:
        with self._condition:
            items = list(self._outbox)
            self._outbox.clear()
            if self._current is not None:
                items.insert(0, (self._current[0],))
                self._current = None
        for item in items:
            future = item[0]
            future._fail(PublisherClosed(f"publisher of {self.exchange!r} closed before "
                                         "the message was sent"))
            self._part_settled(future)


def _with_headers(properties: pika.BasicProperties | None,
                  headers: dict[str, Any]) -> pika.BasicProperties | None:
    """The caller's properties with ``headers`` (a new object: the caller's is not changed)."""
    if properties is None:
        return pika.BasicProperties(headers=headers) if headers else None
    copy = pika.BasicProperties(**{k: v for k, v in vars(properties).items()})
    copy.headers = headers or None
    return copy
