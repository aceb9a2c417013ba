"""The relay: one confirm/settle loop for whatever republishes what it receives.

A :class:`Relay` takes items from an upstream, publishes them through an
:class:`~rtroute.relay.outbox.Outbox` on one publish channel, maps each confirm back to its
item (:class:`~rtroute.relay.fanin.FanIn`), settles the item as the
:class:`~rtroute.relay.policy.Policy` says through the upstream
(:class:`~rtroute.relay.broker_upstream.BrokerUpstream`), and waits while
:class:`~rtroute.relay.flow.FlowControl` says so. Callers keep only what is theirs: what to
publish for an item (the shovel: the message as it came; the sidecar: the routed republishes
and copies) and the policy.

Life cycle: :meth:`Relay.attach` a publish channel (in confirm mode through a
:class:`~rtroute.amqp.confirm_window.ConfirmWindow`, or without confirms); :meth:`Relay.drain`
to stop gracefully (no timer runs; with ``park``, nothing new goes out and what waits is parked
for the broker to requeue; in-flight confirms still settle), then :meth:`Relay.when_drained`;
:meth:`Relay.detach` when the connection goes (every item is forgotten: the broker redelivers
what was not acked; no timer of that connection runs again).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from rtroute.amqp.confirm_window import ConfirmWindow, Outcome
from rtroute.relay.amqp_sink import AmqpSink
from rtroute.relay.bulk import BulkFanIn, PublishOutcome
from rtroute.relay.fanin import FanIn
from rtroute.relay.flow import FlowControl
from rtroute.relay.outbox import Outbox, PauseReason
from rtroute.relay.outgoing import Outgoing
from rtroute.relay.policy import Hook, Policy
from rtroute.relay.seams import BulkUpstream, Upstream
from rtroute.relay.timers import Timers

__all__ = ["DRAIN_POLL", "Relay"]

_FAILED = Outcome.FAILED

#: Seconds between two looks of :meth:`Relay.when_drained`.
DRAIN_POLL = 0.05


class Relay:
    """One publish channel's loop (see the module docstring).

    Its users call only this facade: the parts it composes (outbox, fan-in, flow control,
    the sink) are its own.

    Args:
        timers: the ioloop's timers, shared with the upstream.
        policy: what outcomes mean.
        upstream: settles items (a :class:`~rtroute.relay.seams.Upstream`; with ``bulk``, a
            :class:`~rtroute.relay.seams.BulkUpstream`).
        window: the most publishes in flight (with confirms).
        low_watermark: in flight when a full window resumes (default: half the window).
        confirms: False publishes without confirms (the shovel's ``on_publish``/``no_ack``).
        ack_on_write: without confirms, ack each item once its publishes were written
            (``on_publish``); otherwise items are not settled by the relay (``no_ack``).
        bulk: take publishes handed over in bulk (:meth:`put_bulk`; the publisher's).
        label: names the relay in log lines.
        on_broken: ``on_broken(reason)`` when the publish channel closes.
        on_flow: ``on_flow(blocked, reason)`` on ``connection.blocked``/``unblocked``.
        on_resumed: called after a pause ended and what waited went out as far as it could.
        write_buffer: the (high, low) write-buffer marks in bytes (without confirms).

    Attributes:
        put: the 1:1 fast lane: ``put(entry)`` for an item that is its own publish
            (``awaiting`` 1, ``item`` None), tracked by its caller (the shovel tracks each
            delivery as it comes, before its filter and its ``src-delete-after`` budget
            decide whether it is published at all: one held or parked unpublished must hold
            the acks above it back, too).
        submit: ``submit(item, outs, deferred=0)``: track ``item`` with its settler
            (callers submit in delivery order and track nothing themselves), publish
            ``outs`` for it (``deferred`` more come with :attr:`add`); with none at all,
            settle it now.
        add: ``add(item, out)``: a deferred publish of ``item`` is ready.

    (each a bound method of the part that does it: no call more per message.)
    """

    def __init__(
        self,
        timers: Timers,
        policy: Policy,
        upstream: Upstream,
        *,
        window: int,
        low_watermark: int | None = None,
        confirms: bool = True,
        ack_on_write: bool = False,
        bulk: bool = False,
        label: str = "relay",
        on_broken: Callable[[str], Any] | None = None,
        on_flow: Callable[[bool, str | None], Any] | None = None,
        on_resumed: Callable[[], Any] | None = None,
        write_buffer: tuple[int, int] = (4 << 20, 1 << 20),
    ) -> None:
        self.timers = timers
        self.policy = policy
        self.upstream = upstream
        self.window_size = window
        self.low_watermark = window // 2 if low_watermark is None else low_watermark
        self.confirms = confirms
        self._on_broken = on_broken
        self._on_resumed = on_resumed
        self.fanin = FanIn(policy, upstream, timers)
        self.outbox = Outbox(timers.ioloop, on_confirm=self.fanin.on_confirm,
                             on_rejected=self.fanin.rejected, on_resumed=self._resumed)
        self.fanin.outbox = self.outbox
        # the per-message hooks are wired only where the policy registered them
        hooks = policy.hooks
        if confirms:
            if Hook.PUBLISHED in hooks:
                self.outbox.on_published = policy.published
        else:
            if ack_on_write:
                self.outbox.on_published = self.fanin.written
            if Hook.WRITTEN in hooks:
                self.outbox.on_written = policy.written
        high, low = write_buffer
        self.flow = FlowControl(self.outbox, timers, label=label, on_change=on_flow,
                                high=high, low=low)
        self.window: ConfirmWindow | None = None
        #: ``on_bulk_settled(items, outcome, reason)`` for what :meth:`put_bulk` hands over;
        #: each window attached is made with it (set by ``bulk``)
        self.on_bulk_settled: Callable[[list, Any, str | None], Any] | None = None
        self._bulk: BulkFanIn | None = None
        if bulk:
            if not isinstance(upstream, BulkUpstream):
                raise TypeError(f"bulk needs a BulkUpstream (with ack_many), not {upstream!r}")
            self._bulk = BulkFanIn(self.fanin, upstream, policy)
            self.on_bulk_settled = self._bulk.settled
        self.put = self.outbox.put
        self.submit = self.fanin.submit
        self.add = self.fanin.add

    # -- state ---------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Publishes awaiting their confirm."""
        return self.outbox.in_flight

    @property
    def queued(self) -> Any:
        """Publishes waiting to go out, in order (a deque; read it, do not change it)."""
        return self.outbox.queued

    @property
    def room(self) -> int:
        """Publishes that would go out at once: the free slots of the window, or 0 while
        anything pauses the relay (detached, a full window, ``connection.blocked``, a drain)
        or publishes wait. Without confirms, a large number while nothing pauses it."""
        return self.outbox.room

    @property
    def published(self) -> int:
        """Publishes handed to the channel so far."""
        return self.outbox.published

    @property
    def open(self) -> bool:
        """True while a publish channel is attached and not closing (with confirms: its
        window not closed)."""
        sink = self.outbox.sink
        if sink is None:
            return False
        window = self.window
        if self.confirms:
            return window is not None and not window.closed
        return not sink.closing

    @property
    def blocked(self) -> bool:
        """True while the broker blocks the publish connection."""
        return self.flow.blocked

    @property
    def reading(self) -> bool:
        """False while the relay stops reading the source (see :meth:`limit_source`)."""
        return self.flow.reading

    def status(self) -> dict[str, Any]:
        """What the relay is doing: ``queued``, ``in_flight``, ``paused`` (the pause
        reasons), ``blocked`` and ``blocked_since`` (epoch seconds or None)."""
        return {"queued": len(self.outbox.queued), "in_flight": self.outbox.in_flight,
                "paused": sorted(reason.value for reason in self.outbox.pause_reasons),
                "blocked": self.flow.blocked, "blocked_since": self.flow.blocked_since}

    # -- the channel ---------------------------------------------------------------------------

    def watch(self, connection: Any) -> None:
        """Follow ``connection.blocked`` on the publish connection (call it once it is open)."""
        self.flow.watch(connection)

    def limit_source(self, set_reading: Callable[[bool], bool], limit: int) -> None:
        """Stop reading the source (``set_reading(False)``; it returns whether it could) at
        ``limit`` publishes waiting, and read it again at half (a consumer without a
        prefetch window; see :class:`~rtroute.relay.flow.FlowControl`)."""
        self.flow.source(set_reading, limit)

    def attach(self, channel: Any, reader: Any = None,
               on_ready: Callable[[], Any] | None = None) -> None:
        """Publish on ``channel`` (open, not yet in confirm mode) from now on; ``reader`` (a
        :class:`~rtroute.amqp.frames.FrameReader` on its connection) takes the confirms
        past pika. ``on_ready()`` once the channel is in confirm mode (at once without)."""
        self.fanin.attached = True
        if not self.confirms:
            channel.add_on_return_callback(self._unconfirmed_return)
            self.outbox.after_write = functools.partial(self.flow.after_write,
                                                        channel.connection)
            self.outbox.attach(AmqpSink(channel, None))
            if on_ready is not None:
                on_ready()
            return
        window = ConfirmWindow(channel, window=self.window_size,
                               low_watermark=self.low_watermark,
                               on_writable=lambda: self.outbox.resume(PauseReason.WINDOW),
                               on_closed=self._channel_closed,
                               on_bulk_settled=self.on_bulk_settled)
        if reader is not None:
            window.read_confirms_from(reader)
        self.window = window
        window.start(on_ready=on_ready)
        self.outbox.attach(AmqpSink(channel, window))

    def drain(self, park: bool = True) -> None:
        """Stop gracefully: no retry, hold or back-off timer runs (what they held stays parked:
        the broker requeues it when its channel closes); confirms in flight still settle their
        items. ``park``: nothing more goes out, what waits is parked too (the shovel's stop);
        False: what was put or submitted still goes out (the sidecar's: what it read before
        its consumers were cancelled). Wait with :meth:`when_drained`."""
        outbox = self.outbox
        if park:
            outbox.pause(PauseReason.STOPPING)
            park_item = self.upstream.park
            for out in outbox.clear():
                park_item(out.item or out)
        self.fanin.draining = True
        self.timers.cancel_all()
        self.upstream.stop()

    def abandon(self, reason: str) -> list[Any]:
        """What waits to go out will not: each publish goes to the policy's
        :meth:`~rtroute.relay.policy.Policy.unsent` (``reason``), which fails it now (as a
        publish whose channel closed first) or forgets it. Returns those forgotten, in
        order."""
        unsent = self.policy.unsent
        on_confirm = self.fanin.on_confirm
        forgotten = []
        for out in self.outbox.clear():
            if unsent(out, reason):
                on_confirm(PublishOutcome(out, _FAILED, reason))
            else:
                forgotten.append(out)
        return forgotten

    def clear(self) -> list[Any]:
        """Forget what waits to go out, without a word to the policy (the broker redelivers
        its items); return it, in order."""
        return self.outbox.clear()

    def detach(self, reason: str = "connection lost") -> list[Any]:
        """The connection is gone: what never went out goes to the policy first
        (:meth:`abandon`, ``reason``); then forget every item (the broker redelivers what was
        not acked), cancel every timer, and ignore what the old channel still reports.
        Returns the publishes that never went out and the policy forgot, in order."""
        forgotten = self.abandon(reason)
        self.fanin.attached = False
        self.timers.cancel_all()
        self.upstream.reset()
        self.flow.forget()
        self.window = None
        self.outbox.after_write = None
        return forgotten + self.outbox.detach()

    @property
    def drained(self) -> bool:
        """True once nothing awaits a confirm and every ack went out (while draining, what is
        parked counts as done: the broker requeues it)."""
        return not self.outbox.in_flight and self.upstream.idle

    def when_drained(self, callback: Callable[[], Any], timeout: float,
                     poll: float = DRAIN_POLL) -> None:
        """Call ``callback()`` once, when :attr:`drained` holds, the publish channel is no
        longer :attr:`open` (what is unsettled is the broker's to redeliver), or ``timeout``
        seconds have passed, whichever comes first; looked at every ``poll`` seconds (on the
        ioloop itself: neither a drain nor a detach cancels it)."""
        ioloop = self.timers.ioloop
        done = False

        def finish() -> None:
            nonlocal done
            if not done:
                done = True
                callback()

        def check() -> None:
            if done:
                return
            if not self.drained and self.open:
                ioloop.call_later(poll, check)
                return
            ioloop.remove_timeout(deadline)
            finish()

        deadline = ioloop.call_later(timeout, finish)
        check()

    # -- items ---------------------------------------------------------------------------------

    def put_bulk(self, messages: list[bytes], frame_count: int, items: list) -> None:
        """Hand ``items`` over in one call (see :meth:`Outbox.put_bulk
        <rtroute.relay.outbox.Outbox.put_bulk>`; the relay is made with ``bulk``): their
        outcomes reach the policy as any publish's, their acks the upstream's ``ack_many``.
        Check :attr:`room` first: they cannot wait.

        Raises:
            RuntimeError: no room, or the relay takes no bulk.
            Exception: the channel's, when it is going (nothing was sent; see
                :meth:`fail_bulk`).
        """
        if self._bulk is None:
            raise RuntimeError("this relay was made without bulk")
        self.outbox.put_bulk(messages, frame_count, items)

    def fail_bulk(self, items: list, reason: str) -> None:
        """``items`` (of a :meth:`put_bulk` that raised) were not sent: each fails, as a
        publish whose channel closed before its confirm."""
        if self._bulk is not None:
            self._bulk.settled(items, _FAILED, reason)

    def rejected(self, out: Outgoing, reason: str) -> None:
        """A publish of an item submitted (counted in its ``deferred``) cannot be made: the
        policy decides, as for one the outbox could not send."""
        self.fanin.rejected(out, reason)

    def later(self, delay: float, callback: Callable[[], Any]) -> int:
        """Run ``callback`` after ``delay`` seconds unless the relay drains or detaches."""
        return self.timers.later(delay, callback)

    # -- callbacks -----------------------------------------------------------------------------

    def _resumed(self) -> None:
        self.flow.read_if_room()
        if self._on_resumed is not None:
            self._on_resumed()

    def _channel_closed(self, reason: str) -> None:
        if self._on_broken is not None and self.fanin.attached:
            self._on_broken(reason)

    def _unconfirmed_return(self, _channel: Any, method: Any, _properties: Any,
                            _body: bytes) -> None:
        if self.fanin.attached:
            self.policy.returned_unconfirmed(method.reply_code, method.reply_text)
