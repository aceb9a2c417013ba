"""The stub broker: a fake ioloop, connections and channels that the relay and its users cannot
tell from pika's, and a script API to ack, nack, return, block, close and drop at any point.
No RabbitMQ, no sockets, no threads of its own: time is virtual (:meth:`StubIOLoop.advance`).

The relay's broker is :class:`StubBroker` (tests/relay): one connection with a publish
channel and a consume channel, items made by the test. The users' broker, with queues and
consumers, builds on these parts: :class:`tests.stub_rabbit.StubRabbit`.

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
    connection: Any = None  # the StubRabbit connection it was written on


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
                channel: StubChannel | None = None, track: bool = True) -> Any:
        """A new delivery on ``channel`` (default: the consume channel), tracked by
        ``settler`` (``track``; an item the relay's ``submit`` takes is tracked there):
        ``make(tag)`` builds the item."""
        channel = channel or self.consume
        tag = self._next_tag.get(channel.channel_number, 0) + 1
        self._next_tag[channel.channel_number] = tag
        item = make(tag)
        if track:
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

