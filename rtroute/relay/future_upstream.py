"""Items that are callers' futures, not deliveries: the upstream of a publisher.

A consumer's items are settled towards the broker they came from
(:class:`~rtroute.relay.broker_upstream.BrokerUpstream`); a publisher's come from its callers,
and settling one is giving its future an outcome. :class:`FutureUpstream` plays the part of both
the upstream and every item's ``settler`` (``item.settler`` is the upstream itself):

- ``ack``: every publish of the item was confirmed: its future is resolved;
- any other settlement: its future fails, with the error the policy recorded on it when a
  publish of it was nacked, returned, failed or rejected;
- nothing goes to a broker and nothing waits for a timer, so the upstream is always ``idle``,
  and a lost connection leaves it nothing to forget (the window failed what was in flight, and
  the caller decides about what never went out).

Each item is settled once; ``on_settled(items)`` then gets those just settled, in order (the
publisher marks them done and wakes the threads waiting for them). Every method runs in the
ioloop thread.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rtroute.relay.policy import Settlement

if TYPE_CHECKING:
    from rtroute.relay.outgoing import Item
    from rtroute.relay.seams import BulkUpstream, ItemSettler

__all__ = ["FutureUpstream"]

_ACK = Settlement.ACK


class FutureUpstream:
    """Settles items that are futures (see the module docstring).

    Args:
        on_settled: ``on_settled(items)`` with the items just settled (``item.failed`` says
            which failed).

    Attributes:
        confirmed, failed: items settled so far either way.
    """

    def __init__(self, on_settled: Callable[[Sequence[Item]], Any]) -> None:
        self._on_settled = on_settled
        self.confirmed = 0
        self.failed = 0
        self.draining = False

    @property
    def idle(self) -> bool:
        """Always True: settling a future is done at once."""
        return True

    def track(self, item: Item) -> None:
        """Nothing to track: futures are settled in any order (the relay's ``submit`` calls it
        for every item)."""

    def ack(self, item: Item) -> None:
        """Every publish of ``item`` was confirmed: resolve it (once)."""
        if not item.settled:
            item.settled = True
            self.confirmed += 1
            self._on_settled((item,))

    def ack_many(self, items: Sequence[Item]) -> None:
        """:meth:`ack` each of ``items``, each its own single publish (one call for the items
        of one confirm; see :class:`~rtroute.relay.bulk.BulkFanIn`)."""
        settled = [item for item in items if not item.settled]
        for item in settled:
            item.settled = True
            item.awaiting = 0
        if settled:
            self.confirmed += len(settled)
            self._on_settled(settled)

    def settle_as(self, item: Item, settlement: Settlement) -> None:
        """Resolve ``item`` (``ACK`` and nothing of it failed) or fail it (once)."""
        if item.settled:
            return
        item.settled = True
        if settlement is _ACK and not item.failed:
            self.confirmed += 1
        else:
            item.failed = True
            self.failed += 1
        self._on_settled((item,))

    def park(self, item: Item) -> None:
        """``item`` waits for a retry (the future just stays pending)."""
        item.parked = True

    def unpark(self, item: Item) -> None:
        """``item`` is on its way again."""
        item.parked = False

    def stop(self) -> None:
        """The relay drains: nothing of the upstream's is pending, so nothing to stop."""
        self.draining = True

    def reset(self) -> None:
        """The connection is gone: nothing to forget (see the module docstring)."""
        self.draining = False


if TYPE_CHECKING:  # mypy holds it to the seams it plays (tests/test_typecheck.py)
    _UPSTREAM: type[BulkUpstream] = FutureUpstream
    _SETTLER: type[ItemSettler] = FutureUpstream
