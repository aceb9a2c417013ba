"""What each publish outcome means for the message it belongs to (:class:`PublisherPolicy`):
the publisher's answer to the relay's questions (:class:`~rtroute.relay.policy.Policy`).
"""
from __future__ import annotations

from typing import Any

from rtroute.publisher.future import (
    MessageFuture,
    PublisherClosed,
    PublishFailed,
    PublishNacked,
    PublishReturned,
)
from rtroute.relay.policy import FAILED, Policy, Settlement, Verdict
from rtroute.routing import PreconditionFailed

__all__ = ["CLOSED", "PublisherPolicy"]

#: The reason given to :meth:`PublisherPolicy.unsent` when the publisher closes.
CLOSED = "closed"


class PublisherPolicy(Policy):
    """What each outcome means for a message's future: every publish that is not simply acked
    fails its message (the first error is the one its future raises), and the message is
    settled, failed, once all its publishes have their outcomes.

    - nacked: :class:`PublishNacked`; returned (``mandatory``, no queue took it):
      :class:`PublishReturned` with the broker's ``reply_code`` and ``reply_text``;
    - failed (the channel or connection closed before the confirm): :class:`PublishFailed`;
    - rejected (a content header over ``frame_max``, a value with no encoding): ``ValueError``
      saying so.

    For messages that never went out (whole or in part) the engine asks :meth:`not_routed`
    (a malformed message: :class:`~rtroute.routing.PreconditionFailed`), :meth:`not_sent`
    (:class:`PublishFailed`) and :meth:`closed` (:class:`PublisherClosed`).

    Args:
        exchange: the managed exchange ``NAME`` (for messages).
    """

    def __init__(self, exchange: str) -> None:
        self.exchange = exchange

    def returned(self, out: Any, future: Any) -> Verdict:
        message = out.item or out
        message._fail(PublishReturned(
            f"{message.routing_key!r} was returned: {future.reply_code} {future.reply_text}",
            future.reply_code, future.reply_text))
        return FAILED

    def nacked(self, out: Any, future: Any) -> Verdict:
        message = out.item or out
        message._fail(PublishNacked(f"the broker nacked {message.routing_key!r}"))
        return FAILED

    def failed(self, out: Any, future: Any) -> Verdict:
        (out.item or out)._fail(PublishFailed(f"not confirmed: {future.reason}"))
        return FAILED

    def rejected(self, out: Any, reason: str) -> Verdict:
        (out.item or out)._fail(ValueError(reason))
        return FAILED

    def unsent(self, out: Any, reason: str) -> bool:
        """A publish of a message cut short never went out: the message fails (the publisher
        closed: :class:`PublisherClosed`; the connection was lost: :class:`PublishFailed`)."""
        message = out.item or out
        if reason == CLOSED:
            self.closed(message)
        else:
            self.not_sent(message, f"connection lost: {reason}")
        return True

    def settlement(self, item: Any) -> Settlement:
        return Settlement.LEAVE  # failed: nothing to tell a broker, the future says it all

    def not_routed(self, message: MessageFuture, reason: str) -> None:
        """The router refused ``message`` (e.g. ``CC`` not an array): the broker would close
        the channel."""
        message._fail(PreconditionFailed(reason))

    def not_sent(self, message: MessageFuture, reason: str) -> None:
        """A publish of ``message`` could not be written (the connection is going)."""
        message._fail(PublishFailed(reason))

    def closed(self, message: MessageFuture) -> None:
        """The publisher closed before ``message`` was sent."""
        message._fail(PublisherClosed(f"publisher of {self.exchange!r} closed before the "
                                      "message was sent"))
