"""The outbox: publishes in order, written while nothing pauses them, one write per ioloop turn.

An :class:`Outbox` holds the :class:`~rtroute.relay.outgoing.Outgoing` publishes of one publish
channel. :meth:`Outbox.put` writes a publish at once when nothing waits ahead of it and no
:class:`PauseReason` holds; otherwise it queues it, and :meth:`Outbox.resume` sends the queue,
in order, once the last reason is gone. A retry goes to the front (:meth:`Outbox.put_front`).

The outbox writes to a :class:`~rtroute.relay.seams.Sink` and knows no wire protocol (the
AMQP 0-9-1 one, a pika channel and its confirm window, is
:class:`~rtroute.relay.amqp_sink.AmqpSink`). With confirms it hands each publish to the sink's
``publish_frames`` (properties are encoded by the sink first); a full window raises one of the
sink's ``full`` errors, the outbox pauses (``WINDOW``) and resumes when the window calls its
``on_writable`` at the low watermark. Without confirms (a shovel's ``on_publish`` and
``no_ack``) it buffers the frames of the turn and hands them to the sink's ``write`` at its end;
:class:`~rtroute.relay.flow.FlowControl` pauses it (``BUFFER``) while the socket's write buffer
is full.

Every publish not marked ``checked`` is measured by the sink first (``Sink.check``: the
frame_max guard of :mod:`rtroute.relay.amqp_sink`); one that does not fit, or whose properties
cannot be encoded, is never written and goes to ``on_rejected`` (the policy) without spending
a sequence number.
"""
from __future__ import annotations

import collections
import enum
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from rtroute.relay.seams import Sink, Unpublishable

if TYPE_CHECKING:
    from rtroute.relay.outgoing import Outgoing

__all__ = ["Outbox", "PauseReason"]  # header_too_large: still importable (see __getattr__)


def __getattr__(name: str) -> Any:
    # the AMQP 0-9-1 frame_max guard lives with its sink (it needs pika); its old names here
    # load it only when asked for
    if name in ("header_too_large", "ENCODING_ERRORS"):
        from rtroute.relay import amqp_sink
        return getattr(amqp_sink, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class PauseReason(str, enum.Enum):
    """Why the outbox does not write (several may hold at once)."""

    DETACHED = "detached"
    """No publish channel (not yet open, or gone)."""
    WINDOW = "window"
    """The confirm window is full; it says when it is half empty."""
    BLOCKED = "blocked"
    """The broker sent ``connection.blocked``."""
    BUFFER = "buffer"
    """Without confirms: the socket's write buffer is above its high mark."""
    STOPPING = "stopping"
    """The relay drains: nothing new goes out."""


class Outbox:
    """The publishes of one publish channel (see the module docstring).

    Args:
        ioloop: the connection's ioloop (``call_later(0, ...)`` ends the turn).
        on_confirm: the sink's callback for each publish's outcome (a
            :class:`~rtroute.amqp.confirm_window.PublishFuture` for the AMQP sink).
        on_rejected: ``on_rejected(out, reason)`` for a publish that cannot be sent.
        on_published: ``on_published(out)`` after a publish was handed to the sink (with
            confirms) or buffered for this turn's write (without).
        on_resumed: called after a :meth:`resume`, once the queue went out as far as it could.

    Attributes:
        backlog_limit, on_backlog: ``on_backlog()`` runs when a queued publish makes the queue
            ``backlog_limit`` long (see :class:`~rtroute.relay.flow.FlowControl`).
        after_write: ``after_write()`` after each write without confirms.
        on_written: ``on_written(count)`` after each write without confirms (``count``
            publishes in it).
        published: publishes handed over so far.
    """

    def __init__(
        self,
        ioloop: Any,
        *,
        on_confirm: Callable[[Any], Any],
        on_rejected: Callable[[Outgoing, str], Any],
        on_published: Callable[[Any], Any] | None = None,
        on_resumed: Callable[[], Any] | None = None,
    ) -> None:
        self._ioloop = ioloop
        self._on_confirm = on_confirm
        self._on_rejected = on_rejected
        self.on_published = on_published
        self.on_resumed = on_resumed
        self._queue: collections.deque[Any] = collections.deque()
        self._reasons: set[PauseReason] = {PauseReason.DETACHED}
        self._paused = True
        self._sink: Sink | None = None
        # with confirms: the sink's publish_frames, bound (the per-message lane), and what
        # it raises when full or going
        self._publish_frames: Callable[..., Any] | None = None
        self._full: tuple[type[BaseException], ...] = ()
        self._gone: tuple[type[BaseException], ...] = ()
        self._unsent: list[bytes] = []   # without confirms: the frames of this turn
        self._unsent_count = 0
        self._unsent_publishes = 0
        self.on_written: Callable[[int], Any] | None = None
        self.backlog_limit = sys.maxsize
        self.on_backlog: Callable[[], Any] | None = None
        self.after_write: Callable[[], Any] | None = None
        self.published = 0

    # -- state ---------------------------------------------------------------------------------

    @property
    def queued(self) -> collections.deque:
        """The publishes waiting, in the order they will go (read it, do not change it)."""
        return self._queue

    @property
    def paused(self) -> bool:
        """True while any pause reason holds."""
        return self._paused

    @property
    def pause_reasons(self) -> frozenset[PauseReason]:
        """The reasons that hold now."""
        return frozenset(self._reasons)

    @property
    def sink(self) -> Sink | None:
        """What the outbox writes to (None: detached)."""
        return self._sink

    @property
    def window(self) -> Any:
        """The confirm window of an AMQP sink (None: detached, no confirms, or a sink
        without one)."""
        return getattr(self._sink, "window", None)

    @property
    def frame_max(self) -> int:
        """The sink's ``frame_max`` (0: detached, or a sink without one)."""
        return getattr(self._sink, "frame_max", 0)

    @property
    def in_flight(self) -> int:
        """Publishes handed to the sink and not yet settled."""
        sink = self._sink  # read once: another thread may ask while the ioloop detaches
        return sink.in_flight if sink is not None else 0

    @property
    def room(self) -> int:
        """Publishes that go out at once: 0 while paused or while publishes wait, else the
        room in the sink's window."""
        sink = self._sink
        if sink is None or self._paused or self._queue:
            return 0
        return max(0, sink.room)

    # -- the channel ---------------------------------------------------------------------------

    def attach(self, sink: Sink) -> None:
        """Publish to ``sink`` from now on; the queue goes out unless another reason holds."""
        self._sink = sink
        if sink.confirms:
            self._publish_frames = sink.publish_frames
        else:
            self._publish_frames = None
        self._full, self._gone = tuple(sink.full), tuple(sink.gone)
        self.resume(PauseReason.DETACHED)

    def detach(self) -> list[Any]:
        """The channel is gone: forget it and the pauses that came with it (window, blocked,
        buffer); return what never went out, in order, and forget that too."""
        self._sink = None
        self._publish_frames = None
        self._unsent = []
        self._unsent_count = self._unsent_publishes = 0
        self._reasons = {PauseReason.DETACHED} | (self._reasons & {PauseReason.STOPPING})
        self._paused = True
        left = list(self._queue)
        self._queue.clear()
        return left

    def clear(self) -> list[Any]:
        """Forget what waits (it will not be sent); return it, in order."""
        left = list(self._queue)
        self._queue.clear()
        return left

    # -- putting -------------------------------------------------------------------------------

    def put(self, out: Any) -> None:
        """Send ``out`` now if nothing waits and nothing pauses the outbox, else queue it."""
        # the per-message path: a ready, checked publish goes straight to the sink
        if self._paused or self._queue:
            queue = self._queue
            queue.append(out)
            if len(queue) >= self.backlog_limit:
                self.on_backlog()  # type: ignore[misc]  # set with backlog_limit (flow.py)
            return
        if not out.checked or out.frames is None:
            self._send(out)
            return
        publish = self._publish_frames
        if publish is None:
            # without confirms: _write inlined (this is the per-message path of those modes)
            if self._sink.closing:  # type: ignore[union-attr]  # not paused: attached
                self._queue.appendleft(out)  # the connection is going; detach hands it back
                return
            unsent = self._unsent
            if not unsent:
                self._ioloop.call_later(0, self._flush)
            if type(out.frames) is list:
                unsent.extend(out.frames)
            else:
                unsent.append(out.frames)
            self._unsent_count += out.frame_count
            self._unsent_publishes += 1
            self.published += 1
            if self.on_published is not None:
                self.on_published(out)
            return
        try:
            publish(out.exchange, out.routing_key, out.frames, out.frame_count, out.body,
                    out.mandatory, self._on_confirm, out)
        except self._full:
            self._queue.appendleft(out)
            self.pause(PauseReason.WINDOW)
            return
        except self._gone:
            self._queue.appendleft(out)  # the channel is going; detach hands it back
            return
        self.published += 1
        if self.on_published is not None:
            self.on_published(out)

    def put_many(self, outs: Iterable[Any]) -> None:
        """:meth:`put` each of ``outs``, in order."""
        for out in outs:
            self.put(out)

    def put_bulk(self, messages: list[bytes], frame_count: int, items: list) -> None:
        """Hand ``items`` to the sink in one call, with no
        :class:`~rtroute.amqp.confirm_window.PublishFuture` each (the publisher's path for
        thousands in flight; see :meth:`ConfirmWindow.publish_frames_in_bulk
        <rtroute.amqp.confirm_window.ConfirmWindow.publish_frames_in_bulk>`).

        Each of ``items`` is its own single, non-mandatory publish whose frames (made for this
        channel and known to fit its ``frame_max``) are in ``messages``, ``frame_count``
        frames in all; their outcomes reach the window's ``on_bulk_settled`` (see
        :class:`~rtroute.relay.bulk.BulkFanIn`), not ``on_confirm``. The caller checks first
        that :attr:`room` is enough for them all: they cannot be queued (they carry no frames
        of their own).

        Raises:
            RuntimeError: the outbox is paused, has publishes waiting, or has no confirms.
            the sink's ``full`` and ``gone`` errors: as its ``publish_frames_in_bulk``
                (nothing was sent).
        """
        sink = self._sink
        if self._paused or self._queue or sink is None or not sink.confirms:
            raise RuntimeError("put_bulk needs an outbox that is neither paused nor queueing, "
                               "with confirms")
        sink.publish_frames_in_bulk(messages, frame_count, items)
        self.published += len(items)
        if self.on_published is not None:
            for item in items:
                self.on_published(item)

    def put_front(self, out: Any) -> None:
        """Send ``out`` ahead of everything waiting (a retry)."""
        if self._paused or self._queue:
            self._queue.appendleft(out)
            return
        self._send(out)

    def pump(self) -> None:
        """Send what waits, in order, while nothing pauses the outbox."""
        queue = self._queue
        while queue and not self._paused:
            if not self._send(queue.popleft()):
                return

    def _send(self, out: Any) -> bool:
        """Hand ``out`` over (or to ``on_rejected``); False if it went back to the front of
        the queue (full window, or a channel that is going)."""
        sink: Sink = self._sink  # type: ignore[assignment]  # not paused: attached
        if not out.checked:
            reason = sink.check(out)
            if reason is not None:
                self._on_rejected(out, reason)
                return True
        data, count = out.frames, out.frame_count
        if data is None:
            try:
                data, count = sink.encode(out)
            except Unpublishable as exc:
                # refused before anything went out (no sequence number spent)
                self._on_rejected(out, str(exc))
                return True
        if not sink.confirms:
            return self._write(out, data, count)
        try:
            sink.publish_frames(out.exchange, out.routing_key, data, count, out.body,
                                out.mandatory, self._on_confirm, out)
        except self._full:
            self._queue.appendleft(out)
            self.pause(PauseReason.WINDOW)
            return False
        except self._gone:
            self._queue.appendleft(out)
            return False
        self.published += 1
        if self.on_published is not None:
            self.on_published(out)
        return True

    def _write(self, out: Any, data: bytes | list[bytes], count: int) -> bool:
        """Without confirms: buffer ``out``'s frames for the write at the end of the turn."""
        if self._sink.closing:  # type: ignore[union-attr]  # called while attached
            self._queue.appendleft(out)
            return False
        unsent = self._unsent
        if not unsent:
            self._ioloop.call_later(0, self._flush)
        if isinstance(data, list):
            unsent.extend(data)
        else:
            unsent.append(data)
        self._unsent_count += count
        self._unsent_publishes += 1
        self.published += 1
        if self.on_published is not None:
            self.on_published(out)
        return True

    def _flush(self) -> None:
        """Write the frames of this turn in one piece (without confirms)."""
        unsent, count, publishes = self._unsent, self._unsent_count, self._unsent_publishes
        self._unsent = []
        self._unsent_count = self._unsent_publishes = 0
        sink = self._sink
        if not unsent or sink is None or sink.closing:
            return
        sink.write(b"".join(unsent), count)
        if self.on_written is not None:
            self.on_written(publishes)
        if self.after_write is not None:
            self.after_write()

    # -- pausing -------------------------------------------------------------------------------

    def pause(self, reason: PauseReason) -> None:
        """Stop writing until ``reason`` is resumed (publishes queue up meanwhile)."""
        self._reasons.add(reason)
        self._paused = True

    def resume(self, reason: PauseReason) -> None:
        """``reason`` no longer holds: send what waits if nothing else holds, then call
        ``on_resumed``."""
        reasons = self._reasons
        reasons.discard(reason)
        self._paused = bool(reasons)
        if not self._paused:
            self.pump()
        if self.on_resumed is not None:
            self.on_resumed()
