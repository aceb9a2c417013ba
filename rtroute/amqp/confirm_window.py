"""Windowed publisher confirms for a pika channel: many publishes in flight, one outcome each.

RabbitMQ's confirm rules, which :class:`ConfirmWindow` follows:

- after ``confirm.select`` the broker numbers publishes on the channel 1, 2, 3, ...;
- ``basic.ack`` / ``basic.nack`` carry such a number; with ``multiple`` they settle every
  publish up to and including it; each publish is settled once (acked *or* nacked, never both);
- a ``mandatory`` publish that no queue takes comes back as ``basic.return`` *before* its ack
  (returns carry no sequence number; see :meth:`ConfirmWindow._on_return` for how they are
  matched);
- when the channel or its connection closes, unsettled publishes have no outcome from the broker:
  they are reported :attr:`Outcome.FAILED` (the message may or may not have been routed).

The outcome types (:class:`Outcome`, :class:`PublishFuture`, :class:`WindowFull`,
:class:`WindowClosed`) live in :mod:`rtroute.amqp.confirm_future` and are importable from here.

Use it from a ``SelectConnection`` ioloop (callbacks run in the ioloop thread; a full window
raises :class:`WindowFull` and ``on_writable`` says when to go on), or with a
``BlockingConnection`` channel (publishing into a full window then processes I/O until there is
room, and :meth:`PublishFuture.result` processes I/O while it waits)::

    window = ConfirmWindow(channel, window=1000, on_writable=resume)
    window.start(on_ready=go)                     # sends confirm.select
    future = window.publish("ex", "key", b"body", mandatory=True, callback=done)
    ...
    def done(future):
        if future.outcome is Outcome.ACKED: ...
"""
from __future__ import annotations

import collections
import logging
import time
from typing import Any, Callable

import pika
from pika.adapters.blocking_connection import BlockingChannel

from rtroute.amqp.confirm_future import Outcome, PublishFuture, Waits, WindowClosed, WindowFull
from rtroute.amqp.frames import emit
from rtroute.amqp.pika_internals import blocking_channel_impl

__all__ = ["ConfirmWindow", "Outcome", "PublishFuture", "WindowClosed", "WindowFull"]

LOGGER = logging.getLogger(__name__)


class ConfirmWindow:
    """Publisher confirms with up to ``window`` publishes in flight on one channel.

    Args:
        channel: an open ``pika.channel.Channel`` (SelectConnection) or ``BlockingChannel``, not
            yet in confirm mode; the window puts it in confirm mode in :meth:`start`. Publish on
            this channel only through the window, or the sequence numbers go wrong.
        window: the most publishes in flight.
        on_writable: called (in the ioloop thread) when the window had filled up and the number
            in flight has dropped to ``low_watermark``.
        low_watermark: see ``on_writable``; default ``window - 1`` (resume at the first free slot).
        on_closed: ``on_closed(reason)`` after the channel closed and every unsettled publish was
            reported ``FAILED``.
        on_bulk_settled: ``on_bulk_settled(contexts, outcome, reason)`` for the publishes of
            :meth:`publish_frames_in_bulk`: the contexts of those one confirm (or the close)
            settled, in publish order, their :class:`Outcome`, and the close reason when
            ``FAILED``.

    Attributes (counters since start): ``published``, ``acked``, ``nacked``, ``returned``,
    ``failed``, ``unmatched_returns`` (returns no in-flight publish accounts for).
    """

    def __init__(
        self,
        channel: Any,
        window: int = 1000,
        on_writable: Callable[[], Any] | None = None,
        low_watermark: int | None = None,
        on_closed: Callable[[str], Any] | None = None,
        on_bulk_settled: Callable[[list, Outcome, str | None], Any] | None = None,
    ) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        if low_watermark is None:
            low_watermark = window - 1
        if not 0 <= low_watermark < window:
            raise ValueError("low_watermark must be in 0 .. window-1")
        self._blocking = isinstance(channel, BlockingChannel)
        self._channel = channel
        self._impl = blocking_channel_impl(channel) if self._blocking else channel
        self._window = window
        self._low_watermark = low_watermark
        self._on_writable = on_writable
        self._on_closed = on_closed
        self._on_bulk_settled = on_bulk_settled
        # a PublishFuture, or the bare context of a publish_frames_in_bulk
        self._pending: dict[int, Any] = {}
        self._mandatory: collections.deque[PublishFuture] = collections.deque()
        self._next_tag = 1
        self._lowest_unsettled = 1
        self._started = False
        self._ready = False
        self._was_full = False
        self._closed_reason: str | None = None
        self._drain_callbacks: list[Callable[[], Any]] = []
        self._frames: list[bytes] = []  # publish_frames data not yet written
        self._frame_count = 0
        self._flush_scheduled = False
        self._waits = Waits(channel.connection if self._blocking else None,
                            lambda: self._closed_reason is not None)
        self.published = 0
        self.acked = 0
        self.nacked = 0
        self.returned = 0
        self.failed = 0
        self.unmatched_returns = 0

    # -- state ---------------------------------------------------------------------------------

    @property
    def window(self) -> int:
        """The most publishes in flight."""
        return self._window

    @property
    def in_flight(self) -> int:
        """Publishes sent and not yet settled."""
        return len(self._pending)

    @property
    def has_room(self) -> bool:
        """True if :meth:`publish` would not block or raise :class:`WindowFull`."""
        return len(self._pending) < self._window and self._closed_reason is None

    @property
    def closed(self) -> bool:
        """True once the channel closed (every unsettled publish is then ``FAILED``)."""
        return self._closed_reason is not None

    @property
    def close_reason(self) -> str | None:
        """Why the channel closed, or None while it is open."""
        return self._closed_reason

    @property
    def ready(self) -> bool:
        """True once the broker answered ``confirm.select``."""
        return self._ready

    # -- control -------------------------------------------------------------------------------

    def start(self, on_ready: Callable[[], Any] | None = None) -> None:
        """Put the channel in confirm mode and start tracking confirms, returns and closure.

        With a SelectConnection channel this returns at once and ``on_ready()`` runs when the
        broker answers (publishing before that is allowed: the broker handles frames in order).
        With a BlockingChannel it returns after the answer.

        Raises:
            RuntimeError: called twice.
            WindowClosed: the channel closed before confirm mode was on (blocking only).
        """
        if self._started:
            raise RuntimeError("ConfirmWindow.start() called twice")
        self._started = True
        self._impl.add_on_close_callback(self._on_channel_closed)
        self._impl.add_on_return_callback(self._on_return)

        def on_select_ok(_frame: Any) -> None:
            self._ready = True
            if on_ready is not None:
                on_ready()

        self._impl.confirm_delivery(self._on_ack_nack, callback=on_select_ok)
        if self._blocking:
            self._waits.wait(lambda: self._ready, None)
            if not self._ready:
                raise WindowClosed(f"channel closed before confirm.select-ok: {self._closed_reason}")

    def publish(
        self,
        exchange: str,
        routing_key: str,
        body: bytes | str,
        properties: pika.BasicProperties | None = None,
        mandatory: bool = False,
        callback: Callable[[PublishFuture], Any] | None = None,
        context: Any = None,
    ) -> PublishFuture:
        """Publish one message and track its confirm.

        Args:
            exchange, routing_key, body, properties, mandatory: as ``basic_publish``.
            callback: ``callback(future)`` once settled (ioloop thread; exceptions are logged).
            context: any object to carry on the future (e.g. the delivery tag to ack upstream).

        Returns:
            The :class:`PublishFuture` of this publish.

        Raises:
            WindowFull: no free slot (SelectConnection; BlockingChannel waits for one instead).
            WindowClosed: the channel has closed.
            RuntimeError: :meth:`start` was not called.
            pika.exceptions.ChannelWrongStateError: the channel is closing (pika refuses the
                publish before the close callbacks ran); nothing was sent.
        """
        self._check_open("publish")
        if len(self._pending) >= self._window:
            if not self._blocking:
                self._was_full = True
                raise WindowFull(f"{self._window} publishes in flight")
            self._waits.wait(lambda: len(self._pending) < self._window
                             or self._closed_reason is not None, None)
            if self._closed_reason is not None:
                raise WindowClosed(self._closed_reason)
        if isinstance(body, str):
            body = body.encode("utf-8")
        if self._frames:
            self.flush_frames()  # publishes reach the broker in sequence-number order
        # tracked before the publish call: a BlockingChannel reads the return during it
        future = self._track(exchange, routing_key, body, mandatory, callback, context)
        try:
            if self._blocking:
                # BlockingChannel.basic_publish sends at once (it flushes the connection)
                self._channel.basic_publish(exchange, routing_key, body, properties, mandatory)
            else:
                self._impl.basic_publish(exchange, routing_key, body, properties, mandatory)
        except Exception:
            if future.outcome is None:
                # nothing went out, so the broker did not count this publish either
                tag = future.delivery_tag
                del self._pending[tag]
                self._next_tag = tag
                if self._mandatory and self._mandatory[-1] is future:
                    self._mandatory.pop()
                raise
            # it went out and then the channel closed: the future already says FAILED
        self._sent()
        return future

    def read_confirms_from(self, reader: Any) -> None:
        """Take this channel's confirms straight from ``reader``, a
        :class:`rtroute.amqp.frames.FrameReader` on its connection (pika's per-frame dispatch
        costs more than the rest of a small message's confirm). SelectConnection only."""
        if self._blocking:
            raise RuntimeError("read_confirms_from needs a SelectConnection channel")
        reader.intercept_confirms(self._impl.channel_number, self._on_confirm)

    def publish_frames(
        self,
        exchange: str,
        routing_key: str,
        data: bytes | list[bytes],
        frame_count: int,
        body: bytes | Callable[[], bytes] | None = None,
        mandatory: bool = False,
        callback: Callable[[PublishFuture], Any] | None = None,
        context: Any = None,
    ) -> PublishFuture:
        """Publish one message given as ready-made frames and track its confirm.

        ``data`` is a ``basic.publish`` method frame for this channel (see
        :func:`rtroute.amqp.frames.publish_frame`) with ``exchange``, ``routing_key`` and
        ``mandatory``, followed by the content header and body frames of the message, for this
        channel and within the connection's ``frame_max``; ``frame_count`` frames in all, as
        one ``bytes`` or as a list of frames. ``body`` (needed when ``mandatory``) is what a
        ``basic.return`` is matched against: the bytes, or a function that makes them (called
        only when a return has to be matched).
        SelectConnection only; otherwise as :meth:`publish`.

        The frames are written with the next :meth:`flush_frames`, which the window calls
        before any :meth:`publish` and at the end of the ioloop turn (call it sooner to write
        a burst at once).

        Raises:
            WindowFull, WindowClosed, RuntimeError: as :meth:`publish`.
            pika.exceptions.ChannelWrongStateError: the channel or connection is closing.
        """
        # the per-message path of the sidecar and the shovel: _check_open and _sent inlined
        # (a call each costs as much as the rest of the bookkeeping)
        if self._blocking:
            raise RuntimeError("publish_frames needs a SelectConnection channel")
        if self._closed_reason is not None or not self._started:
            self._check_open("publish_frames")
        pending = self._pending
        if len(pending) >= self._window:
            self._was_full = True
            raise WindowFull(f"{self._window} publishes in flight")
        channel = self._impl
        connection = channel.connection
        if not channel.is_open or connection.is_closing or connection.is_closed:
            raise pika.exceptions.ChannelWrongStateError("channel is closing or closed")
        future = self._track(exchange, routing_key, body, mandatory, callback, context)
        if type(data) is list:
            self._frames.extend(data)
        else:
            self._frames.append(data)
        self._frame_count += frame_count
        if not self._flush_scheduled:
            self._flush_scheduled = True
            connection.ioloop.call_later(0, self.flush_frames)
        self.published += 1
        if len(pending) >= self._window:
            self._was_full = True
        return future

    def publish_frames_in_bulk(self, messages: list[bytes], frame_count: int,
                               contexts: list) -> None:
        """Publish messages given as ready-made frames, as :meth:`publish_frames` without
        ``mandatory``, and with no :class:`PublishFuture`: ``messages`` holds each one's
        frames, ``frame_count`` the frames of them all, ``contexts`` one object per message
        (not a :class:`PublishFuture`), which reaches the window's ``on_bulk_settled`` with
        the others one confirm settles. A publisher with thousands in flight pays for a future
        and a callback per message otherwise.

        Raises:
            WindowFull: fewer free slots than ``messages`` (nothing was sent).
            WindowClosed, RuntimeError: as :meth:`publish_frames` (RuntimeError also without
                ``on_bulk_settled``).
            pika.exceptions.ChannelWrongStateError: the channel or connection is closing.
        """
        if self._closed_reason is not None or not self._started \
                or self._on_bulk_settled is None or self._blocking:
            self._check_open("publish_frames_in_bulk")
            raise RuntimeError("publish_frames_in_bulk needs a SelectConnection channel and "
                               "on_bulk_settled")
        # the checks and buffering below repeat publish_frames' on purpose: there they are
        # inlined on the sidecar's and the shovel's per-message path
        pending = self._pending
        count = len(contexts)
        if len(pending) + count > self._window:
            self._was_full = True
            raise WindowFull(f"{len(pending)} publishes in flight, room for "
                             f"{self._window - len(pending)}, not {count}")
        channel = self._impl
        connection = channel.connection
        if not channel.is_open or connection.is_closing or connection.is_closed:
            raise pika.exceptions.ChannelWrongStateError("channel is closing or closed")
        tag = self._next_tag
        pending.update(zip(range(tag, tag + count), contexts))
        self._next_tag = tag + count
        self._frames.extend(messages)
        self._frame_count += frame_count
        if not self._flush_scheduled:
            self._flush_scheduled = True
            connection.ioloop.call_later(0, self.flush_frames)
        self.published += count
        if len(pending) >= self._window:
            self._was_full = True

    def flush_frames(self) -> None:
        """Write what :meth:`publish_frames` buffered (one write for the lot)."""
        self._flush_scheduled = False
        if not self._frames:
            return
        data = b"".join(self._frames) if len(self._frames) > 1 else self._frames[0]
        count = self._frame_count
        self._frames = []
        self._frame_count = 0
        connection = self._impl.connection
        if self._closed_reason is None and not (connection.is_closing or connection.is_closed):
            emit(connection, data, count)

    def when_drained(self, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` once nothing is in flight (at once if already so).

        A channel close also drains the window (everything FAILED): check :attr:`closed`.
        """
        if not self._pending:
            callback()
        else:
            self._drain_callbacks.append(callback)

    def wait_for_confirms(self, timeout: float | None = None) -> bool:
        """Block until nothing is in flight; True if so, False on timeout.

        BlockingChannel: processes I/O while waiting. SelectConnection: call from another thread.
        """
        self._waits.wait(lambda: not self._pending, timeout)
        return not self._pending

    # -- broker callbacks (ioloop thread) ------------------------------------------------------

    def _on_ack_nack(self, frame: Any) -> None:
        method = frame.method
        self._on_confirm(method.delivery_tag, method.multiple,
                         isinstance(method, pika.spec.Basic.Ack))

    def _on_confirm(self, tag: int, multiple: bool, acked: bool) -> None:
        outcome = Outcome.ACKED if acked else Outcome.NACKED
        if tag >= self._next_tag:
            LOGGER.warning("confirm for unknown sequence number %d ignored", tag)
            return
        now = time.perf_counter()
        pending = self._pending
        bulk: list = []
        if multiple:
            if tag == 0:  # AMQP: multiple with tag 0 means every outstanding publish
                tag = self._next_tag - 1
            for seq in range(self._lowest_unsettled, tag + 1):
                future = pending.pop(seq, None)
                if future is None:
                    continue
                if type(future) is PublishFuture:
                    self._settle(future, outcome, now)
                else:
                    bulk.append(future)
            self._lowest_unsettled = max(self._lowest_unsettled, tag + 1)
        else:
            future = pending.pop(tag, None)
            if future is None:
                LOGGER.warning("second confirm for sequence number %d ignored", tag)
                return
            if type(future) is PublishFuture:
                self._settle(future, outcome, now)
            else:
                bulk.append(future)
            lowest = self._lowest_unsettled
            while lowest < self._next_tag and lowest not in pending:
                lowest += 1
            self._lowest_unsettled = lowest
        if bulk:
            self._settle_bulk(bulk, outcome, None)
        self._after_settling()

    def _on_return(self, _channel: Any, method: Any, _properties: Any, body: bytes) -> None:
        """Match a ``basic.return`` to the publish it belongs to.

        A return precedes the ack of its own publish, and returns come in publish order, so the
        returned publish is an unsettled mandatory one later than the previously returned one.
        Among those, the first with the same exchange, routing key and body is taken (headers are
        not compared: the broker strips BCC). Two identical messages in flight at once are
        indistinguishable; then the earlier is reported RETURNED.
        """
        candidates = self._mandatory
        while candidates:
            future = candidates.popleft()
            if (
                future.outcome is None
                and future.routing_key == method.routing_key
                and future.exchange == method.exchange
                and _body_of(future) == body
            ):
                # publishes skipped on the way are not returned: later returns are for later
                # publishes, so they can leave the queue too
                future.reply_code = method.reply_code
                future.reply_text = method.reply_text
                return
        self.unmatched_returns += 1
        LOGGER.warning(
            "basic.return (%s %s) matches no publish in flight",
            method.reply_code, method.reply_text,
        )

    def _on_channel_closed(self, _channel: Any, reason: Exception) -> None:
        self._closed_reason = str(reason) or type(reason).__name__
        self._frames = []  # never written: their publishes fail below
        self._frame_count = 0
        now = time.perf_counter()
        pending = self._pending
        bulk = []
        for tag in sorted(pending):
            future = pending[tag]
            if type(future) is PublishFuture:
                future.reason = self._closed_reason
                self._settle(future, Outcome.FAILED, now)
            else:
                bulk.append(future)
        pending.clear()
        if bulk:
            self._settle_bulk(bulk, Outcome.FAILED, self._closed_reason)
        self._mandatory.clear()
        self._after_settling()
        if self._on_closed is not None:
            self._on_closed(self._closed_reason)

    # -- internals -----------------------------------------------------------------------------

    def _check_open(self, method: str) -> None:
        if not self._started:
            raise RuntimeError(f"call ConfirmWindow.start() before {method}()")
        if self._closed_reason is not None:
            raise WindowClosed(self._closed_reason)

    def _track(self, exchange: str, routing_key: str,
               body: bytes | Callable[[], bytes] | None, mandatory: bool,
               callback: Callable[[PublishFuture], Any] | None, context: Any
               ) -> PublishFuture:
        """Gives the next publish its sequence number (and its place among the mandatory
        publishes a return can belong to)."""
        tag = self._next_tag
        future = PublishFuture(self._waits, tag, exchange, routing_key, body if mandatory else None,
                               mandatory, callback, context)
        self._pending[tag] = future
        self._next_tag = tag + 1
        if mandatory:
            mandatory_queue = self._mandatory
            while mandatory_queue and mandatory_queue[0].outcome is not None:
                mandatory_queue.popleft()
            mandatory_queue.append(future)
        return future

    def _sent(self) -> None:
        self.published += 1
        if len(self._pending) >= self._window:
            self._was_full = True

    def _settle(self, future: PublishFuture, outcome: Outcome, now: float) -> None:
        if outcome is Outcome.ACKED:
            if future.reply_code is not None:
                outcome = Outcome.RETURNED
                self.returned += 1
            else:
                self.acked += 1
        elif outcome is Outcome.NACKED:
            self.nacked += 1
        else:
            self.failed += 1
        future.settled_at = now
        future.outcome = outcome
        future._body = None
        callbacks = future._callbacks
        if callbacks:
            future._callbacks = None
            for callback in callbacks:
                try:
                    callback(future)
                except Exception:
                    LOGGER.exception("publish callback failed for %r", future)

    def _settle_bulk(self, contexts: list, outcome: Outcome, reason: str | None) -> None:
        if outcome is Outcome.ACKED:
            self.acked += len(contexts)
        elif outcome is Outcome.NACKED:
            self.nacked += len(contexts)
        else:
            self.failed += len(contexts)
        try:
            self._on_bulk_settled(contexts, outcome, reason)  # type: ignore[misc]
        except Exception:
            LOGGER.exception("on_bulk_settled failed for %d publishes", len(contexts))

    def _after_settling(self) -> None:
        in_flight = len(self._pending)
        if self._was_full and in_flight <= self._low_watermark and self._closed_reason is None:
            self._was_full = False
            if self._on_writable is not None:
                self._on_writable()
        if not in_flight and self._drain_callbacks:
            callbacks, self._drain_callbacks = self._drain_callbacks, []
            for callback in callbacks:
                callback()
        if self._waits.waiters:
            self._waits.notify()


def _body_of(future: PublishFuture) -> bytes | None:
    """The body a mandatory publish is matched against (made now if given as a function)."""
    body = future._body
    return body() if callable(body) else body
