"""What :meth:`~rtroute.publisher.facade.RTopicPublisher.publish` gives back: a
:class:`MessageFuture`, settled once every broker publish its message needed is settled, and the
errors it raises when the broker did not take the message (:class:`PublishError` and its
subclasses).
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from rtroute.amqp.confirm_window import Outcome
from rtroute.relay.outgoing import Item
from rtroute.routing.exchange_router import Decision

__all__ = ["MessageFuture", "PublishError", "PublishFailed", "PublishNacked", "PublishReturned",
           "PublisherClosed"]

LOG = logging.getLogger("rtroute.publisher")


class PublishError(Exception):
    """A message the broker did not take (the subclass says how)."""


class PublishNacked(PublishError):
    """The broker nacked a publish of the message (e.g. a full queue with reject-publish)."""


class PublishReturned(PublishError):
    """A ``mandatory`` message reached no queue (``reply_code``, ``reply_text`` from the
    broker's ``basic.return``)."""

    def __init__(self, message: str, reply_code: int | None = None,
                 reply_text: str | None = None) -> None:
        super().__init__(message)
        self.reply_code = reply_code
        self.reply_text = reply_text


class PublishFailed(PublishError):
    """The connection or channel closed before the broker confirmed: the message may or may
    not have been routed."""


class PublisherClosed(PublishError):
    """The publisher was closed (or could not start) before the message was sent."""


class MessageFuture(Item):
    """The outcome of one :meth:`RTopicPublisher.publish`: settled once every broker publish
    the message needed is settled.

    It is the relay's :class:`~rtroute.relay.outgoing.Item` for its message (``awaiting``
    counts its publishes without an outcome; ``settler`` is the publisher's
    :class:`~rtroute.relay.future_upstream.FutureUpstream`) and, when the message is one
    publish handed over in bulk, that publish too (``item`` None).

    Attributes:
        routing_key: as published.
        matched: the distinct binding keys the message matched (empty: unroutable), known once
            it was routed.
        decision: the router's :class:`~rtroute.routing.exchange_router.Decision`, once
            routed (None before, and for an unroutable message).
    """

    __slots__ = ("_awaited", "_callbacks", "_done", "_error", "_owner",
                 "decision", "routing_key")

    item = None  # its own publish, when it has one only (see rtroute.relay.bulk)

    def __init__(self, owner: Any, routing_key: str, settler: Any = None) -> None:
        # Item's attributes set here, not through Item.__init__ and Delivery.__init__: two
        # calls fewer per message on the publishing thread
        self.tag = 0
        self.awaiting = 0
        self.failed = False
        self.settled = False
        self.parked = False
        self.settler = settler
        self.attempts = 0
        self.settlement = None
        self._owner = owner
        self.routing_key = routing_key
        self.decision: Decision | None = None  # the router's, once routed
        self._done = False
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[MessageFuture], Any]] | None = None
        self._awaited = False  # a thread waits in result(): settling wakes it

    @property
    def matched(self) -> tuple[str, ...]:
        """The distinct binding keys the message matched, sorted (listed when first asked:
        the planner does not list them to publish)."""
        return () if self.decision is None else self.decision.matched

    def done(self) -> bool:
        """True once the message has its outcome."""
        return self._done

    def exception(self) -> BaseException | None:
        """The error the message failed with, or None (also None while pending)."""
        return self._error

    def result(self, timeout: float | None = None) -> Outcome:
        """Wait until the broker confirmed the message; returns ``Outcome.ACKED``.

        Raises:
            TimeoutError: no outcome within ``timeout`` seconds.
            PublishNacked, PublishReturned, PublishFailed, PublisherClosed,
            rtroute.routing.PreconditionFailed: how the message failed.
        """
        if not self._done:
            self._awaited = True  # before _wait reads done: see RTopicPublisher._settled
            self._owner._wait(self.done, timeout)
            if not self._done:
                raise TimeoutError(f"message {self.routing_key!r} not confirmed in {timeout} s")
        if self._error is not None:
            raise self._error
        return Outcome.ACKED

    def add_done_callback(self, callback: Callable[[MessageFuture], Any]) -> None:
        """Call ``callback(self)`` once settled (in the publisher's thread; at once, in this
        one, if done). Safe from any thread: each callback runs exactly once."""
        with self._owner._condition:  # one list, made once, whoever adds
            if self._callbacks is None:
                self._callbacks = []
            self._callbacks.append(callback)
        # the settling thread marks the future done before it looks for callbacks: if it
        # looked too early, this thread sees done and runs them
        if self._done:
            self._run_callbacks()

    def _fail(self, error: BaseException) -> None:
        """Record why the message failed (the first error wins)."""
        self.failed = True
        if self._error is None:
            self._error = error

    def _settle(self) -> None:
        self._done = True
        if self._callbacks is not None:
            self._run_callbacks()

    def _run_callbacks(self) -> None:
        callbacks = self._callbacks
        while callbacks:
            try:
                callback = callbacks.pop(0)  # atomic: two threads never take the same one
            except IndexError:
                return
            try:
                callback(self)
            except Exception:
                LOG.exception("done callback failed for the message %r", self.routing_key)

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("failed" if self._error else "confirmed")
        return f"<MessageFuture {self.routing_key!r} {state}>"
