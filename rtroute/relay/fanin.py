"""The fan-in: each publish's outcome back to its item, and the item settled once.

An item may have several publishes (:meth:`FanIn.submit`, and :meth:`FanIn.add` for the ones
made later); ``item.awaiting`` counts those without an outcome. An ack needs no verdict; any
other outcome goes to the :class:`~rtroute.relay.policy.Policy`, whose verdict may republish
the message later (``Retry``), publish another in its place (``Replace``), fail the item, or
settle it. When the last publish has its outcome the item is acked, or settled as the policy
said, through the upstream.

A 1:1 relay (the shovel) puts an item that is its own publish (``item`` None,
``awaiting`` 1) straight into the outbox: nothing of this module runs before the confirm.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rtroute.amqp.confirm_window import Outcome
from rtroute.relay.policy import Hook, Policy, Settlement, Verdict, VerdictKind

if TYPE_CHECKING:
    from rtroute.relay.outbox import Outbox
    from rtroute.relay.outgoing import Item, Outgoing
    from rtroute.relay.seams import PublishReport, Upstream
    from rtroute.relay.timers import Timers

__all__ = ["FanIn"]

_ACKED = Outcome.ACKED
_RETURNED = Outcome.RETURNED
_NACKED = Outcome.NACKED
_OK, _FAILED, _SETTLE = VerdictKind.OK, VerdictKind.FAILED, VerdictKind.SETTLE
_RETRY, _REPLACE = VerdictKind.RETRY, VerdictKind.REPLACE


class FanIn:
    """Maps each confirm back to its item and settles the item once every publish has an
    outcome (see the module docstring).

    Args:
        policy: what an outcome other than an ack means.
        upstream: settles items (``settle_as``, ``park``, ``unpark``).
        timers: arms the retries.

    ``outbox`` is set by the relay. Outcomes are ignored while ``attached`` is False (a
    confirm or a close of a channel the relay has left); retries do not go out once
    ``draining``.
    """

    def __init__(self, policy: Policy, upstream: Upstream, timers: Timers) -> None:
        self._policy = policy
        self._upstream = upstream
        self._timers = timers
        self.outbox: Outbox | None = None
        self.attached = False
        self.draining = False
        # the per-message hooks, wired only where the policy registered them
        self._acked = policy.acked if Hook.ACKED in policy.hooks else None
        self._item_acked = policy.item_acked if Hook.ITEM_ACKED in policy.hooks else None

    # -- items ---------------------------------------------------------------------------------

    def submit(self, item: Item, outs: Sequence[Outgoing], deferred: int = 0) -> None:
        """Track ``item`` with its settler (in the order items are submitted: a consume
        channel's delivery-tag order) and publish ``outs`` for it (``deferred`` more come with
        :meth:`add`); with none at all, settle it now."""
        item.settler.track(item)
        item.awaiting += len(outs) + deferred
        if item.awaiting <= 0:
            self._finish(item)
            return
        put = self.outbox.put  # type: ignore[union-attr]  # set by the relay
        for out in outs:
            out.item = item
            put(out)

    def add(self, item: Item, out: Outgoing) -> None:
        """A deferred publish of ``item`` is ready: publish it."""
        out.item = item
        self.outbox.put(out)  # type: ignore[union-attr]  # set by the relay

    # -- outcomes ------------------------------------------------------------------------------

    def on_confirm(self, future: PublishReport) -> None:
        """The window's callback for every publish (the per-message path)."""
        if not self.attached:
            return
        out = future.context
        item = out.item or out
        if future.outcome is _ACKED:
            if self._acked is not None:
                self._acked(out)
        else:
            outcome = future.outcome
            policy = self._policy
            if outcome is _RETURNED:
                verdict = policy.returned(out, future)
            elif outcome is _NACKED:
                verdict = policy.nacked(out, future)
            else:
                verdict = policy.failed(out, future)
            if not self._apply(out, item, verdict):
                return
        awaiting = item.awaiting - 1
        item.awaiting = awaiting
        if awaiting <= 0:
            if item.settlement is None and not item.failed:
                if self._item_acked is not None:
                    self._item_acked(item)
                item.settler.ack(item)
            else:
                self._finish(item)

    def rejected(self, out: Outgoing, reason: str) -> None:
        """The outbox cannot publish ``out`` (``reason``): the policy decides."""
        item: Any = out.item or out
        if self._apply(out, item, self._policy.rejected(out, reason)):
            self._one_done(item)

    def written(self, out: Outgoing) -> None:
        """Without confirms, acking at write: ``out`` went to the socket."""
        item: Any = out.item or out
        awaiting = item.awaiting - 1
        item.awaiting = awaiting
        if awaiting <= 0:
            if self._item_acked is not None:
                self._item_acked(item)
            item.settler.ack(item)

    def _one_done(self, item: Item) -> None:
        item.awaiting -= 1
        if item.awaiting <= 0:
            self._finish(item)

    def _apply(self, out: Outgoing, item: Item, verdict: Verdict) -> bool:
        """Carry out ``verdict``; True when the publish counts as done for its item."""
        kind = verdict.kind
        if kind is _OK:
            return True
        if kind is _FAILED:
            item.failed = True
            return True
        if kind is _SETTLE:
            if item.settlement is None:
                item.settlement = verdict.settlement
            return True
        if kind is _RETRY:
            self._upstream.park(item)
            self._timers.later(verdict.delay, lambda: self._retry(out, item))
            return False
        if kind is _REPLACE and verdict.out is not None:
            replacement = verdict.out
            replacement.item = item
            self.outbox.put_front(replacement)  # type: ignore[union-attr]  # set by the relay
            return False
        raise ValueError(f"unknown verdict {verdict!r}")

    def _retry(self, out: Outgoing, item: Item) -> None:
        if not self.attached or self.draining:
            return  # parked: the broker redelivers it once its channel goes
        self._policy.retrying(out)
        self._upstream.unpark(item)
        self.outbox.put_front(out)  # type: ignore[union-attr]  # set by the relay

    def _finish(self, item: Item) -> None:
        settlement = item.settlement
        if settlement is None:
            settlement = self._policy.settlement(item) if item.failed else Settlement.ACK
        if settlement is Settlement.ACK and self._item_acked is not None:
            self._item_acked(item)
        self._upstream.settle_as(item, settlement)
