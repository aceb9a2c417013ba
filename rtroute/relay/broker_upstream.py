"""Items delivered by a broker, settled on the channel they came on.

Each consume channel has its :class:`~rtroute.amqp.settle.Settler` (:meth:`BrokerUpstream.open`;
a sharded ingress has one per shard), and each item carries the settler of its channel, so
acks go out in delivery-tag order per channel with one ``multiple`` ack per turn. The
settlements (:class:`~rtroute.relay.policy.Settlement`):

- ``ACK``: with the turn's ``multiple`` ack;
- ``REQUEUE``: ``basic.reject`` with requeue, now (a failed handling: it counts towards a
  quorum queue's delivery limit on every RabbitMQ version);
- ``HOLD``: parked, then requeued with ``basic.nack`` after ``hold_delay``, so that a lone
  consumer does not spin on it;
- ``BACKOFF``: parked, then requeued with ``basic.nack`` after a delay that doubles each round
  (up to ``max_delay``) until :meth:`BrokerUpstream.reset_backoff` (the destination accepted
  a message);
- ``DEAD_LETTER``: ``basic.nack`` without requeue when ``has_dlx()`` says the queue has a
  dead-letter exchange; while it asks (None) the item is parked and waits for
  :meth:`BrokerUpstream.dlx_answered`; without one, ``BACKOFF`` (nothing is dropped);
- ``LEAVE``: nothing; the broker redelivers it when its channel goes.

A parked item does not hold the acks of later ones back (see the settler).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rtroute.amqp.settle import Settler
from rtroute.relay.policy import Settlement

if TYPE_CHECKING:
    from rtroute.relay.outgoing import Item
    from rtroute.relay.seams import ItemSettler, Upstream
    from rtroute.relay.timers import Timers

__all__ = ["BrokerUpstream"]


class BrokerUpstream:
    """Settles items on their consume channels (see the module docstring).

    Args:
        timers: arms the hold and back-off timers (cancelled with the relay's).
        on_error: ``on_error(what, exc)`` when pika refuses an ack or nack (each settler's).
        after_acks: ``after_acks(count)`` after each pass that sends a turn's acks.
        on_nacked: ``on_nacked(item, requeue)`` after a ``basic.nack`` or ``basic.reject``
            went out for ``item``.
        has_dlx: whether the queue has a dead-letter exchange (True/False) or None while it
            asks; without it ``DEAD_LETTER`` nacks without requeue.
        hold_delay: seconds a ``HOLD`` item waits; also the first ``BACKOFF`` wait.
        max_delay: longest ``BACKOFF`` wait.
    """

    def __init__(
        self,
        timers: Timers,
        *,
        on_error: Callable[[str, Exception], Any] | None = None,
        after_acks: Callable[[int], Any] | None = None,
        on_nacked: Callable[[Any, bool], Any] | None = None,
        has_dlx: Callable[[], bool | None] | None = None,
        hold_delay: float = 1.0,
        max_delay: float = 30.0,
    ) -> None:
        self._timers = timers
        self._on_error = on_error
        self._after_acks = after_acks
        self._on_nacked = on_nacked
        self._has_dlx = has_dlx
        self.hold_delay = hold_delay
        self.max_delay = max_delay
        self.backoff_delay = hold_delay
        self.settlers: list[Settler] = []
        self.draining = False
        self._generation = 0  # a reset starts a new one: loops over older items stop
        self._held: list[Any] = []
        self._hold_timer: int | None = None
        self._backed_off: list[Any] = []
        self._backoff_timer: int | None = None
        self._dlx_waiting: list[Any] = []

    # -- channels ------------------------------------------------------------------------------

    def open(self, channel: Any = None) -> Settler:
        """A settler for a consume channel (None: not open yet; see ``Settler.reset``)."""
        settler = Settler(self._timers.ioloop, channel, on_error=self._on_error,
                          after_acks=self._after_acks)
        self.settlers.append(settler)
        return settler

    def close(self, settler: Settler) -> None:
        """``settler``'s channel is gone: forget its items (the broker redelivers them)."""
        settler.reset(None)
        self._forget(lambda item: item.settler is settler)
        if settler in self.settlers:
            self.settlers.remove(settler)

    @property
    def idle(self) -> bool:
        """True when no ack waits to be sent and every item is settled or parked."""
        return all(settler.idle for settler in self.settlers)

    @property
    def waiting(self) -> int:
        """Items parked until a timer or an answer requeues or dead-letters them."""
        return len(self._held) + len(self._backed_off) + len(self._dlx_waiting)

    # -- settling ------------------------------------------------------------------------------

    def park(self, item: Item) -> None:
        """``item`` waits for something slow (a retry): later acks stop waiting for it."""
        item.settler.park(item)

    def unpark(self, item: Item) -> None:
        """``item`` is on its way again."""
        item.settler.unpark(item)

    def settle_as(self, item: Item, settlement: Settlement) -> None:
        """Settle ``item`` as ``settlement`` (see the module docstring)."""
        if settlement is Settlement.ACK:
            item.settler.ack(item)
        elif settlement is Settlement.REQUEUE:
            self._nack(item, requeue=True, failed=True)
        elif settlement is Settlement.HOLD:
            self._held.append(item)
            item.settler.park(item)
            if self._hold_timer is None:
                self._hold_timer = self._timers.later(self.hold_delay, self._release_held)
        elif settlement is Settlement.BACKOFF:
            self._backed_off.append(item)
            item.settler.park(item)
            if self._backoff_timer is None:
                self._backoff_timer = self._timers.later(self.backoff_delay,
                                                         self._release_backed_off)
        elif settlement is Settlement.DEAD_LETTER:
            has_dlx = self._has_dlx() if self._has_dlx is not None else True
            if has_dlx is None:
                self._dlx_waiting.append(item)
                item.settler.park(item)
            elif has_dlx:
                self._nack(item, requeue=False)
            else:
                self.settle_as(item, Settlement.BACKOFF)

    def reset_backoff(self) -> None:
        """The destination accepted a message: the next ``BACKOFF`` wait is the shortest."""
        self.backoff_delay = self.hold_delay

    def dlx_answered(self) -> None:
        """``has_dlx()`` knows now: settle the items that waited for it."""
        waiting, self._dlx_waiting = self._dlx_waiting, []
        generation = self._generation
        for item in waiting:
            if self.draining or generation != self._generation:
                return  # still parked: the broker requeues them when their channel goes
            self.settle_as(item, Settlement.DEAD_LETTER)

    def _nack(self, item: Item, requeue: bool, failed: bool = False) -> None:
        if item.settler.nack(item, requeue, failed) and self._on_nacked is not None:
            self._on_nacked(item, requeue)

    def _release_held(self) -> None:
        self._hold_timer = None
        held, self._held = self._held, []
        self._requeue_all(held)

    def _release_backed_off(self) -> None:
        self._backoff_timer = None
        self.backoff_delay = min(self.max_delay, self.backoff_delay * 2)
        held, self._backed_off = self._backed_off, []
        self._requeue_all(held)

    def _requeue_all(self, items: list[Any]) -> None:
        generation = self._generation
        for item in items:
            if generation != self._generation:
                return  # a refused nack ended the connection: the broker requeues the rest
            self._nack(item, requeue=True)

    # -- life cycle ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Draining: the relay cancelled every timer, so held items stay parked (the broker
        requeues them when their channel closes), and no answer settles a waiting one."""
        self.draining = True
        self.timers_cancelled()

    def timers_cancelled(self) -> None:
        """The relay cancelled every timer: none of the hold timers runs any more."""
        self._hold_timer = None
        self._backoff_timer = None

    def reset(self) -> None:
        """The connection is gone: forget every item (the broker redelivers them) and settle
        nothing more of them."""
        self._generation += 1
        self.timers_cancelled()
        self._held = []
        self._backed_off = []
        self._dlx_waiting = []
        for settler in self.settlers:
            settler.reset(None)

    def _forget(self, belongs: Callable[[Any], bool]) -> None:
        self._held = [item for item in self._held if not belongs(item)]
        self._backed_off = [item for item in self._backed_off if not belongs(item)]
        self._dlx_waiting = [item for item in self._dlx_waiting if not belongs(item)]


if TYPE_CHECKING:  # mypy holds it and its settlers to the seams (tests/test_typecheck.py)
    _UPSTREAM: type[Upstream] = BrokerUpstream
    _SETTLER: type[ItemSettler] = Settler
