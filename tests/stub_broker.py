"""The stub broker: a fake ioloop, connections and channels that the relay and its users cannot
tell from pika's, and a script API to ack, nack, return, block, close and drop at any point.
No RabbitMQ, no sockets, no threads of its own: time is virtual (:meth:`StubIOLoop.advance`).

Two brokers share the parts below:

- :class:`StubBroker` -- the relay's (tests/relay): one connection with a publish channel and
  a consume channel, items made by the test;
- :class:`StubRabbit` -- the users' (tests/sidecar, tests/shovel, tests/publisher): a broker
  with queues, consumers, prefetch, acks, requeues and dead letters, whose connections stand
  in for ``pika.SelectConnection`` (``monkeypatch.setattr(pika, "SelectConnection",
  rabbit.connect)``), so the sidecar, the shovel and the publisher run their own code from
  the connect on. Deliveries reach them as frame bytes through the connection's read callback
  (the frame reader they install), confirms too; what they write is parsed back into
  :class:`Published` records. Each message keeps its place: in a queue (ready, or unacked on
  a channel), acked, dead-lettered, and each publish its confirm; a lost channel or
  connection puts its unacked deliveries back in their queue, in order, as RabbitMQ does.

They work at the level the engine touches: pika's channel and connection methods, the bytes
written through ``pika_internals.emit`` (parsed back into :class:`Published` records, each
given the sequence number the broker would give it), and confirms fed as frame bytes to a real
:class:`~rtroute.amqp.frames.FrameReader` (the intercept path the shovel uses).

:class:`StubBroker` asserts these invariants as things happen:

- each sequence number is settled once by the script;
- nothing is written while the connection is blocked, nor after the write buffer paused the
  outbox, once the turn that saw it is over (that turn's write carries what was handed over
  before);
- no content header is larger than ``frame_max`` + 8 (RabbitMQ would close the connection);
- at most one write per turn on the publish connection;
- on each consume channel a tag is settled once, and an ack (``multiple`` or not) covers only
  items whose publishes were all settled, one of them acked (a publish's body starts with
  ``b"<consume channel>.<tag>/"``), or that the test marked ready (no publish to wait for).

:class:`StubRabbit` asserts the same of what is written (frame sizes, one write per turn per
connection, nothing while blocked) and answers the rest as RabbitMQ does: an ack or nack of a
delivery tag its channel does not have (the #33 bug: a tag of an old channel) closes the
channel with ``406 PRECONDITION_FAILED``, and the test sees it in :attr:`StubRabbit.errors`.
"""
from __future__ import annotations

import heapq
import struct
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

import pika
import pika.exceptions
import pika.frame
import pika.spec

from rtroute.amqp.frames import FrameReader
from rtroute.amqp.settle import Settler

_HEAD = struct.Struct(">BHI")
_PUBLISH = struct.pack(">HH", 60, 40)


def parse_publishes(data: bytes, channels: list[Any], write_no: int, frame_max: int
                    ) -> list[Published]:
    """The ``basic.publish`` records in ``data`` (whole frames), numbered as the broker would
    number them on a confirming channel (``channels[number - 1]``)."""
    published: list[Published] = []
    offset, current = 0, None
    while offset < len(data):
        kind, channel, size = _HEAD.unpack_from(data, offset)
        payload = data[offset + 7:offset + 7 + size]
        assert data[offset + 7 + size] == 0xCE
        offset += 8 + size
        if kind == 1:
            assert payload[:4] == _PUBLISH, "only basic.publish is written"
            pos = 6
            exchange = payload[pos + 1:pos + 1 + payload[pos]].decode()
            pos += 1 + payload[pos]
            key = payload[pos + 1:pos + 1 + payload[pos]].decode()
            pos += 1 + payload[pos]
            target = channels[channel - 1]
            seq = 0
            if target.confirming:
                seq = target.next_seq
                target.next_seq += 1
            current = Published(seq, channel, exchange, key, bool(payload[pos] & 1), b"",
                                b"", write_no)
            published.append(current)
        elif kind == 2:
            assert current is not None
            # RabbitMQ closes the connection for a payload above frame_max (FRAME_ERROR)
            assert size <= frame_max, \
                f"content header payload of {size} bytes above frame_max {frame_max}"
            current.header = payload
            properties = pika.BasicProperties()
            properties.decode(payload, 12)
            current.properties = properties
        elif kind == 3:
            assert current is not None
            current.body += payload
    return published


class StubIOLoop:
    """A virtual clock: ``call_later`` schedules, :meth:`turn` runs what is due (in order of
    deadline, then of scheduling), :meth:`advance` moves the clock on."""

    def __init__(self) -> None:
        self.now = 0.0
        self.turns = 0
        self._heap: list[tuple[float, int, Callable[[], Any]]] = []
        self._seq = 0
        self._cancelled: set[int] = set()
        self.after_turn: list[Callable[[], Any]] = []
        self._lock = threading.Lock()  # add_callback_threadsafe comes from other threads

    def call_later(self, delay: float, callback: Callable[[], Any]) -> int:
        with self._lock:
            self._seq += 1
            heapq.heappush(self._heap, (self.now + max(0.0, delay), self._seq, callback))
            return self._seq

    def remove_timeout(self, handle: int) -> None:
        self._cancelled.add(handle)

    def add_callback_threadsafe(self, callback: Callable[[], Any]) -> None:
        self.call_later(0, callback)

    def pending(self) -> int:
        return sum(1 for _t, seq, _c in self._heap if seq not in self._cancelled)

    def turn(self) -> int:
        """Run the callbacks due now that were scheduled before this turn; returns how many."""
        self.turns += 1
        last = self._seq
        ran = 0
        while self._heap and self._heap[0][0] <= self.now and self._heap[0][1] <= last:
            with self._lock:
                _deadline, seq, callback = heapq.heappop(self._heap)
            if seq in self._cancelled:
                self._cancelled.discard(seq)
                continue
            callback()
            ran += 1
        for check in self.after_turn:
            check()
        return ran

    def run(self, limit: int = 1000) -> None:
        """Turn until nothing is due now."""
        for _ in range(limit):
            if not any(d <= self.now and s not in self._cancelled for d, s, _c in self._heap):
                return
            self.turn()
        raise AssertionError("the ioloop did not settle")

    def advance(self, seconds: float) -> None:
        """Move the clock on by ``seconds``, running what falls due on the way, in order."""
        end = self.now + seconds
        while True:
            due = [d for d, s, _c in self._heap if s not in self._cancelled and d <= end]
            if not due:
                break
            self.now = max(self.now, min(due))
            self.run()
        self.now = end
        self.run()


@dataclass
class Published:
    """One ``basic.publish`` as written: its sequence number on a confirm channel (0 without
    confirms), where to, its header and body, and which write carried it."""

    seq: int
    channel: int
    exchange: str
    routing_key: str
    mandatory: bool
    header: bytes
    body: bytes
    write_no: int
    properties: Any = None


@dataclass
class Settled:
    """An ack, nack or reject sent on a consume channel."""

    kind: str
    tag: int
    multiple: bool
    requeue: bool


class StubTransport:
    def __init__(self) -> None:
        self.buffered = 0

    def get_write_buffer_size(self) -> int:
        return self.buffered


class StubChannel:
    """The part of ``pika.channel.Channel`` the relay and the settler use."""

    def __init__(self, connection: StubConnection, number: int) -> None:
        self.connection = connection
        self.channel_number = number
        self.is_open = True
        self.refuse = False
        self.confirming = False
        self.next_seq = 1
        self.settled: list[Settled] = []
        self._on_close: list[Callable] = []
        self._on_return: list[Callable] = []
        self._on_ack_nack: Callable | None = None

    def add_on_close_callback(self, callback: Callable) -> None:
        self._on_close.append(callback)

    def add_on_return_callback(self, callback: Callable) -> None:
        self._on_return.append(callback)

    def add_on_cancel_callback(self, callback: Callable) -> None:
        pass

    def confirm_delivery(self, ack_nack_callback: Callable, callback: Callable | None = None
                         ) -> None:
        self.confirming = True
        self._on_ack_nack = ack_nack_callback
        if callback is not None:
            self.connection.ioloop.call_later(
                0, lambda: callback(SimpleNamespace(method=pika.spec.Confirm.SelectOk())))

    def basic_publish(self, exchange: str, routing_key: str, body: bytes,
                      properties: Any = None, mandatory: bool = False) -> None:
        if not self.is_open or not self.connection.is_open:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        number = self.channel_number
        data = b"".join((
            pika.frame.Method(number, pika.spec.Basic.Publish(
                exchange=exchange, routing_key=routing_key, mandatory=mandatory)).marshal(),
            pika.frame.Header(number, len(body), properties or pika.BasicProperties()).marshal(),
            pika.frame.Body(number, body).marshal() if body else b""))
        self.connection._adapter_emit_data(data)

    def _settle(self, kind: str, tag: int, multiple: bool, requeue: bool) -> None:
        if self.refuse or not self.is_open:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        if self.connection.is_closed:  # pika closes the connection before its channels
            raise pika.exceptions.ConnectionWrongStateError(
                "Attempted to send a frame on closed connection.")
        self.settled.append(Settled(kind, tag, multiple, requeue))
        self.connection.broker._consume_settled(self, self.settled[-1])

    def basic_ack(self, delivery_tag: int, multiple: bool = False) -> None:
        self._settle("ack", delivery_tag, multiple, False)

    def basic_nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True
                   ) -> None:
        self._settle("nack", delivery_tag, multiple, requeue)

    def basic_reject(self, delivery_tag: int, requeue: bool = True) -> None:
        self._settle("reject", delivery_tag, False, requeue)

    def close_by_broker(self, code: int, text: str) -> None:
        self.is_open = False
        reason = pika.exceptions.ChannelClosedByBroker(code, text)
        for callback in list(self._on_close):
            callback(self, reason)


class StubConnection:
    """The part of a pika ``SelectConnection`` the relay, ``emit`` and the frame reader use."""

    def __init__(self, broker: StubBroker, ioloop: StubIOLoop, frame_max: int) -> None:
        self.broker = broker
        self.ioloop = ioloop
        self.params = SimpleNamespace(frame_max=frame_max)
        self.is_open = True
        self.is_closing = False
        self.is_closed = False
        self.bytes_sent = 0
        self.frames_sent = 0
        self.bytes_received = 0
        self._frame_buffer = b""
        self._transport = StubTransport()
        self.to_pika: list[Any] = []   # frames the reader passed on
        self.channels: list[StubChannel] = []
        self._on_blocked: list[Callable] = []
        self._on_unblocked: list[Callable] = []

    # pika internals used by frames.FrameReader and pika_internals.emit
    def _process_frame(self, frame: Any) -> None:
        self.to_pika.append(frame)

    def _on_data_available(self, data: bytes) -> None:  # replaced by install(); unused here
        raise AssertionError("not reached")

    def _adapter_emit_data(self, data: bytes) -> None:
        self.broker._written(self, data)

    def add_on_connection_blocked_callback(self, callback: Callable) -> None:
        self._on_blocked.append(callback)

    def add_on_connection_unblocked_callback(self, callback: Callable) -> None:
        self._on_unblocked.append(callback)

    def channel(self) -> StubChannel:
        channel = StubChannel(self, len(self.channels) + 1)
        self.channels.append(channel)
        return channel


@dataclass
class StubBroker:
    """One connection with a publish channel and a consume channel (more with
    :meth:`consume_channel`), a frame reader taking the publish channel's confirms, and the
    script API. The invariants are asserted as things happen (see the module docstring)."""

    frame_max: int = 131072
    ioloop: StubIOLoop = field(default_factory=StubIOLoop)
    published: list[Published] = field(default_factory=list)
    blocked: bool = False
    writes: int = 0

    def __post_init__(self) -> None:
        self.connection = StubConnection(self, self.ioloop, self.frame_max)
        self.publish_channel = self.connection.channel()
        self.consume = self.connection.channel()
        self.reader = FrameReader(self.connection)
        self.settled_seqs: set[int] = set()
        self.acked_seqs: set[int] = set()
        self.ready_tags: dict[int, set[int]] = {}   # consume channel -> tags allowed to be acked
        self.consume_done: dict[int, set[int]] = {}  # consume channel -> tags settled
        self._next_tag: dict[int, int] = {}
        self._writes_this_turn = 0
        self._paused_by_buffer_at: int | None = None
        self._blocked_turn = 0
        self.ioloop.after_turn.append(self._end_of_turn)

    # -- items ---------------------------------------------------------------------------------

    def consume_channel(self) -> StubChannel:
        """Another consume channel (a shard's)."""
        return self.connection.channel()

    def deliver(self, make: Callable[[int], Any], settler: Settler,
                channel: StubChannel | None = None) -> Any:
        """A new delivery on ``channel`` (default: the consume channel), tracked by
        ``settler``: ``make(tag)`` builds the item."""
        channel = channel or self.consume
        tag = self._next_tag.get(channel.channel_number, 0) + 1
        self._next_tag[channel.channel_number] = tag
        item = make(tag)
        settler.track(item)
        return item

    def ready(self, item: Any, channel: StubChannel | None = None) -> None:
        """Mark ``item`` ackable although no publish of it was acked (it had none, or the
        policy drops it)."""
        number = (channel or self.consume).channel_number
        self.ready_tags.setdefault(number, set()).add(item.tag)

    def _ackable(self, number: int, tag: int) -> bool:
        """Marked ready, or every publish whose body names it (``b"<channel>.<tag>/..."``)
        was settled by the broker and one of them acked (or, without confirms, written)."""
        if tag in self.ready_tags.get(number, set()):
            return True
        prefix = f"{number}.{tag}/".encode()
        mine = [p for p in self.published if p.body.startswith(prefix)]
        # without confirms (sequence number 0) a publish is done once written
        return bool(mine) and all(p.seq in self.settled_seqs or not p.seq for p in mine) \
            and any(p.seq in self.acked_seqs or not p.seq for p in mine)

    # -- the broker's answers ------------------------------------------------------------------

    def _confirm(self, method: Any) -> None:
        data = pika.frame.Method(self.publish_channel.channel_number, method).marshal()
        self.reader(data)

    def ack(self, seq: int, multiple: bool = False) -> None:
        """``basic.ack`` for ``seq`` (and everything below with ``multiple``)."""
        self.acked_seqs |= set(self._mark_settled(seq, multiple))
        self._confirm(pika.spec.Basic.Ack(delivery_tag=seq, multiple=multiple))

    def nack(self, seq: int, multiple: bool = False) -> None:
        """``basic.nack`` for ``seq``."""
        self._mark_settled(seq, multiple)
        self._confirm(pika.spec.Basic.Nack(delivery_tag=seq, multiple=multiple))

    def ack_all(self) -> None:
        """Ack every publish written and not yet settled, one by one."""
        for published in list(self.published):
            if published.seq and published.seq not in self.settled_seqs:
                self.ack(published.seq)

    def return_(self, seq: int, code: int = 312, text: str = "NO_ROUTE") -> None:
        """``basic.return`` of the publish ``seq`` (send its ack afterwards, as RabbitMQ
        does)."""
        published = self.by_seq(seq)
        method = pika.spec.Basic.Return(code, text, published.exchange, published.routing_key)
        for callback in list(self.publish_channel._on_return):
            callback(self.publish_channel, method, pika.BasicProperties(), published.body)

    def block(self, reason: str = "low on memory") -> None:
        """``connection.blocked``: from the next turn on nothing may be written (what the
        relay handed over before it still goes out at the end of that turn)."""
        self.blocked = True
        self._blocked_turn = self.ioloop.turns + 1
        frame = SimpleNamespace(method=pika.spec.Connection.Blocked(reason))
        for callback in list(self.connection._on_blocked):
            callback(self.connection, frame)

    def unblock(self) -> None:
        self.blocked = False
        frame = SimpleNamespace(method=pika.spec.Connection.Unblocked())
        for callback in list(self.connection._on_unblocked):
            callback(self.connection, frame)

    def close_channel(self, channel: StubChannel, code: int = 406,
                      text: str = "PRECONDITION_FAILED") -> None:
        channel.close_by_broker(code, text)

    def drop_connection(self) -> None:
        """The connection is lost: it is closed first, then its channels, in opening order
        (as pika does: an ack tried meanwhile raises ``ConnectionWrongStateError``)."""
        connection = self.connection
        connection.is_open = False
        connection.is_closed = True
        for channel in connection.channels:
            if channel.is_open:
                channel.is_open = False
                reason = pika.exceptions.StreamLostError("Transport indicated EOF")
                for callback in list(channel._on_close):
                    callback(channel, reason)

    def write_buffer(self, size: int) -> None:
        self.connection._transport.buffered = size

    # -- what was written ----------------------------------------------------------------------

    def by_seq(self, seq: int) -> Published:
        return next(p for p in self.published if p.seq == seq)

    def bodies(self) -> list[bytes]:
        return [p.body for p in self.published]

    def _mark_settled(self, seq: int, multiple: bool) -> list[int]:
        seqs = [p.seq for p in self.published if p.seq and p.seq <= seq
                and p.seq not in self.settled_seqs] if multiple else [seq]
        for one in seqs:
            assert one not in self.settled_seqs, f"sequence number {one} settled twice"
            self.settled_seqs.add(one)
        return seqs

    def _written(self, connection: StubConnection, data: bytes) -> None:
        assert not self.blocked or self._blocked_turn == self.ioloop.turns, \
            "written while the connection is blocked"
        assert self._paused_by_buffer_at is None or \
            self._paused_by_buffer_at == self.ioloop.turns, "written while the buffer is full"
        self.writes += 1
        self._writes_this_turn += 1
        assert self._writes_this_turn <= 1, "two writes in one ioloop turn"
        self.published += parse_publishes(data, self.connection.channels, self.writes,
                                          self.frame_max)

    def note_buffer_pause(self) -> None:
        """The test saw the outbox pause for the write buffer in this turn."""
        self._paused_by_buffer_at = self.ioloop.turns

    def buffer_drained(self) -> None:
        self._paused_by_buffer_at = None

    def _consume_settled(self, channel: StubChannel, settled: Settled) -> None:
        done = self.consume_done.setdefault(channel.channel_number, set())
        number = channel.channel_number
        if settled.multiple:
            covered = {t for t in range(1, settled.tag + 1) if t not in done}
            assert settled.tag in covered, f"multiple ack of tag {settled.tag} settled before"
            early = sorted(t for t in covered if not self._ackable(number, t))
            assert not early, f"acked before their publishes were confirmed: {early}"
            done |= covered
        else:
            assert settled.tag not in done, f"tag {settled.tag} settled twice"
            if settled.kind == "ack":
                assert self._ackable(number, settled.tag), \
                    f"tag {settled.tag} acked before its publishes were confirmed"
            done.add(settled.tag)

    def _end_of_turn(self) -> None:
        self._writes_this_turn = 0


# -- the users' broker ----------------------------------------------------------------------------


@dataclass
class Message:
    """A message in a :class:`StubRabbit` queue (or taken from one): where it is now is
    ``state`` -- ``ready``, ``unacked`` (on ``channel`` as ``tag``), ``acked``, ``dead``
    (nacked or rejected without requeue) or ``dropped`` (delivered with ``auto_ack``)."""

    body: bytes
    routing_key: str = ""
    exchange: str = ""
    properties: Any = None
    redelivered: bool = False
    state: str = "ready"
    queue: str = ""
    deliveries: int = 0
    channel: Any = None
    tag: int = 0


class StubQueue:
    def __init__(self, name: str, arguments: dict | None = None) -> None:
        self.name = name
        self.arguments = dict(arguments or {})
        self.ready: list[Message] = []
        self.consumers: list[tuple[RabbitChannel, str]] = []


class _Transport(StubTransport):
    """What :func:`rtroute.amqp.pika_internals.coalesce_io` patches on a transport."""

    def __init__(self) -> None:
        super().__init__()
        from collections import deque
        self._tx_buffers: Any = deque()

    def _produce(self) -> None:
        pass


class RabbitChannel(StubChannel):
    """A pika ``Channel`` of a :class:`RabbitConnection`: declarations, qos, consume,
    cancel, acks and close, answered as RabbitMQ answers them (on the next ioloop turn)."""

    connection: RabbitConnection

    def __init__(self, connection: RabbitConnection, number: int) -> None:
        super().__init__(connection, number)
        self.prefetch = 0
        self.unacked: dict[int, Message] = {}
        self.next_tag = 1
        self.consumers: dict[str, tuple[str, bool, Callable]] = {}
        self.closing = False
        self._on_cancel: list[Callable] = []

    @property
    def rabbit(self) -> StubRabbit:
        return self.connection.rabbit

    @property
    def is_closed(self) -> bool:
        return not self.is_open

    @property
    def is_closing(self) -> bool:
        return self.closing and self.is_open

    def add_on_cancel_callback(self, callback: Callable) -> None:
        self._on_cancel.append(callback)

    def _answer(self, callback: Callable | None, method: Any) -> None:
        if not self.is_open or not self.connection.is_open:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        if callback is not None:
            frame = pika.frame.Method(self.channel_number, method)
            self.rabbit.ioloop.call_later(
                0, lambda: callback(frame) if self.is_open else None)

    def _refuse(self, code: int, text: str) -> None:
        """The broker closes the channel (after this turn), as for a refused method."""
        self.rabbit.errors.append(f"channel {self.channel_number}: {code} {text}")
        self.rabbit.ioloop.call_later(0, lambda: self.close_by_broker(code, text)
                                      if self.is_open else None)

    # -- declarations ------------------------------------------------------------------------

    def exchange_declare(self, exchange: str, exchange_type: Any = "direct",
                         passive: bool = False, durable: bool = False,
                         auto_delete: bool = False, internal: bool = False,
                         arguments: dict | None = None, callback: Callable | None = None
                         ) -> None:
        rabbit = self.rabbit
        rabbit.declared.append(("exchange", exchange, passive))
        if passive and exchange not in rabbit.exchanges:
            self._refuse(404, f"NOT_FOUND - no exchange '{exchange}' in vhost '/'")
            return
        rabbit.exchanges.setdefault(exchange, str(getattr(exchange_type, "value",
                                                          exchange_type)))
        self._answer(callback, pika.spec.Exchange.DeclareOk())

    def exchange_delete(self, exchange: str | None = None, if_unused: bool = False,
                        callback: Callable | None = None) -> None:
        self.rabbit.exchanges.pop(exchange or "", None)
        self._answer(callback, pika.spec.Exchange.DeleteOk())

    def exchange_bind(self, destination: str, source: str, routing_key: str = "",
                      arguments: dict | None = None, callback: Callable | None = None) -> None:
        self.rabbit.bindings.append((source, destination, routing_key))
        self._answer(callback, pika.spec.Exchange.BindOk())

    def exchange_unbind(self, destination: str | None = None, source: str | None = None,
                        routing_key: str = "", arguments: dict | None = None,
                        callback: Callable | None = None) -> None:
        self._answer(callback, pika.spec.Exchange.UnbindOk())

    def queue_declare(self, queue: str, passive: bool = False, durable: bool = False,
                      exclusive: bool = False, auto_delete: bool = False,
                      arguments: dict | None = None, callback: Callable | None = None) -> None:
        rabbit = self.rabbit
        rabbit.declared.append(("queue", queue, passive))
        if passive and queue not in rabbit.queues:
            self._refuse(404, f"NOT_FOUND - no queue '{queue}' in vhost '/'")
            return
        if not queue:
            rabbit.named += 1
            queue = f"amq.gen-{rabbit.named}"
        found = rabbit.queues.get(queue) or rabbit.declare_queue(queue, arguments)
        self._answer(callback, pika.spec.Queue.DeclareOk(
            queue, len(found.ready), len(found.consumers)))

    def queue_bind(self, queue: str, exchange: str, routing_key: str | None = None,
                   arguments: dict | None = None, callback: Callable | None = None) -> None:
        if exchange not in self.rabbit.exchanges:
            self._refuse(404, f"NOT_FOUND - no exchange '{exchange}' in vhost '/'")
            return
        self.rabbit.bindings.append((exchange, queue, routing_key or ""))
        self._answer(callback, pika.spec.Queue.BindOk())

    def queue_unbind(self, queue: str, exchange: str | None = None,
                     routing_key: str | None = None, arguments: dict | None = None,
                     callback: Callable | None = None) -> None:
        self._answer(callback, pika.spec.Queue.UnbindOk())

    def queue_delete(self, queue: str, if_unused: bool = False, if_empty: bool = False,
                     callback: Callable | None = None) -> None:
        found = self.rabbit.queues.pop(queue, None)
        self._answer(callback, pika.spec.Queue.DeleteOk(len(found.ready) if found else 0))

    def queue_purge(self, queue: str, callback: Callable | None = None) -> None:
        found = self.rabbit.queues[queue]
        count, found.ready = len(found.ready), []
        self._answer(callback, pika.spec.Queue.PurgeOk(count))

    # -- consuming ---------------------------------------------------------------------------

    def basic_qos(self, prefetch_size: int = 0, prefetch_count: int = 0,
                  global_qos: bool = False, callback: Callable | None = None) -> None:
        self.prefetch = prefetch_count
        self._answer(callback, pika.spec.Basic.QosOk())
        self.rabbit.dispatch_soon()

    def basic_consume(self, queue: str, on_message_callback: Callable, auto_ack: bool = False,
                      exclusive: bool = False, consumer_tag: str | None = None,
                      arguments: dict | None = None, callback: Callable | None = None) -> str:
        if not self.is_open:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        rabbit = self.rabbit
        if consumer_tag is None:
            rabbit.named += 1
            consumer_tag = f"ctag{self.channel_number}.{rabbit.named}"
        found = rabbit.queues.get(queue)
        if found is None:
            self._refuse(404, f"NOT_FOUND - no queue '{queue}' in vhost '/'")
            return consumer_tag
        self.consumers[consumer_tag] = (queue, auto_ack, on_message_callback)
        found.consumers.append((self, consumer_tag))
        self._answer(callback, pika.spec.Basic.ConsumeOk(consumer_tag))
        rabbit.dispatch_soon()
        return consumer_tag

    def basic_cancel(self, consumer_tag: str = "", callback: Callable | None = None) -> None:
        self._stop_consumer(consumer_tag)
        self._answer(callback, pika.spec.Basic.CancelOk(consumer_tag))

    def _stop_consumer(self, consumer_tag: str) -> None:
        consumer = self.consumers.pop(consumer_tag, None)
        if consumer is not None:
            found = self.rabbit.queues.get(consumer[0])
            if found is not None and (self, consumer_tag) in found.consumers:
                found.consumers.remove((self, consumer_tag))

    def cancel_by_broker(self, consumer_tag: str) -> None:
        """``basic.cancel`` from the broker (the queue was deleted)."""
        self._stop_consumer(consumer_tag)
        frame = pika.frame.Method(self.channel_number, pika.spec.Basic.Cancel(consumer_tag))
        for callback in list(self._on_cancel):
            callback(frame)

    def _settle(self, kind: str, tag: int, multiple: bool, requeue: bool) -> None:
        if self.refuse or not self.is_open:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        if self.connection.is_closed:
            raise pika.exceptions.ConnectionWrongStateError(
                "Attempted to send a frame on closed connection.")
        self.settled.append(Settled(kind, tag, multiple, requeue))
        tags = sorted(t for t in self.unacked if t <= tag) if multiple else \
            [tag] if tag in self.unacked else []
        if not tags:
            self._refuse(406, f"PRECONDITION_FAILED - unknown delivery tag {tag}")
            return
        rabbit = self.rabbit
        messages = [self.unacked.pop(t) for t in tags]
        if kind == "ack":
            for message in messages:
                message.state, message.channel = "acked", None
                rabbit.acked.append(message)
        elif requeue:
            rabbit.requeue(messages)
        else:
            for message in messages:
                message.state, message.channel = "dead", None
                rabbit.dead.append(message)
        rabbit.dispatch_soon()

    # -- closing -----------------------------------------------------------------------------

    def close(self, reply_code: int = 0, reply_text: str = "Normal shutdown") -> None:
        if not self.is_open or self.closing:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        self.closing = True

        def closed() -> None:
            if self.is_open:
                self._gone(pika.exceptions.ChannelClosedByClient(reply_code, reply_text))

        self.rabbit.ioloop.call_later(0, closed)

    def close_by_broker(self, code: int, text: str) -> None:
        self._gone(pika.exceptions.ChannelClosedByBroker(code, text))

    def _gone(self, reason: Exception) -> None:
        """The channel is closed: its consumers go, its unacked deliveries are requeued, then
        its close callbacks run."""
        self.is_open = False
        for tag in list(self.consumers):
            self._stop_consumer(tag)
        unacked, self.unacked = self.unacked, {}
        self.rabbit.requeue([unacked[t] for t in sorted(unacked)])
        self.rabbit.dispatch_soon()
        for callback in list(self._on_close):
            callback(self, reason)


class RabbitConnection(StubConnection):
    """A ``pika.SelectConnection`` on a :class:`StubRabbit` (see :meth:`StubRabbit.connect`)."""

    channels: list[RabbitChannel]  # type: ignore[assignment]

    def __init__(self, rabbit: StubRabbit, on_open: Callable | None,
                 on_open_error: Callable | None, on_close: Callable | None) -> None:
        super().__init__(rabbit, rabbit.ioloop, rabbit.frame_max)  # type: ignore[arg-type]
        self.rabbit = rabbit
        self._transport = _Transport()
        self.is_open = False
        self.server_properties = {"cluster_name": b"rabbit@stub", "version": b"4.3.6",
                                  "product": b"RabbitMQ"}
        self._on_open = on_open
        self._on_open_error = on_open_error
        self._on_close = on_close
        self._delivery: list[Any] = []  # a delivery read by pika's path: method, header, body
        self.writes_this_turn = 0

    @property
    def ioloop(self) -> StubIOLoop:  # type: ignore[override]
        return self.rabbit.ioloop

    @ioloop.setter
    def ioloop(self, _value: Any) -> None:
        pass

    def _opened(self) -> None:
        if self.rabbit.refuse_connections is not None:
            self.is_closed = True
            if self._on_open_error is not None:
                self._on_open_error(self, pika.exceptions.AMQPConnectionError(
                    self.rabbit.refuse_connections))
            return
        self.is_open = True
        if self._on_open is not None:
            self._on_open(self)

    def channel(self, channel_number: int | None = None,  # type: ignore[override]
                on_open_callback: Callable | None = None) -> RabbitChannel:
        if not self.is_open:
            raise pika.exceptions.ConnectionWrongStateError("Connection is closed.")
        channel = RabbitChannel(self, len(self.channels) + 1)
        self.channels.append(channel)
        if on_open_callback is not None:
            self.ioloop.call_later(0, lambda: on_open_callback(channel)
                                   if channel.is_open and self.is_open else None)
        return channel

    def close(self, reply_code: int = 200, reply_text: str = "Normal shutdown") -> None:
        if not self.is_open:
            raise pika.exceptions.ConnectionWrongStateError("Connection is closed.")
        self.is_closing = True
        self.ioloop.call_later(0, lambda: self.rabbit.lose(
            self, pika.exceptions.ConnectionClosedByClient(reply_code, reply_text)))

    # -- what the broker sends ---------------------------------------------------------------

    def _on_data_available(self, data: bytes) -> None:
        """pika's own read path (until a frame reader takes reading over)."""
        offset = 0
        while offset < len(data):
            consumed, frame = pika.frame.decode_frame(data[offset:])
            offset += consumed
            self._process_frame(frame)

    def _process_frame(self, frame: Any) -> None:
        """pika's dispatch, as far as the users need it: confirms to the channel's
        ``confirm_delivery`` callback, deliveries to the consumer's callback."""
        self.to_pika.append(frame)
        channel = self.channels[frame.channel_number - 1]
        method = getattr(frame, "method", None)
        if isinstance(method, (pika.spec.Basic.Ack, pika.spec.Basic.Nack)):
            if channel._on_ack_nack is not None:
                channel._on_ack_nack(frame)
            return
        if isinstance(method, pika.spec.Basic.Deliver):
            self._delivery = [frame]
        elif isinstance(frame, pika.frame.Header) and self._delivery:
            self._delivery.append(frame)
            if frame.body_size == 0:
                self._delivered(channel, b"")
        elif isinstance(frame, pika.frame.Body) and self._delivery:
            self._delivery.append(frame)
            body = b"".join(f.fragment for f in self._delivery[2:])
            if len(body) >= self._delivery[1].body_size:
                self._delivered(channel, body)

    def _delivered(self, channel: RabbitChannel, body: bytes) -> None:
        method, header = self._delivery[0].method, self._delivery[1]
        self._delivery = []
        consumer = channel.consumers.get(method.consumer_tag)
        if consumer is not None:
            consumer[2](channel, method, header.properties, body)

    def _adapter_emit_data(self, data: bytes) -> None:
        self.rabbit.written(self, data)


class StubRabbit:
    """A broker for the users of the relay (see the module docstring).

    Script API: :meth:`enqueue` messages; :meth:`ack`, :meth:`nack`, :meth:`return_` a
    publish (or :attr:`confirm` every publish as it comes); :meth:`block`; :meth:`drop` a
    connection (lost) or :meth:`close_channel`; ``refuse_connections`` (a reason) fails every
    connect. Where things are: :meth:`bodies` of a queue (ready and unacked, in queue order),
    :attr:`acked`, :attr:`dead`, :attr:`published`, :meth:`confirmed`.
    """

    def __init__(self, frame_max: int = 131072, ioloop: StubIOLoop | None = None,
                 confirm: bool = False) -> None:
        self.frame_max = frame_max
        self.ioloop = ioloop or StubIOLoop()
        self.confirm = confirm  # ack each publish on the turn after it is written
        self.exchanges: dict[str, str] = {"": "direct", "amq.direct": "direct",
                                          "amq.topic": "topic", "amq.fanout": "fanout"}
        self.queues: dict[str, StubQueue] = {}
        self.bindings: list[tuple[str, str, str]] = []
        self.declared: list[tuple[str, str, bool]] = []
        self.connections: list[RabbitConnection] = []
        self.published: list[Published] = []
        self.acked: list[Message] = []
        self.dead: list[Message] = []
        self.errors: list[str] = []  # channels the broker closed, and why
        self.settled_publishes: dict[int, str] = {}  # id(published) -> "ack" | "nack"
        self.refuse_connections: str | None = None
        self.blocked = False
        self.named = 0
        self.writes = 0
        self._dispatching = False
        self.ioloop.after_turn.append(self._end_of_turn)

    # -- connections -------------------------------------------------------------------------

    def connect(self, parameters: Any = None, on_open_callback: Callable | None = None,
                on_open_error_callback: Callable | None = None,
                on_close_callback: Callable | None = None, custom_ioloop: Any = None,
                **_ignored: Any) -> RabbitConnection:
        """``pika.SelectConnection``'s signature: the connection opens on the next turn."""
        connection = RabbitConnection(self, on_open_callback, on_open_error_callback,
                                      on_close_callback)
        self.connections.append(connection)
        self.ioloop.call_later(0, connection._opened)
        return connection

    @property
    def connection(self) -> RabbitConnection:
        """The last connection opened."""
        return self.connections[-1]

    def open_connections(self) -> list[RabbitConnection]:
        return [c for c in self.connections if c.is_open]

    def drop(self, connection: RabbitConnection | None = None) -> None:
        """The connection is lost (the socket went): see :meth:`lose`."""
        self.lose(connection or self.connection,
                  pika.exceptions.StreamLostError("Transport indicated EOF"))

    def lose(self, connection: RabbitConnection, reason: Exception) -> None:
        """``connection`` is closed: its channels close first (each requeues its unacked
        deliveries), then its close callback runs, as pika does."""
        if connection.is_closed:
            return
        connection.is_open = False
        connection.is_closing = False
        connection.is_closed = True
        for channel in connection.channels:
            if channel.is_open:
                channel._gone(reason)
        if connection._on_close is not None:
            connection._on_close(connection, reason)

    def close_channel(self, channel: RabbitChannel, code: int = 406,
                      text: str = "PRECONDITION_FAILED") -> None:
        channel.close_by_broker(code, text)

    def block(self, reason: str = "low on memory") -> None:
        self.blocked = True
        for connection in self.open_connections():
            frame = SimpleNamespace(method=pika.spec.Connection.Blocked(reason))
            for callback in list(connection._on_blocked):
                callback(connection, frame)

    def unblock(self) -> None:
        self.blocked = False
        for connection in self.open_connections():
            frame = SimpleNamespace(method=pika.spec.Connection.Unblocked())
            for callback in list(connection._on_unblocked):
                callback(connection, frame)

    # -- queues ------------------------------------------------------------------------------

    def declare_queue(self, name: str, arguments: dict | None = None) -> StubQueue:
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = StubQueue(name, arguments)
        return queue

    def enqueue(self, queue: str, body: bytes, routing_key: str = "", *,
                headers: dict | None = None, properties: Any = None,
                exchange: str = "") -> Message:
        """A message published to ``queue`` (declared if need be)."""
        if properties is None and headers is not None:
            properties = pika.BasicProperties(headers=headers)
        message = Message(body, routing_key, exchange, properties, queue=queue)
        self.declare_queue(queue).ready.append(message)
        self.dispatch_soon()
        return message

    def bodies(self, queue: str) -> list[bytes]:
        """The bodies in ``queue``: ready, then unacked (each in delivery order)."""
        found = self.queues.get(queue)
        if found is None:
            return []
        unacked = sorted((m for c in self.connections for ch in c.channels
                          for m in ch.unacked.values() if m.queue == queue),
                         key=lambda m: (m.channel.channel_number, m.tag))
        return [m.body for m in found.ready] + [m.body for m in unacked]

    def unacked(self) -> list[Message]:
        return [m for c in self.connections for ch in c.channels for m in ch.unacked.values()]

    def requeue(self, messages: list[Message]) -> None:
        """Back to the head of their queues, in order, marked redelivered."""
        for message in reversed(messages):
            message.state, message.channel, message.tag = "ready", None, 0
            message.redelivered = True
            queue = self.queues.get(message.queue)
            if queue is not None:
                queue.ready.insert(0, message)

    def dispatch_soon(self) -> None:
        if not self._dispatching:
            self._dispatching = True
            self.ioloop.call_later(0, self._dispatch)

    def _dispatch(self) -> None:
        """Each consumer gets what its channel's prefetch leaves room for, as frame bytes on
        its connection (one chunk per connection)."""
        self._dispatching = False
        chunks: dict[int, list[bytes]] = {}
        for queue in list(self.queues.values()):
            for channel, consumer_tag in list(queue.consumers):
                _name, auto_ack, _callback = channel.consumers[consumer_tag]
                while queue.ready and (auto_ack or not channel.prefetch
                                       or len(channel.unacked) < channel.prefetch):
                    message = queue.ready.pop(0)
                    tag = channel.next_tag
                    channel.next_tag += 1
                    message.deliveries += 1
                    if auto_ack:
                        message.state = "dropped"
                        self.acked.append(message)
                    else:
                        message.state, message.channel, message.tag = "unacked", channel, tag
                        channel.unacked[tag] = message
                    chunks.setdefault(id(channel.connection), []).append(
                        self._deliver_frames(channel, consumer_tag, tag, message))
        for connection in self.connections:
            data = chunks.get(id(connection))
            if data and connection.is_open:
                connection._on_data_available(b"".join(data))

    def _deliver_frames(self, channel: RabbitChannel, consumer_tag: str, tag: int,
                        message: Message) -> bytes:
        number = channel.channel_number
        body = message.body
        frame_max = self.frame_max
        parts = [pika.frame.Method(number, pika.spec.Basic.Deliver(
            consumer_tag, tag, message.redelivered, message.exchange,
            message.routing_key)).marshal(),
            pika.frame.Header(number, len(body),
                              message.properties or pika.BasicProperties()).marshal()]
        step = frame_max - 8
        for start in range(0, len(body), step):
            parts.append(pika.frame.Body(number, body[start:start + step]).marshal())
        return b"".join(parts)

    # -- publishes ---------------------------------------------------------------------------

    def written(self, connection: RabbitConnection, data: bytes) -> None:
        assert not self.blocked, "written while the connection is blocked"
        self.writes += 1
        connection.writes_this_turn += 1
        assert connection.writes_this_turn <= 1, "two writes in one ioloop turn"
        new = parse_publishes(data, connection.channels, self.writes, self.frame_max)
        for published in new:
            published.connection = connection  # type: ignore[attr-defined]
            if published.exchange == "" and published.routing_key in self.queues:
                self.queues[published.routing_key].ready.append(Message(
                    published.body, published.routing_key, "", published.properties,
                    queue=published.routing_key))
                self.dispatch_soon()
        self.published += new
        if self.confirm:
            confirming = [p for p in new if p.seq]
            if confirming:
                self.ioloop.call_later(0, lambda: [self.ack(p) for p in confirming
                                                   if id(p) not in self.settled_publishes])

    def to(self, exchange: str, routing_key: str | None = None) -> list[Published]:
        """What was published to ``exchange`` (and ``routing_key``)."""
        return [p for p in self.published if p.exchange == exchange
                and (routing_key is None or p.routing_key == routing_key)]

    def confirmed(self, exchange: str | None = None) -> list[bytes]:
        """The bodies of the publishes the broker acked (to ``exchange``)."""
        return [p.body for p in self.published if self.settled_publishes.get(id(p)) == "ack"
                and (exchange is None or p.exchange == exchange)]

    def unconfirmed(self) -> list[Published]:
        return [p for p in self.published if p.seq and id(p) not in self.settled_publishes]

    def ack(self, published: Published, multiple: bool = False) -> None:
        self._confirm(published, pika.spec.Basic.Ack(delivery_tag=published.seq,
                                                     multiple=multiple), "ack", multiple)

    def nack(self, published: Published, multiple: bool = False) -> None:
        self._confirm(published, pika.spec.Basic.Nack(delivery_tag=published.seq,
                                                      multiple=multiple), "nack", multiple)

    def ack_all(self) -> None:
        for published in self.unconfirmed():
            if published.connection.is_open:  # type: ignore[attr-defined]
                self.ack(published)

    def _confirm(self, published: Published, method: Any, kind: str, multiple: bool) -> None:
        connection = published.connection  # type: ignore[attr-defined]
        assert published.seq, "a publish on a channel not in confirm mode"
        covered = [p for p in self.published if p.connection is connection  # type: ignore
                   and p.channel == published.channel and p.seq
                   and (p.seq <= published.seq if multiple else p is published)]
        for one in covered:
            assert id(one) not in self.settled_publishes or multiple, \
                f"sequence number {one.seq} settled twice"
            self.settled_publishes.setdefault(id(one), kind)
        if connection.is_open:
            connection._on_data_available(
                pika.frame.Method(published.channel, method).marshal())

    def return_(self, published: Published, code: int = 312, text: str = "NO_ROUTE") -> None:
        """``basic.return`` of ``published`` (ack it afterwards, as RabbitMQ does)."""
        connection = published.connection  # type: ignore[attr-defined]
        channel = connection.channels[published.channel - 1]
        method = pika.spec.Basic.Return(code, text, published.exchange, published.routing_key)
        for callback in list(channel._on_return):
            callback(channel, method, published.properties or pika.BasicProperties(),
                     published.body)

    def _end_of_turn(self) -> None:
        for connection in self.connections:
            connection.writes_this_turn = 0
