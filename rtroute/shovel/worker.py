"""One shovel as a state machine: consume from a source broker, publish to a destination.

A :class:`ShovelWorker` owns one pika ``IOLoop`` (and its thread, see :meth:`ShovelWorker.start`);
both ends of the shovel are ``SelectConnection``s on that loop, so a message goes from the
source's socket to the destination's without crossing threads. As in the plugin, the worker
knows no protocol; the parts are:

- :mod:`~rtroute.shovel.session`: one connect attempt, a source wired to a destination; when
  anything fails the session drops both ends, the broker requeues whatever the source had not
  acknowledged, and after ``reconnect_delay`` seconds the worker starts a new session. A
  failure is logged once, as one line (the reason, and when the next attempt comes);
- :mod:`~rtroute.shovel.source`: connect, declare, consume, filter, the ``src-delete-after``
  budget, and whether the source queue has a dead-letter exchange;
- :mod:`~rtroute.shovel.destination`: connect, declare, address and rewrite properties and
  headers;
- :mod:`~rtroute.shovel.policy`: what the destination's answers mean (acks, retries with
  back-off, requeues, dead-lettering through the source queue's dead-letter exchange); the
  session's :class:`~rtroute.relay.Relay` publishes, maps confirms back and does flow control;
- :mod:`~rtroute.shovel.side`: what both sides share (connecting through a broker list,
  running declarations, removing the server-named queues of a failed start).

States (see :class:`~rtroute.shovel.status.ShovelState`): ``starting`` while a session connects
and declares, ``running`` while it moves messages, ``blocked`` while the destination has sent
``connection.blocked``, and ``terminated`` (with the reason) between sessions or for good
(``reconnect_delay = 0``, ``src-delete-after`` or ``src-delete-after-duration`` reached, or
stopped).

``src-delete-after-duration`` (RabbitMQ 4.3): the plugin arms a timer when its source starts
consuming and, when it fires, stops the shovel and deletes its parameter; seconds below its
floor (``shovel.delete_after_duration_floor``, default 60) are raised to it, with a warning.
rtroute does the same (the floor is :data:`DELETE_AFTER_DURATION_FLOOR`) with two differences:
the time counts from the first session that consumed and a reconnect does not start it again
(the plugin's worker restarts, and its timer with it, after every connection failure), and the
shovel finishes as with ``src-delete-after``: it drains its confirms, then shows as
terminated and ``completed`` (files are not edited, so it runs again with the process).

A fractional ``reconnect_delay`` is honoured; passwords never reach logs, status or headers.
"""
from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import Any

from pika.adapters.select_connection import IOLoop

from rtroute.amqp import parse_uri
from rtroute.amqp.uri import AmqpUri
from rtroute.config.shovel import ShovelConfig
from rtroute.shovel.message_filter import MessageFilter
from rtroute.shovel.policy import REFUSED_LOG_INTERVAL
from rtroute.shovel.session import Session
from rtroute.shovel.side import STOP_TIMEOUT, short_reason
from rtroute.shovel.status import ShovelState, ShovelStatus

__all__ = ["DELETE_AFTER_DURATION_FLOOR", "ShovelWorker"]

LOGGER = logging.getLogger("rtroute.shovel")

#: Shortest ``src-delete-after-duration`` in seconds (the plugin's default
#: ``shovel.delete_after_duration_floor``); a shorter one is raised to it.
DELETE_AFTER_DURATION_FLOOR = 60


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
        delete_after_duration_floor: shortest ``src-delete-after-duration`` in seconds
            (the plugin's ``shovel.delete_after_duration_floor``).

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
        delete_after_duration_floor: float = DELETE_AFTER_DURATION_FLOOR,
    ) -> None:
        self.config = config
        self.status = status or ShovelStatus(config)
        self.status.live = self.plugin_metrics
        self.connection_name = connection_name or f"Shovel {config.name}"
        self.shovelled_by = shovelled_by
        self.source_uris = [parse_uri(u) for u in config.sources.brokers]
        self.dest_uris = [parse_uri(u) for u in config.destinations.brokers]
        self._uri_text = dict(zip(map(id, self.source_uris), config.sources.brokers))
        self._uri_text.update(zip(map(id, self.dest_uris), config.destinations.brokers))
        self.rng = rng or random.Random()
        self.filter = MessageFilter(config) if config.filter is not None else None
        self.ioloop = IOLoop()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._ran = False
        self._finished = False
        self._session: Session | None = None
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
        self.delete_after_duration_floor = delete_after_duration_floor
        self._duration_timer: Any = None

    def plugin_metrics(self) -> dict[str, Any]:
        """The 4.3 plugin's counters of this shovel, as ``rabbitmqctl shovel_status`` shows
        them (any thread; values may be one message old).

        ``pending``: deliveries waiting for the destination (blocked, or a full confirm
        window); ``remaining``: messages still to take and settle before ``src-delete-after``
        ends the shovel (``"unlimited"`` without it, ``None`` until ``queue-length`` was
        measured); ``remaining_unacked``: of those, the ones not yet published;
        ``forwarded``: source messages published to the destination.
        """
        session = self._session  # read once: the ioloop thread may end it meanwhile
        if session is not None and not session.alive:
            session = None
        pending = len(session.destination.pending) if session is not None else 0
        if self.remaining is None:
            remaining: int | str | None = None if self.measure_queue else "unlimited"
            unpublished: int | str | None = remaining
        else:
            remaining = unpublished = self.remaining
            budget = session.source.take_budget \
                if session is not None and session.running else None
            if budget is not None:
                unpublished = min(remaining, max(0, budget) + pending)
        return {"pending": pending, "remaining": remaining, "remaining_unacked": unpublished,
                "forwarded": self.status.counters["forwarded"]}

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
                        session.fail(f"internal error: {short_reason(exc)}")
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
        self._session = Session(self, self._sessions)
        self._session.start()

    def session_ended(self, session: Session, reason: str, *, fatal: bool = False,
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

    def consuming(self) -> None:
        """The source consumes: arm the ``src-delete-after-duration`` timer (once)."""
        seconds = self.config.src_delete_after_duration
        if seconds is None or self._duration_timer is not None:
            return
        floor = self.delete_after_duration_floor
        if seconds < floor:
            LOGGER.warning("shovel %r has src-delete-after-duration of %d seconds, adjusting to "
                           "the minimum allowed %g seconds", self.config.name, seconds, floor)
        self._duration_timer = self.ioloop.call_later(max(seconds, floor),
                                                      self._delete_after_duration_reached)

    def _delete_after_duration_reached(self) -> None:
        if self._stopping:
            return
        seconds = max(self.config.src_delete_after_duration or 0,
                      self.delete_after_duration_floor)
        reason = f"src-delete-after-duration reached: {seconds:g} s"
        LOGGER.info("shovel %r finished (src-delete-after-duration)", self.config.name)
        self.status.completed = True
        self._stopping = True
        if self._timer is not None:
            self.ioloop.remove_timeout(self._timer)
            self._timer = None
        session = self._session
        if session is not None and session.alive:
            session.stop_gracefully(STOP_TIMEOUT, reason)
            return
        self.status.set_state(ShovelState.TERMINATED, reason)
        self._finish_when_closed(session)

    def _delete_after_reached(self, session: Session | None = None) -> None:
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

    def _finish_when_closed(self, session: Session | None) -> None:
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
