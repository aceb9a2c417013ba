"""The fan-in of publishes handed over in bulk (:meth:`~rtroute.relay.outbox.Outbox.put_bulk`).

A publisher with thousands of messages in flight pays for a
:class:`~rtroute.amqp.confirm_window.PublishFuture` and a callback per message on the
per-message path. In bulk, the window keeps the bare item instead and reports the items one
confirm settled together (its ``on_bulk_settled``). Each such item is its own single publish
(``awaiting`` 1, ``item`` None), as a 1:1 relay's are:

- acked: settled at once, all of one confirm in one call to the upstream's ``ack_many``;
- anything else (nacked, or failed when the channel closed): each goes through
  :meth:`FanIn.on_confirm <rtroute.relay.fanin.FanIn.on_confirm>` with a
  :class:`PublishOutcome` in place of its future, so the policy decides as for any publish.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rtroute.amqp.confirm_window import Outcome
from rtroute.relay.policy import Hook, Policy

if TYPE_CHECKING:
    from rtroute.relay.fanin import FanIn
    from rtroute.relay.seams import BulkUpstream

__all__ = ["BulkFanIn", "PublishOutcome"]

_ACKED = Outcome.ACKED


class PublishOutcome:
    """What a :class:`~rtroute.amqp.confirm_window.PublishFuture` says of one publish (the
    attributes a :class:`~rtroute.relay.policy.Policy` reads), for a publish that had none:
    handed over in bulk, or never written.

    Attributes:
        context: the publish (an :class:`~rtroute.relay.outgoing.Outgoing`, or an item that
            is its own publish).
        outcome: its :class:`~rtroute.amqp.confirm_window.Outcome`.
        reason: why it failed (``FAILED``), else None.
        reply_code, reply_text: always None (a bulk publish is never ``mandatory``).
    """

    __slots__ = ("context", "outcome", "reason", "reply_code", "reply_text")

    def __init__(self, context: Any, outcome: Outcome, reason: str | None = None) -> None:
        self.context = context
        self.outcome = outcome
        self.reason = reason
        self.reply_code: int | None = None
        self.reply_text: str | None = None

    def __repr__(self) -> str:
        return f"<PublishOutcome {self.outcome.name} {self.context!r}>"


class BulkFanIn:
    """Maps the window's ``on_bulk_settled`` onto the relay's fan-in (see the module
    docstring): set :meth:`settled` as the relay's ``on_bulk_settled`` before it attaches.

    Args:
        fanin: the relay's fan-in (its policy decides every outcome but an ack; nothing is
            settled while it is not ``attached``).
        upstream: settles items; it needs ``ack_many(items)`` besides what the fan-in calls
            (:class:`~rtroute.relay.future_upstream.FutureUpstream` has it).
        policy: the relay's policy (its ``acked`` and ``item_acked`` run when overridden).
    """

    def __init__(self, fanin: FanIn, upstream: BulkUpstream, policy: Policy) -> None:
        self._fanin = fanin
        self._ack_many = upstream.ack_many
        self._acked = policy.acked if Hook.ACKED in policy.hooks else None
        self._item_acked = policy.item_acked if Hook.ITEM_ACKED in policy.hooks else None

    def settled(self, items: list, outcome: Outcome, reason: str | None) -> None:
        """``on_bulk_settled``: one confirm (or the channel's close) settled ``items``."""
        fanin = self._fanin
        if not fanin.attached:
            return
        if outcome is _ACKED:
            if self._acked is not None or self._item_acked is not None:
                for item in items:
                    if self._acked is not None:
                        self._acked(item)
                    if self._item_acked is not None:
                        self._item_acked(item)
            self._ack_many(items)
            return
        on_confirm = fanin.on_confirm
        for item in items:
            on_confirm(PublishOutcome(item, outcome, reason))
