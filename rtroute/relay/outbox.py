"""The outbox: publishes in order, written while nothing pauses them, one write per ioloop turn.

An :class:`Outbox` holds the :class:`~rtroute.relay.outgoing.Outgoing` publishes of one publish
channel. :meth:`Outbox.put` writes a publish at once when nothing waits ahead of it and no
:class:`PauseReason` holds; otherwise it queues it, and :meth:`Outbox.resume` sends the queue,
in order, once the last reason is gone. A retry goes to the front (:meth:`Outbox.put_front`).

With confirms the outbox hands each publish to a :class:`~rtroute.amqp.confirm_window.
ConfirmWindow` as frames (``publish_frames``, which writes the frames of one turn in one piece;
properties are encoded here first); a full window raises ``WindowFull``, the outbox
pauses (``WINDOW``) and resumes when the window calls its ``on_writable`` at the low watermark.
Without confirms (a shovel's ``on_publish`` and ``no_ack``) it buffers the frames of the turn
and writes them with one ``emit`` at its end; :class:`~rtroute.relay.flow.FlowControl` pauses
it (``BUFFER``) while the socket's write buffer is full.

The frame_max guard: a content header frame larger than the connection's ``frame_max`` makes
RabbitMQ close the whole connection (``FRAME_ERROR``), and the message would come back for ever.
Every publish not marked ``checked`` is measured first (RabbitMQ's ``FRAME_SIZE_FUDGE`` forgives
the 8 bytes of frame head and end, so a payload of ``frame_max`` bytes is accepted); one that
does not fit, or whose properties pika cannot encode, is never written and goes to
``on_rejected`` (the policy) without spending a sequence number.
"""
from __future__ import annotations

import collections
import enum
import struct
import sys
from collections.abc import Callable, Iterable
from typing import Any

import pika.exceptions

from rtroute.amqp import frames as amqp_frames
from rtroute.amqp.confirm_window import ConfirmWindow, WindowClosed, WindowFull
from rtroute.relay.outgoing import Outgoing

__all__ = ["Outbox", "PauseReason", "header_too_large"]

#: What pika raises for a property value it cannot encode.
ENCODING_ERRORS = (TypeError, ValueError, OverflowError, struct.error, UnicodeError,
                   pika.exceptions.UnsupportedAMQPFieldException)


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


def header_too_large(out: Outgoing, frame_max: int) -> str | None:
    """Why ``out`` cannot be published on a connection with ``frame_max``, or None.

    Raises:
        Exception: what pika raises for properties it cannot encode (see
            :data:`ENCODING_ERRORS`).
    """
    data = out.frames
    if data is not None:
        size = len(data[1]) if type(data) is list else amqp_frames.content_header_size(data)
    elif out.properties is not None:
        body = out.body
        size = amqp_frames.properties_frame_size(len(body) if isinstance(body, bytes) else 0,
                                                 out.properties)
    else:
        return None
    # RabbitMQ takes a frame whose payload fits in frame_max (rabbit_reader's
    # FRAME_SIZE_FUDGE forgives the 8 bytes of frame head and end): take what it takes
    if not frame_max or size - 8 <= frame_max:
        return None
    return (f"its properties and headers ({size - 8} bytes as a content header) exceed "
            f"the connection's frame_max ({frame_max} bytes)")


class Outbox:
    """The publishes of one publish channel (see the module docstring).

    Args:
        ioloop: the connection's ioloop (``call_later(0, ...)`` ends the turn).
        on_confirm: the window's callback for each publish's :class:`PublishFuture`.
        on_rejected: ``on_rejected(out, reason)`` for a publish that cannot be sent.
        on_published: ``on_published(out)`` after a publish was handed to the window (with
            confirms) or buffered for this turn's write (without).
        on_resumed: called after a :meth:`resume`, once the queue went out as far as it could.

    Attributes:
        backlog_limit, on_backlog: ``on_backlog()`` runs when a queued publish makes the queue
            ``backlog_limit`` long (see :class:`~rtroute.relay.flow.FlowControl`).
        after_write: ``after_write(connection)`` after each write without confirms.
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
        self._window: ConfirmWindow | None = None
        self._publish_frames: Callable[..., Any] | None = None  # the window's, bound
        self._channel: Any = None
        self._connection: Any = None
        self.frame_max = 0
        self._unsent: list[bytes] = []   # without confirms: the frames of this turn
        self._unsent_count = 0
        self._unsent_publishes = 0
        self.on_written: Callable[[int], Any] | None = None
        self.backlog_limit = sys.maxsize
        self.on_backlog: Callable[[], Any] | None = None
        self.after_write: Callable[[Any], Any] | None = None
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
    def window(self) -> ConfirmWindow | None:
        """The confirm window of the publish channel (None: none, or no confirms)."""
        return self._window

    @property
    def in_flight(self) -> int:
        """Publishes handed to the window and not yet settled."""
        return self._window.in_flight if self._window is not None else 0

    # -- the channel ---------------------------------------------------------------------------

    def attach(self, channel: Any, window: ConfirmWindow | None) -> None:
        """Publish on ``channel`` from now on, through ``window`` (None: without confirms);
        the queue goes out unless another reason holds."""
        self._channel = channel
        self._connection = channel.connection
        self.frame_max = self._connection.params.frame_max
        self._window = window
        self._publish_frames = window.publish_frames if window is not None else None
        self.resume(PauseReason.DETACHED)

    def detach(self) -> list[Any]:
        """The channel is gone: forget it and the pauses that came with it (window, blocked,
        buffer); return what never went out, in order, and forget that too."""
        self._window = None
        self._publish_frames = None
        self._channel = self._connection = None
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
        # the per-message path: a ready, checked publish goes straight to the window
        if self._paused or self._queue:
            queue = self._queue
            queue.append(out)
            if len(queue) >= self.backlog_limit:
                self.on_backlog()  # type: ignore[misc]
            return
        if not out.checked or out.frames is None:
            self._send(out)
            return
        publish = self._publish_frames
        if publish is None:
            # without confirms: _write inlined (this is the per-message path of those modes)
            connection = self._connection
            if connection.is_closing or connection.is_closed:
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
        except WindowFull:
            self._queue.appendleft(out)
            self.pause(PauseReason.WINDOW)
            return
        except (WindowClosed, pika.exceptions.ChannelWrongStateError):
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
        """Hand ``items`` to the window in one call, with no
        :class:`~rtroute.amqp.confirm_window.PublishFuture` each (the publisher's path for
        thousands in flight; see :meth:`ConfirmWindow.publish_frames_in_bulk`).

        Each of ``items`` is its own single, non-mandatory publish whose frames (made for this
        channel and known to fit its ``frame_max``) are in ``messages``, ``frame_count``
        frames in all; their outcomes reach the window's ``on_bulk_settled`` (see
        :class:`~rtroute.relay.bulk.BulkFanIn`), not ``on_confirm``. The caller checks first
        that nothing waits, nothing pauses the outbox and the window has room for them all:
        they cannot be queued (they carry no frames of their own).

        Raises:
            RuntimeError: the outbox is paused, has publishes waiting, or has no window.
            WindowFull, WindowClosed, pika.exceptions.ChannelWrongStateError: as the window's
                ``publish_frames_in_bulk`` (nothing was sent).
        """
        window = self._window
        if self._paused or self._queue or window is None:
            raise RuntimeError("put_bulk needs an outbox that is neither paused nor queueing, "
                               "with confirms")
        window.publish_frames_in_bulk(messages, frame_count, items)
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
        if not out.checked:
            try:
                reason = header_too_large(out, self.frame_max)
            except ENCODING_ERRORS as exc:
                reason = f"its properties cannot be encoded ({type(exc).__name__}: {exc})"
            if reason is not None:
                self._on_rejected(out, reason)
                return True
        window = self._window
        if window is None:
            return self._write(out)
        data = out.frames
        try:
            if data is None:
                data = _encoded(self._channel.channel_number, out, self.frame_max)
            window.publish_frames(out.exchange, out.routing_key, data,
                                  out.frame_count if out.frames is not None else len(data),
                                  out.body, out.mandatory, self._on_confirm, out)
        except WindowFull:
            self._queue.appendleft(out)
            self.pause(PauseReason.WINDOW)
            return False
        except (WindowClosed, pika.exceptions.ChannelWrongStateError):
            self._queue.appendleft(out)
            return False
        except ENCODING_ERRORS as exc:
            # pika refused the properties before anything went out (no sequence number spent)
            self._on_rejected(out, f"its properties cannot be encoded "
                                   f"({type(exc).__name__}: {exc})")
            return True
        self.published += 1
        if self.on_published is not None:
            self.on_published(out)
        return True

    def _write(self, out: Any) -> bool:
        """Without confirms: buffer ``out``'s frames for the write at the end of the turn."""
        connection = self._connection
        if connection.is_closing or connection.is_closed:
            self._queue.appendleft(out)
            return False
        data = out.frames
        if data is None:
            try:
                data = _encoded(self._channel.channel_number, out, self.frame_max)
            except ENCODING_ERRORS as exc:
                self._on_rejected(out, f"its properties cannot be encoded "
                                       f"({type(exc).__name__}: {exc})")
                return True
        unsent = self._unsent
        if not unsent:
            self._ioloop.call_later(0, self._flush)
        if type(data) is list:
            unsent.extend(data)
        else:
            unsent.append(data)
        self._unsent_count += out.frame_count if out.frames is not None else len(data)
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
        connection = self._connection
        if not unsent or connection is None or connection.is_closing or connection.is_closed:
            return
        amqp_frames.emit(connection, b"".join(unsent), count)
        if self.on_written is not None:
            self.on_written(publishes)
        if self.after_write is not None:
            self.after_write(connection)

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


def _encoded(channel: int, out: Outgoing, frame_max: int) -> list[bytes]:
    """``out`` (properties and body) as frames for ``channel``: method, header, bodies."""
    from pika.frame import Header

    body = out.body() if callable(out.body) else (out.body or b"")
    method = amqp_frames.publish_frame(channel, amqp_frames.shortstr(out.exchange),
                                       amqp_frames.shortstr(out.routing_key), out.mandatory)
    header = Header(channel, len(body), out.properties).marshal()
    return [method, header, *amqp_frames.body_frames(channel, body, frame_max)]
