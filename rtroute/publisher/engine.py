"""The ioloop side of :class:`~rtroute.publisher.RTopicPublisher`: routes queued messages in
batches and publishes them through the relay engine (:mod:`rtroute.relay`), as the shovel does.

:class:`PublisherEngine` runs in one background thread (a
:class:`~rtroute.amqp.connection.ReconnectingConnection`'s ioloop). Callers' threads append
messages to its :attr:`~PublisherEngine.queue` under its lock and wake it once per batch; it
then, in the ioloop thread:

- routes up to :data:`BATCH` messages per call of the native core (the sidecar's
  :class:`~rtroute.routing.exchange_router.ExchangeRouter`), no more than the confirm window
  has room for;
- builds the frames of the batch's common publishes (one per message, not mandatory) in one
  call of the native framer (:func:`~rtroute.core.plain_table.publish_frames`: method, content
  header with the ``BCC``, body, into one buffer); what it leaves (properties or headers that
  are not plain) and every other publish go through :meth:`~PublisherEngine._head_of`, whose
  method and content header frames of a message without properties of its own are made once
  and kept (:data:`FRAME_CACHE` of them);
- hands the common case (one non-mandatory publish per message) to the window in bulk
  (:meth:`Relay.put_bulk <rtroute.relay.engine.Relay.put_bulk>`), and every other publish
  (mandatory, one of several, or encoded by pika) to the relay as an
  :class:`~rtroute.relay.outgoing.Outgoing` of the message's future (an
  :class:`~rtroute.relay.outgoing.Item`), which counts them.

The engine uses the :class:`~rtroute.relay.engine.Relay` facade only: the relay maps each
outcome back to its future, the publisher's policy (:class:`~rtroute.publisher.PublisherPolicy`)
says what a nack, a return, a failure, a rejection or a publish never sent means, and a
:class:`~rtroute.relay.future_upstream.FutureUpstream` resolves or fails the future.
``connection.blocked`` leaves the relay no :attr:`~rtroute.relay.engine.Relay.room`: nothing is
routed meanwhile, and messages wait in the queue, in order.

A lost connection fails what was in flight (the window) and the publishes of a message cut
short (the relay's detach asks the policy: :class:`~rtroute.publisher.PublishFailed`);
messages still in the queue wait for the next connection.
"""
from __future__ import annotations

import collections
import gc
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pika

from rtroute.amqp import frames
from rtroute.amqp.binding_watcher import RELIST_WITH_EVENTS, BindingWatcher
from rtroute.amqp.broker_identity import identity_from_server_properties
from rtroute.amqp.connection import ReconnectingConnection
from rtroute.amqp.content_header import content_header_frame, content_header_frame_with
from rtroute.amqp.event_source import EVENT_VHOST, EventSource, running
from rtroute.amqp.management import ManagementClient, ManagementError, WrongBroker
from rtroute.core.plain_table import plain_header_frame, publish_frames
from rtroute.publisher.policy import CLOSED
from rtroute.relay.engine import Relay
from rtroute.relay.future_upstream import FutureUpstream
from rtroute.relay.outgoing import Outgoing
from rtroute.relay.timers import Timers
from rtroute.routing.delivery_plan import Publish
from rtroute.routing.exchange_router import ExchangeRouter
from rtroute.routing.rtopic_layout import ARCHIVE_KEY

if TYPE_CHECKING:
    from rtroute.amqp.confirm_window import ConfirmWindow
    from rtroute.publisher.future import MessageFuture
    from rtroute.publisher.policy import PublisherPolicy

__all__ = ["BATCH", "FRAME_CACHE", "PublisherEngine"]

LOG = logging.getLogger("rtroute.publisher")
BATCH = 500  # messages routed per core call
FRAME_CACHE = 4096  # method + header frames kept for messages without properties


class PublisherEngine:
    """Routes and publishes what callers queue (see the module docstring).

    Args:
        uris: the broker's URIs (tried in turn).
        exchange: the managed exchange ``NAME``; publishes go to ``NAME.bindings``.
        router: decides each message's publishes; the engine keeps its bindings current.
        management: the broker's management API (the bindings' listing; checked to be the
            broker connected to).
        masked_uri: the first URI without its password, for messages.
        vhost: the virtual host of ``NAME.bindings``.
        policy: what each outcome means for a message's future.
        on_settled: ``on_settled(futures)`` with the futures just settled.
        window: publishes in flight awaiting confirms.
        published_key_header: the header that carries the key as published (or None).
        connection_name: shown in the management UI.
        archive: the archive stream of ``NAME`` (None: no archive): every publish of a
            message that carries the key as published carries ``ARCHIVE_KEY`` in its ``BCC``
            too, so the stream (bound to ``NAME.bindings`` with that key) gets each message
            once, matched or not; while it is not bound, messages fail, never published.

    Attributes shared with callers' threads (under :attr:`lock`): :attr:`queue` of
    ``(future, routing_key, body, properties, headers, mandatory)``, ``wakeup_scheduled``,
    ``waiters`` (threads waiting in the publisher), ``blocked_publishers`` (threads waiting
    for room in the queue), ``closing``; ``fatal`` is why it gave up, ``starting`` True until
    the publisher's constructor returns.

    Size: 26 methods: its connection's life, the drain, and the framing of a batch (one
    native call for the common publishes, the general path for the rest) share the state of
    one connection (its channel's frames, the publishes gathered for the window); apart, each
    part would reach into the others' state.
    """

    def __init__(self, uris: list[str], exchange: str, *, router: ExchangeRouter,
                 management: ManagementClient, masked_uri: str, vhost: str,
                 policy: PublisherPolicy, on_settled: Callable[[Sequence[Any]], Any],
                 window: int, published_key_header: str | None,
                 connection_name: str, archive: str | None = None) -> None:
        self.exchange = exchange
        self.bindings_exchange = f"{exchange}.bindings"
        self.masked_uri = masked_uri
        self.published_key_header = published_key_header
        self._router = router
        self.archive = archive
        self._archived_parts: dict[Publish, Publish] = {}  # a publish -> with ARCHIVE_KEY
        self._management = management
        self._vhost = vhost
        self._policy = policy
        # outside the event plugin's vhost, its events come through a connection there
        self._events = EventSource.acquire(uris) if vhost != EVENT_VHOST else None
        self._events_feed = None if self._events is None else self._events.relayed()
        self.watcher = BindingWatcher(
            self.bindings_exchange, management, vhost=vhost,
            on_add=lambda b: router.bind((b.destination_type, b.destination), b.binding_key),
            on_remove=lambda b: router.unbind((b.destination_type, b.destination),
                                              b.binding_key),
            on_ready=self._on_bindings_ready, relist_interval=RELIST_WITH_EVENTS,
            feed=self._events_feed)
        # publish() takes the lock alone on its common path (Condition's own __enter__ and
        # __exit__ are Python calls, a cost per message); reentrant, as a Condition's default
        self.lock = threading.RLock()
        self.condition = threading.Condition(self.lock)
        self.queue: collections.deque[tuple] = collections.deque()
        self.wakeup_scheduled = False
        # threads waiting: settling wakes them when a future they wait for is settled or the
        # publisher becomes idle, state changes (notify) always
        self.waiters = 0
        # threads in publish() waiting for room in the queue: taking a batch (which makes
        # room) and state changes notify them, settling does not (it makes no room)
        self.blocked_publishers = 0
        self.taken = 0  # messages taken from the queue and not yet handed to the relay
        self.closing = False
        self.fatal: str | None = None
        self.starting = True  # a missing NAME.bindings is fatal until the first connect
        self.unroutable = 0
        self.connection = ReconnectingConnection(
            uris, on_ready=self._on_connected, on_lost=self._on_lost,
            declarations=[{"method": "exchange.declare", "exchange": self.bindings_exchange,
                           "passive": True}],
            connection_name=connection_name)
        self.upstream = FutureUpstream(on_settled)
        self.relay = Relay(Timers(self.connection.ioloop), policy, self.upstream,
                           window=window, low_watermark=window // 2, bulk=True,
                           label=f"publisher of {exchange!r}", on_broken=self._on_broken,
                           on_resumed=self.drain)
        self._fast: dict[bool, frames.PublishFrames] | None = None
        self._head_cache: dict[tuple, bytes] = {}  # of one connection (its channel number)
        self._last_head: tuple = (None, -1, None, b"")  # (publish, size, mandatory, head)
        # publishes of this drain not yet handed to the window (see _flush_bulk)
        self._bulk_messages: list[bytes] = []
        self._bulk_items: list[MessageFuture] = []
        self._bulk_frames = 0
        self._frame_max = 131072
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"rtroute-publisher-{exchange}")

    def _run(self) -> None:
        """The engine's thread: the connection until it stops."""
        with running(self._events):
            self.connection.run()

    # -- any thread ----------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Connected, in confirm mode, and the bindings have been listed at least once."""
        return self.relay.open and self.watcher.ready

    def idle(self) -> bool:
        """Nothing queued, being routed, waiting in the relay or awaiting a confirm."""
        relay = self.relay
        return not self.queue and not self.taken and not relay.queued \
            and relay.in_flight == 0

    @property
    def in_flight(self) -> int:
        """Publishes awaiting their confirm."""
        return self.relay.in_flight

    @property
    def window(self) -> ConfirmWindow | None:
        """The relay's confirm window (None: not connected)."""
        return self.relay.window

    def not_ready_reason(self) -> str:
        if not self.relay.open:
            return self.connection.last_error or "not connected yet"
        return f"bindings of {self.bindings_exchange!r} not listed yet" + (
            f" ({self.watcher.last_error})" if self.watcher.last_error else "")

    def notify(self) -> None:
        """Wake the waiting threads: the state they read changed."""
        # the state a waiter reads changed before this line, and a waiter counts itself
        # before it reads the state: one of the two sees the other
        if self.waiters or self.blocked_publishers:
            with self.condition:
                self.condition.notify_all()

    def give_up(self, reason: str) -> None:
        """A problem waiting will not solve: stop, and fail what is queued."""
        self.fatal = reason
        LOG.error("publisher of %r: %s", self.exchange, reason)
        with self.condition:
            self.closing = True
        self.connection.stop()
        self.connection.add_callback_threadsafe(self.fail_unsent)
        self.notify()

    def fail_unsent(self) -> None:
        """Fail what was not sent with ``PublisherClosed`` (the ioloop thread, or any once it
        has stopped)."""
        with self.lock:
            items = list(self.queue)
            self.queue.clear()
        self.relay.abandon(CLOSED)  # publishes of a message cut short: the policy fails them
        for item in items:
            self._policy.closed(item[0])
            self.relay.submit(item[0], ())

    # -- connection (ioloop thread) ------------------------------------------------------------

    def _on_connected(self, connection: Any, channel: Any, _last_queue: Any) -> None:
        self._management.expect_broker(
            identity_from_server_properties(getattr(connection, "server_properties", None)),
            self.masked_uri, "management_uri")
        try:  # publish ready-made frames and read confirms without pika's per-frame dispatch
            reader = frames.install(connection)
        except RuntimeError as exc:
            LOG.warning("publishing through pika (slower): %s", exc)
            reader = None
        self.attach(connection, channel, reader)
        threading.Thread(target=self._verify_management, args=(connection,), daemon=True).start()

    def attach(self, connection: Any, channel: Any, reader: frames.FrameReader | None) -> None:
        """Publish on ``channel`` of ``connection`` from now on, with ready-made frames and
        the confirms taken from ``reader`` (None: through pika, slower)."""
        self._frame_max = getattr(getattr(connection, "params", None), "frame_max", None) \
            or self._frame_max
        self._router.frame_max = self._frame_max
        self.relay.watch(connection)
        self._head_cache = {}  # frames of the last connection's channel
        self._last_head = (None, -1, None, b"")
        self._fast = None if reader is None else \
            {flag: frames.PublishFrames(channel.channel_number, 4096, flag)
             for flag in (False, True)}
        self.relay.attach(channel, reader, on_ready=self.drain)

    def _verify_management(self, connection: Any) -> None:
        try:
            self._management.verify_broker()
            # topic (3.x layouts) or direct (4.x): how RabbitMQ treats a bound key's
            # literal '*'/'#' words, which the planner must know
            kind = self._management.exchange(self.bindings_exchange, self._vhost).get("type")
            if kind in ("topic", "direct"):
                self._router.bindings_type = kind
        except WrongBroker as exc:
            self.give_up(str(exc))
            return
        except ManagementError:
            pass  # the watcher's listing retries and reports it
        self.connection.add_callback_threadsafe(lambda: self._start_watching(connection))

    def _start_watching(self, connection: Any) -> None:
        current = self.connection.connection
        if current is not None and connection is current and current.is_open:
            if self._events_feed is not None:
                self._events_feed.start(connection)  # before the watcher, which waits for it
            self.watcher.start(connection)

    def _on_bindings_ready(self) -> None:
        self.notify()
        self.drain()

    def _on_broken(self, reason: str) -> None:
        """The publish channel closed alone (the window failed what was in flight): start
        over on a new connection."""
        connection = self.connection.connection
        if connection is None or not connection.is_open:
            return  # the connection is going (its channels close first): _on_lost follows
        LOG.warning("publisher of %r: channel closed (%s); reconnecting", self.exchange, reason)
        connection.close(320, "publish channel closed")

    def _on_lost(self, reason: str) -> None:
        # the window has failed what was in flight; a message cut short fails too (its other
        # publishes may have been routed): the policy's unsent() says so
        self.relay.detach(reason)
        if self.starting and "NOT_FOUND" in reason and self.bindings_exchange in reason:
            self.give_up(f"exchange {self.bindings_exchange!r} does not exist: start the "
                         f"sidecar for {self.exchange!r} once (`rtroute run --rtopic "
                         f"{self.exchange}`), or declare {self.exchange!r} as x-rtopic "
                         "through `rtroute proxy`: either declares its layout (a direct "
                         "exchange on RabbitMQ 4, where it routes BCC faster; topic on 3.x)")
        self.notify()

    # -- routing and publishing (ioloop thread) ------------------------------------------------

    def drain(self) -> None:
        """Route and send queued messages while the relay has room (none with a full window,
        ``connection.blocked``, or publishes waiting in the relay)."""
        with self.lock:
            self.wakeup_scheduled = False
        relay = self.relay
        if not self.watcher.ready:
            return
        # A batch makes a decision, a publish and frames per message: the cyclic collector
        # would run every 700 allocations and its older generations walk every object the
        # process holds (the queued messages and their futures); what a batch makes forms no
        # cycle. Measured in process on the mixed traffic: 11.9 -> 7.2 us/msg. (A caller that
        # turned the collector off keeps it off.)
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            while True:
                # no more than fits: a message routed but not sent is routed again later
                room = relay.room - len(self._bulk_items)
                if room <= 0:
                    return
                with self.lock:
                    queue = self.queue
                    if not queue:
                        return
                    batch = [queue.popleft() for _ in range(min(BATCH, len(queue), room))]
                    self.taken += len(batch)
                    if self.blocked_publishers:
                        self.condition.notify_all()  # room for blocked publishers
                self._route(batch, room)
        finally:
            if paused:
                gc.enable()
            self._flush_bulk()
            self.taken = 0
            if self.waiters and self.idle():  # e.g. the batch failed without a publish
                self.notify()

    def _route(self, batch: list[tuple], room: int) -> None:
        decisions = self._router.decide_many([(item[1], item[4]) for item in batch])
        fast = self._fast
        relay = self.relay
        # the common case, one publish handed to the window in bulk (it has room): gathered
        # here, framed together (_frame_run) before anything else is sent, and at the end
        run: list[tuple] = []  # (publish, headers, properties, body)
        futures: list[MessageFuture] = []
        try:
            for index, (item, decision) in enumerate(zip(batch, decisions)):
                future, routing_key, body, properties, _headers, mandatory = item
                if decision.error is not None:
                    self._policy.not_routed(future, decision.error)
                    relay.submit(future, ())
                    continue
                if decision.unroutable:  # the broker applies the alternate exchange / mandatory
                    self.unroutable += 1
                    parts = [Publish(self.bindings_exchange, routing_key, None)]
                else:
                    future.decision = decision
                    parts = decision.publishes
                if self.archive is not None:
                    archived = self._with_archive(self.archive, routing_key, parts)
                    if isinstance(archived, str):
                        self._policy.not_routed(future, archived)
                        relay.submit(future, ())
                        continue
                    parts = archived
                if len(parts) == 1 and not mandatory and fast is not None:
                    run.append((parts[0], decision.headers, properties, body))
                    futures.append(future)
                    future.awaiting = 1
                    room -= 1
                    if room > 0:
                        continue
                else:
                    gathered, gathered_futures, run, futures = run, futures, [], []
                    self._frame_run(gathered, gathered_futures)
                    self._flush_bulk()  # the window numbers publishes in the order handed over
                    self._submit(future, parts, decision.headers, body, properties, mandatory)
                    room = relay.room  # 0 once the relay pauses or publishes wait in it
                    if room > 0:
                        continue
                if index + 1 < len(batch):
                    # the rest of the batch goes back to the front of the queue, in order
                    with self.lock:
                        self.queue.extendleft(reversed(batch[index + 1:]))
                return
        finally:  # what was gathered goes to the window, whatever happened since
            self._frame_run(run, futures)

    def _frame_run(self, run: list[tuple], futures: list[MessageFuture]) -> None:
        """The frames of the bulk publishes ``run`` (of ``futures``, in order) for
        :meth:`_flush_bulk`: one call of the native framer
        (:func:`~rtroute.core.plain_table.publish_frames`) for all, the general encoder
        (:meth:`_head_of`) for any it leaves (a property or header that is not plain; a
        frame it cannot make fails its message, the others go on)."""
        if not run:
            return
        channel = self._fast[False].channel  # type: ignore[index]  # only with frames
        frame_max = self._frame_max
        messages, items = self._bulk_messages, self._bulk_items
        start = 0
        while start < len(run):
            data, count, end = publish_frames(channel, run, start, frame_max,
                                              self.published_key_header)
            if end > start:
                messages.append(data)
                items.extend(futures[start:end] if start or end < len(futures) else futures)
                self._bulk_frames += count
            if end >= len(run):
                return
            part, headers, properties, body = run[end]
            future = futures[end]
            try:
                head = self._head_of(part, headers, len(body), properties, False)
            except Exception as exc:  # noqa: BLE001 - that message fails, not the batch
                future.awaiting = 0
                self._refuse(future, [(part, exc)])
            else:
                data, count = frames.content_after(head, channel, body, frame_max)
                messages.append(data)
                items.append(future)
                self._bulk_frames += count
            start = end + 1

    def _with_archive(self, archive: str, routing_key: str, parts: Sequence[Publish]
                      ) -> list[Publish] | str:
        """``parts`` with ``ARCHIVE_KEY`` added to the ``BCC`` of the first publish that goes
        to ``NAME.bindings`` with the key as published, so the archive stream gets the message
        once, as published; or why it cannot be archived (the message is then not sent)."""
        if not self._router.archived_to(("queue", archive)):
            return (f"archive stream {archive!r} is not bound to "
                    f"{self.bindings_exchange!r} with {ARCHIVE_KEY!r}: not published, nor "
                    "archived")
        for index, part in enumerate(parts):
            if part.exchange == self.bindings_exchange and part.routing_key == routing_key \
                    and part.published_key is None:
                archived = self._archived_parts.get(part)
                if archived is None:
                    if len(self._archived_parts) >= FRAME_CACHE:
                        self._archived_parts.clear()
                    archived = self._archived_parts[part] = Publish(
                        part.exchange, routing_key, (*(part.bcc or ()), ARCHIVE_KEY))
                return [*parts[:index], archived, *parts[index + 1:]]
        return "no publish of the message carries its key as published: not archived"

    def _submit(self, future: MessageFuture, parts: Sequence[Publish],
                headers: dict[str, Any], body: bytes, properties: pika.BasicProperties | None,
                mandatory: bool) -> None:
        """Publish ``parts`` for ``future`` through the relay (what does not fit the window
        waits in the relay)."""
        outs, refused = [], []
        fast = self._fast
        for part in parts:
            if fast is None:  # pika encodes; the outbox checks the header's size
                outs.append(Outgoing(
                    part.exchange, part.routing_key, body=body, mandatory=mandatory,
                    properties=_with_headers(properties, self._sent_headers(headers, part))))
                continue
            try:
                head = self._head_of(part, headers, len(body), properties, mandatory)
            except Exception as exc:  # noqa: BLE001 - this publish is refused, not the rest
                refused.append((part, exc))
                continue
            data, count = frames.content_after(head, fast[mandatory].channel, body,
                                               self._frame_max)
            outs.append(Outgoing(part.exchange, part.routing_key, frames=data,
                                 frame_count=count, body=body, mandatory=mandatory,
                                 checked=True))
        self.relay.submit(future, outs, deferred=len(refused))
        if refused:
            self._refuse(future, refused, submitted=True)

    def _refuse(self, future: MessageFuture, refused: list[tuple[Publish, Exception]],
                submitted: bool = False) -> None:
        """The publishes ``refused`` of ``future`` cannot be made (a header over
        ``frame_max``, a value with no encoding: the policy's ``rejected``; anything else:
        not sent)."""
        relay = self.relay
        if not submitted:
            relay.submit(future, (), deferred=len(refused))
        for part, exc in refused:
            if not isinstance(exc, ValueError):  # the policy keeps the first error
                self._policy.not_sent(future, f"not sent: {exc}")
            relay.rejected(Outgoing(part.exchange, part.routing_key, item=future), str(exc))

    def _flush_bulk(self) -> None:
        """Hand the publishes gathered by :meth:`_route` to the window at once."""
        items = self._bulk_items
        if not items:
            return
        messages, count = self._bulk_messages, self._bulk_frames
        self._bulk_messages, self._bulk_items, self._bulk_frames = [], [], 0
        try:
            self.relay.put_bulk(messages, count, items)
        except Exception as exc:  # noqa: BLE001 - the channel is closing: fail, not lose
            reason = f"not sent: {exc}"
            for item in items:
                self._policy.not_sent(item, reason)
            self.relay.fail_bulk(items, reason)

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
            method_frames = self._fast[mandatory]  # type: ignore[index]  # only with frames
            headers = self._sent_headers(headers, part)
            if properties is None and not headers:
                # one per body size, whatever the key (literal keys in turn: a new publish
                # per message, the same header frame)
                header = self._head_cache.get((None, size))
                if header is None:
                    header = self._head_cache[(None, size)] = content_header_frame(
                        method_frames.channel, size, None)
            else:  # one native pass for plain properties (most), else the general encoder
                header = plain_header_frame(method_frames.channel, size, properties,
                                            headers or None) or \
                    content_header_frame_with(method_frames.channel, size, properties,
                                              headers or None)
            if not frames.frame_fits(len(header), self._frame_max):
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


def _with_headers(properties: pika.BasicProperties | None,
                  headers: dict[str, Any]) -> pika.BasicProperties:
    """The caller's properties with ``headers`` (a new object: the caller's is not changed)."""
    if properties is None:
        return pika.BasicProperties(headers=headers or None)
    copy = pika.BasicProperties(**{k: v for k, v in vars(properties).items()})
    copy.headers = headers or None
    return copy
