"""One connect attempt of a shovel: a source side wired to a destination side.

A :class:`Session` starts a :class:`~rtroute.shovel.source.Source` and a
:class:`~rtroute.shovel.destination.Destination` on the worker's ioloop, consumes once both are
ready, and ends both together: when anything fails (a connection or channel closes, a
declaration is refused, the consumer is cancelled) it drops both ends, the broker requeues
whatever the source had not acknowledged, and the worker (:mod:`rtroute.shovel.worker`) decides
whether and when a new session starts. :meth:`Session.stop_gracefully` drains instead: no more
deliveries, in-flight confirms and acks finish, then both ends close.

Why not :class:`rtroute.amqp.connection.ReconnectingConnection`: it keeps *one* connection up
on its own, and the shovel's connecting differs in each thing it does. Brokers: it picks one
at random per attempt (with repeats) and waits its back-off before the next, where a shovel
tries every broker of a side once, in a shuffled order, without waiting, and fails with every
broker's error in one line. Reconnecting: it brings one connection back alone, where a shovel
drops and reconnects both sides together after ``reconnect_delay`` (messages unacknowledged at
the source must be requeued before the destination comes back) and the worker, not the
connection, owns the delay, the state (``starting``/``running``/``terminated``) and the one log
line per failure (it logs each attempt itself). Declarations: it runs them with
``declare_async`` and closes the connection on an error, where the shovel needs the frame
reader installed before the first channel opens, ``if_missing`` declarations, the step that
failed in the log, and the server-named queues of a failed start removed before the
connection closes (:mod:`rtroute.shovel.side`). Wrapping it would mean turning each of
these off through new options, which changes :mod:`rtroute.amqp.connection` for one caller.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rtroute.relay import BrokerUpstream, Relay, Timers
from rtroute.shovel.destination import Destination
from rtroute.shovel.policy import HOLD_DELAY, RETRY_DELAY_MAX, ShovelPolicy
from rtroute.shovel.side import STOP_TIMEOUT
from rtroute.shovel.source import PENDING_LIMIT, Source
from rtroute.shovel.status import ShovelState

if TYPE_CHECKING:
    from rtroute.shovel.worker import ShovelWorker

__all__ = ["Session"]


class Session:
    """One connect attempt: both sides, and the relay that moves messages between them (its
    outbox, its settlers and its timers, the session's only ones, belong to this session).

    Args:
        worker: the shovel this session runs for (its ioloop, config, status, counters).
        number: the session's number, counting from 1.
    """

    def __init__(self, worker: ShovelWorker, number: int) -> None:
        self.w = worker
        self.cfg = worker.config
        self.status = worker.status
        self.counters = worker.status.counters
        self.ioloop = worker.ioloop
        self.number = number
        self.alive = True
        self.closed = False
        self.on_closed: Callable[[], Any] | None = None
        self.running = False
        self.draining = False
        self.drain_reason = "stopped"
        self.source = source = Source(self, worker.source_uris)
        self.destination = destination = Destination(self, worker.dest_uris)
        cfg = self.cfg
        relay_timers = Timers(self.ioloop)
        self.policy = ShovelPolicy(self)
        upstream = BrokerUpstream(relay_timers, on_error=source.settling_failed,
                                  after_acks=source.after_acks, on_nacked=source.nacked,
                                  has_dlx=source.has_dlx, hold_delay=HOLD_DELAY,
                                  max_delay=RETRY_DELAY_MAX)
        self.policy.upstream = upstream
        self.relay = Relay(relay_timers, self.policy, upstream,
                           window=destination.window_size,
                           confirms=cfg.ack_mode == "on_confirm",
                           ack_on_write=cfg.ack_mode == "on_publish",
                           label=f"shovel {cfg.name!r}", on_flow=self._flow_changed,
                           on_resumed=self._resumed)
        if source.unbounded:
            self.relay.limit_source(source.set_reading, PENDING_LIMIT)
        source.link(self.relay, upstream, destination)
        destination.link(self.relay)

    def start(self) -> None:
        self.source.connect()
        self.destination.connect()

    def connection_gone(self) -> None:
        """A connection of either side closed (or failed to open)."""
        if not self.alive and not self.closed \
                and not (self.source.connected or self.destination.connected):
            self.closed = True
            if self.on_closed is not None:
                self.on_closed()

    def maybe_run(self) -> None:
        """Start moving messages once both sides are ready."""
        source, destination = self.source, self.destination
        if not (self.alive and source.ready and destination.ready):
            return
        self.running = True
        if self.w.connected_once:
            self.counters["reconnects"] += 1
        self.w.connected_once = True
        destination.prepare(source)
        self.status.set_state(ShovelState.BLOCKED if self.relay.blocked else ShovelState.RUNNING)
        if source.take_budget == 0:
            self.delete_after_reached()
            return
        source.consume()
        self.w.consuming()

    def _resumed(self) -> None:
        if self.draining:
            self.maybe_end()

    def _flow_changed(self, blocked: bool, _reason: str | None) -> None:
        if self.alive and self.running:
            self.status.set_state(ShovelState.BLOCKED if blocked else ShovelState.RUNNING)

    def maybe_end(self) -> None:
        """Close a draining session once nothing awaits a confirm or an ack; stop one that took
        its last ``src-delete-after`` message once that is settled."""
        source = self.source
        if self.draining:
            # done once nothing published awaits a confirm and every ack went out; what is
            # left (parked or never published) is requeued when the source channel closes
            if self.relay.drained:
                self._close(self.drain_reason)
            return
        if source.take_budget is not None and source.take_budget <= 0 \
                and not source.in_hand and not self.relay.queued:
            self.delete_after_reached()

    def delete_after_reached(self) -> None:
        """``src-delete-after`` reached: take nothing more, finish what is in flight, close."""
        self.w.remaining = 0
        self.stop_gracefully(STOP_TIMEOUT, "src-delete-after reached")

    # -- ending --------------------------------------------------------------------------------

    def later(self, delay: float, callback: Callable[[], Any]) -> Any:
        """Run ``callback`` after ``delay`` s unless the session ends first (the relay's
        timers: one registry, cancelled by its drain and its detach)."""
        return self.relay.later(delay, callback)

    def stop_gracefully(self, timeout: float, reason: str) -> None:
        """Stop taking messages, let confirms and acks finish, then close both ends."""
        if not self.alive or self.draining:
            return
        self.draining = self.source.draining = True
        self.drain_reason = reason
        source = self.source
        source.cancel_consumer()
        # held and waiting messages go back to the source when its channel closes: they stay
        # unacknowledged (parked), so no multiple ack covers them
        self.relay.drain()  # cancels every timer of the session's so far
        self.later(timeout, lambda: self._close(reason))
        source.settler.send_acks_soon()
        if not self.running:
            self._close(reason)

    def _close(self, reason: str) -> None:
        if not self.alive:
            return
        self._end()
        self.w.session_ended(self, reason)

    def fail(self, reason: str, fatal: bool = False) -> None:
        """Drop both ends (the source requeues what it has not been acked) and end the session
        (the worker logs the reason)."""
        if not self.alive:
            return
        self._end()
        self.w.session_ended(self, reason, fatal=fatal, failed=True)

    def _end(self) -> None:
        self.alive = self.source.alive = self.destination.alive = False
        self.relay.detach()  # the source requeues whatever was not acked; no timer runs
        self.source.shutdown(self.running)
        self.destination.shutdown(self.running)
        if not (self.source.connected or self.destination.connected) and not self.closed:
            self.closed = True
