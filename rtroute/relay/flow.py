"""Flow control: why the outbox waits besides its window, and when the source stops.

- ``connection.blocked``: the broker stops reading a connection that publishes while it is
  short of memory or disk. Writing on meanwhile only fills the socket (and holds back the
  acks that share it), so the outbox pauses (``BLOCKED``) until ``connection.unblocked``; what
  arrives meanwhile waits in order and goes first afterwards.
- The write buffer (without confirms, where no window bounds what is in flight): above
  ``high`` bytes not yet sent the outbox pauses (``BUFFER``); it is polled every 5 ms and the
  outbox resumes at ``low``.
- The source: a consumer without a prefetch window (``no_ack``, ``prefetch_count = 0``) would
  pile up deliveries while the outbox waits. At ``limit`` queued publishes the source socket
  is no longer read (TCP back-pressure then holds the rest in the source broker); it is read
  again once the queue is down to half. Over TLS that cannot be done, which is said once.
"""
from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rtroute.amqp import pika_internals
from rtroute.relay.outbox import PauseReason

if TYPE_CHECKING:
    from rtroute.relay.outbox import Outbox
    from rtroute.relay.timers import Timers

__all__ = ["BUFFER_POLL", "FlowControl"]

LOGGER = logging.getLogger("rtroute.relay")

#: Seconds between two looks at a full write buffer.
BUFFER_POLL = 0.005


class FlowControl:
    """Pauses ``outbox`` for the broker and the socket, and the source for the outbox (see the
    module docstring).

    Args:
        outbox: what to pause.
        timers: polls the write buffer.
        label: names the relay in log lines (e.g. ``shovel 'orders'``).
        on_change: ``on_change(blocked, reason)`` when the broker blocks (``reason`` as it
            says) or unblocks (None) the publish connection.
        high, low: the write buffer marks in bytes.
    """

    def __init__(self, outbox: Outbox, timers: Timers, *, label: str = "relay",
                 on_change: Callable[[bool, str | None], Any] | None = None,
                 high: int = 4 << 20, low: int = 1 << 20) -> None:
        self._outbox = outbox
        self._timers = timers
        self._label = label
        self._on_change = on_change
        self._high = high
        self._low = low
        self._connection: Any = None
        self.blocked = False
        self.blocked_since: float | None = None
        self.reason: str | None = None
        self._polling = -1  # the timers' generation of the running write-buffer poll
        self._set_reading: Callable[[bool], bool] | None = None
        self._limit = sys.maxsize
        self.reading = True
        self._read_pause_refused = False

    # -- the broker ----------------------------------------------------------------------------

    def watch(self, connection: Any) -> None:
        """Follow ``connection.blocked``/``unblocked`` on the publish connection."""
        self._connection = connection
        connection.add_on_connection_blocked_callback(self._on_blocked)
        connection.add_on_connection_unblocked_callback(self._on_unblocked)

    def forget(self) -> None:
        """The publish connection is gone: nothing it says counts any more, and a new one
        starts unblocked."""
        self._connection = None
        self.blocked = False
        self.blocked_since = None
        self.reason = None

    def _on_blocked(self, connection: Any, frame: Any) -> None:
        if connection is not self._connection:
            return
        self.reason = getattr(frame.method, "reason", "") or "resources low"
        LOGGER.warning("%s: destination blocked (%s)", self._label, self.reason)
        self.blocked = True
        self.blocked_since = time.time()
        self._outbox.pause(PauseReason.BLOCKED)
        if self._on_change is not None:
            self._on_change(True, self.reason)

    def _on_unblocked(self, connection: Any, _frame: Any) -> None:
        if connection is not self._connection:
            return
        LOGGER.info("%s: destination unblocked", self._label)
        self.blocked = False
        self.blocked_since = None
        self.reason = None
        if self._on_change is not None:
            self._on_change(False, None)
        self._outbox.resume(PauseReason.BLOCKED)

    # -- the socket ----------------------------------------------------------------------------

    def after_write(self, connection: Any) -> None:
        """After a write without confirms: pause while the write buffer is above ``high``."""
        if pika_internals.write_buffer_size(connection) <= self._high:
            return
        self._outbox.pause(PauseReason.BUFFER)
        timers = self._timers
        if self._polling == timers.generation:
            return
        self._polling = timers.generation

        def check() -> None:
            if pika_internals.write_buffer_size(connection) <= self._low:
                self._polling = -1
                self._outbox.resume(PauseReason.BUFFER)
            else:
                timers.later(BUFFER_POLL, check)

        timers.later(BUFFER_POLL, check)

    # -- the source ----------------------------------------------------------------------------

    def source(self, set_reading: Callable[[bool], bool], limit: int) -> None:
        """Stop reading the source (``set_reading(False)``; it returns whether it could) at
        ``limit`` queued publishes, and read again (``set_reading(True)``) at half."""
        self._set_reading = set_reading
        self._limit = limit
        self._outbox.backlog_limit = limit
        self._outbox.on_backlog = self._stop_reading

    def _stop_reading(self) -> None:
        self._outbox.backlog_limit = sys.maxsize  # asked once, until the queue is down to half
        # set with on_backlog, in source(): this runs only after it
        if self._set_reading(False):  # type: ignore[misc]
            self.reading = False
        elif not self._read_pause_refused:
            self._read_pause_refused = True
            LOGGER.warning("%s: cannot stop reading the source (TLS, or the socket is gone): "
                           "deliveries keep arriving while %d wait", self._label,
                           len(self._outbox.queued))

    def read_if_room(self) -> None:
        """Read the source again once the queue is down to half the limit."""
        if self._set_reading is None or len(self._outbox.queued) >= self._limit // 2:
            return
        self._outbox.backlog_limit = self._limit
        if not self.reading and self._set_reading(True):
            self.reading = True
