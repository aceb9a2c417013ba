"""What a publish under :class:`~rtroute.amqp.confirm_window.ConfirmWindow` gives back: its
:class:`Outcome`, a :class:`PublishFuture` to wait on or be called back by, the two errors a
publish can raise (:class:`WindowFull`, :class:`WindowClosed`), and the waits behind
:meth:`PublishFuture.result` and a ``BlockingConnection`` window (:class:`Waits`).

Import them from :mod:`rtroute.amqp.confirm_window` or :mod:`rtroute.amqp` as before.
"""
from __future__ import annotations

import enum
import threading
import time
from typing import Any, Callable

__all__ = ["Outcome", "PublishFuture", "Waits", "WindowClosed", "WindowFull"]


class Outcome(enum.Enum):
    """How the broker settled one publish."""

    ACKED = "acked"
    """The broker took responsibility for the message (routed, or unroutable and not mandatory)."""
    NACKED = "nacked"
    """The broker could not take it (e.g. a queue with ``x-overflow=reject-publish`` is full)."""
    RETURNED = "returned"
    """``mandatory`` and no queue took it: a ``basic.return`` came, then the ack."""
    FAILED = "failed"
    """The channel or connection closed before the broker settled it."""


class WindowFull(RuntimeError):
    """``publish`` on a window with no free slot (SelectConnection); wait for ``on_writable``."""


class WindowClosed(RuntimeError):
    """``publish`` after the channel closed; the message was not sent."""


class PublishFuture:
    """The pending outcome of one publish; also what completion callbacks receive.

    Attributes:
        delivery_tag: the publish's sequence number on the channel (from 1).
        outcome: an :class:`Outcome`, or ``None`` while in flight.
        reply_code, reply_text: from ``basic.return`` when the outcome is ``RETURNED``.
        reason: why the outcome is ``FAILED`` (the channel's close reason).
        context: whatever the caller passed to :meth:`ConfirmWindow.publish`.
        published_at, settled_at: ``time.perf_counter()`` values.
    """

    __slots__ = (
        "_body",
        "_callbacks",
        "_waits",
        "context",
        "delivery_tag",
        "exchange",
        "mandatory",
        "outcome",
        "published_at",
        "reason",
        "reply_code",
        "reply_text",
        "routing_key",
        "settled_at",
    )

    def __init__(
        self,
        waits: Waits,
        delivery_tag: int,
        exchange: str,
        routing_key: str,
        body: bytes | Callable[[], bytes] | None,
        mandatory: bool,
        callback: Callable[[PublishFuture], Any] | None,
        context: Any,
    ) -> None:
        self._waits = waits
        self.delivery_tag = delivery_tag
        self.exchange = exchange
        self.routing_key = routing_key
        self._body = body
        self.mandatory = mandatory
        self._callbacks = [callback] if callback is not None else None
        self.context = context
        self.outcome: Outcome | None = None
        self.reply_code: int | None = None
        self.reply_text: str | None = None
        self.reason: str | None = None
        self.published_at = time.perf_counter()
        self.settled_at: float | None = None

    def done(self) -> bool:
        """True once the publish has an outcome."""
        return self.outcome is not None

    @property
    def latency(self) -> float | None:
        """Seconds from publish to outcome, or None while in flight."""
        if self.settled_at is None:
            return None
        return self.settled_at - self.published_at

    def add_done_callback(self, callback: Callable[[PublishFuture], Any]) -> None:
        """Call ``callback(self)`` when settled (at once if already settled)."""
        if self.outcome is not None:
            callback(self)
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

    def result(self, timeout: float | None = None) -> Outcome:
        """Wait for the outcome and return it.

        With a BlockingConnection channel this processes the connection's I/O while it waits
        (call it from the connection's thread). With a SelectConnection call it from another
        thread only: the ioloop thread settles the future.

        Raises:
            TimeoutError: no outcome within ``timeout`` seconds.
        """
        if self.outcome is None:
            self._waits.wait(self.done, timeout)
            if self.outcome is None:
                raise TimeoutError(f"publish #{self.delivery_tag} not settled in {timeout} s")
        return self.outcome

    def __repr__(self) -> str:
        state = self.outcome.name if self.outcome else "in flight"
        return f"<PublishFuture #{self.delivery_tag} {state}>"


class Waits:
    """Waiting until a window's state allows (room, confirm mode, an outcome, nothing in
    flight), or until it closed.

    With a ``BlockingConnection`` (``connection`` given) the waiting thread is the
    connection's own, so it processes I/O while it waits; with a ``SelectConnection`` (None) it
    is another thread, woken by :meth:`notify` from the ioloop thread.

    Args:
        connection: the ``BlockingConnection``, or None.
        closed: True once the window's channel closed (a wait ends then).
    """

    def __init__(self, connection: Any, closed: Callable[[], bool]) -> None:
        self._connection = connection
        self._closed = closed
        self._condition = threading.Condition()
        self.waiters = 0

    def wait(self, predicate: Callable[[], bool], timeout: float | None) -> None:
        """Return once ``predicate()`` holds, the window closed, or ``timeout`` s passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._connection is not None:
            while not predicate() and not self._closed():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return
                self._connection.process_data_events(
                    0.1 if remaining is None else min(remaining, 0.1))
            return
        with self._condition:
            self.waiters += 1
            try:
                while not predicate() and not self._closed():
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return
                    self._condition.wait(remaining)
            finally:
                self.waiters -= 1

    def notify(self) -> None:
        """The window's state changed (ioloop thread): wake the waiting threads."""
        with self._condition:
            self._condition.notify_all()
