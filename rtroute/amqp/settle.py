"""Settling a consumer's deliveries towards the broker: acks in delivery-tag order, one
``multiple`` ack per ioloop turn, nacks at once; a delivery still being handled holds the acks
above it back.

The sidecar (ingress messages republished to ``NAME.bindings``, diverted copies, dead letters)
and the shovel (a source message published to the destination) share this contract, as the
shovel plugin's ``rabbit_shovel_confirms`` maps destination confirms back to source acks:

- :meth:`Settler.track` each delivery in delivery-tag order (one consume channel numbers them;
  the relay's ``submit`` does it for the items submitted to it);
- :meth:`Settler.ack` or :meth:`Settler.nack` it once every publish made for it has its
  outcome (the relay's :class:`~rtroute.relay.fanin.FanIn` counts them in ``awaiting``);
- acks wait for the end of the ioloop turn and go out as one ``basic.ack`` with ``multiple``
  naming the highest acked tag below the lowest delivery not settled yet. A ``multiple`` ack
  must name an outstanding tag (the broker closes the channel otherwise) and covers every
  outstanding tag up to it, so nothing still unsettled may lie below it;
- a delivery :meth:`Settler.park`\\ ed (waiting for a retry, a requeue after a delay, an
  answer) does not hold the acks of later ones back: while it is the lowest unsettled, those
  are acked one by one, so the wait does not hold the prefetch window;
- when the channel or connection goes, :meth:`Settler.reset` forgets everything: the broker
  redelivers what was not acked (at-least-once).

A delivery requeued because a publish made for it failed goes back with ``basic.reject``, one
given back for any other reason (a shovel past its budget, a hold) with ``basic.nack``. Up to
RabbitMQ 4.2 both count towards a quorum queue's ``x-delivery-limit``; from 4.3 only the reject
does (rabbitmq-server#15387: ``basic.nack`` with requeue leaves ``x-delivery-count`` as it is),
so on 4.3 a message whose republish keeps failing would come back for ever if it were nacked.
Rejected, it is dead-lettered at the limit, as on every earlier version.

Every method runs in the ioloop thread; ``len()`` may be read from any thread.
"""
from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import pika.exceptions

__all__ = ["Delivery", "Settler"]


class Delivery:
    """One delivery being settled; subclass it (with ``__slots__``) to carry the message.

    Attributes:
        tag: the delivery tag on the consume channel.
        awaiting: publishes made for it that have no outcome yet (the relay counts them).
        failed: one of them was nacked or failed (the relay then requeues it).
        settled: acked (or about to be, by the next ``multiple`` ack) or nacked.
        parked: waiting for something slow; later deliveries' acks do not wait for it.
    """

    __slots__ = ("awaiting", "failed", "parked", "settled", "tag")

    def __init__(self, tag: int) -> None:
        self.tag = tag
        self.awaiting = 0
        self.failed = False
        self.settled = False
        self.parked = False


class Settler:
    """Acks and nacks the deliveries of one consume channel (see the module docstring).

    Args:
        ioloop: the connection's ioloop (``call_later(0, ...)`` ends the turn's batch).
        channel: the consume channel; None until one is open (see :meth:`reset`). Acks and
            nacks are sent only while it is open.
        on_error: ``on_error(what, exc)`` when pika refuses an ack or nack (``what`` is
            ``"acknowledging"`` or ``"nacking"``); without it the exception propagates.
        after_acks: ``after_acks(count)`` after each pass that sends the turn's acks
            (``count`` deliveries were acked by it, possibly 0).
    """

    def __init__(
        self,
        ioloop: Any,
        channel: Any = None,
        on_error: Callable[[str, Exception], Any] | None = None,
        after_acks: Callable[[int], Any] | None = None,
    ) -> None:
        self._ioloop = ioloop
        self._channel = channel
        self._on_error = on_error
        self._after_acks = after_acks
        self._unsettled: collections.deque[Delivery] = collections.deque()
        self._acks: list[int] = []   # tags settled by an ack that has not been sent
        self._ack_max = 0
        self._scheduled = False

    # -- state ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Deliveries tracked and not yet passed by the acks (settled ones included until the
        next pass)."""
        return len(self._unsettled)

    def __contains__(self, delivery: object) -> bool:
        return delivery in self._unsettled

    @property
    def channel(self) -> Any:
        """The consume channel acks and nacks go to (None: none yet, or gone)."""
        return self._channel

    @property
    def is_open(self) -> bool:
        """True while acks and nacks can be sent."""
        channel = self._channel
        return channel is not None and channel.is_open

    @property
    def outstanding(self) -> int:
        """Deliveries the broker still counts as unacknowledged (sent acks excepted)."""
        return len(self._acks) + sum(1 for d in self._unsettled if not d.settled)

    @property
    def idle(self) -> bool:
        """True when no ack waits to be sent and every delivery is settled or parked."""
        return not self._acks and all(d.settled or d.parked for d in self._unsettled)

    # -- control -------------------------------------------------------------------------------

    def reset(self, channel: Any) -> None:
        """Start over on ``channel`` (None: no channel): every delivery is forgotten, the
        broker redelivers what was not acked."""
        self._channel = channel
        self._unsettled.clear()
        self._acks = []
        self._ack_max = 0

    def track(self, delivery: Delivery) -> None:
        """Take ``delivery`` into account; deliveries come in increasing tag order."""
        self._unsettled.append(delivery)

    def ack(self, delivery: Delivery) -> None:
        """Ack ``delivery`` with the ``multiple`` ack at the end of this ioloop turn."""
        delivery.settled = True
        delivery.parked = False
        tag = delivery.tag
        self._acks.append(tag)
        self._ack_max = max(self._ack_max, tag)
        self.send_acks_soon()

    def nack(self, delivery: Delivery, requeue: bool, failed: bool = False) -> bool:
        """Nack ``delivery`` now (``requeue``: back to its queue, else to its dead-letter
        exchange, or dropped without one). ``failed``: its handling failed, so it is sent as
        ``basic.reject``, which counts towards a quorum queue's delivery limit on every version
        (a ``basic.nack`` with requeue no longer does from RabbitMQ 4.3 on).

        Returns:
            True if sent; False if the channel is gone or pika refused (see ``on_error``).
        """
        if not self.is_open:
            return False
        delivery.settled = True
        delivery.parked = False
        try:
            if failed:
                self._channel.basic_reject(delivery.tag, requeue=requeue)
            else:
                self._channel.basic_nack(delivery.tag, multiple=False, requeue=requeue)
        except pika.exceptions.AMQPError as exc:
            if self._on_error is None:
                raise
            self._on_error("nacking", exc)
            return False
        self.send_acks_soon()
        return True

    def park(self, delivery: Delivery) -> None:
        """``delivery`` waits for something slow: acks of later deliveries stop waiting for
        it (they go one by one while it is the lowest unsettled)."""
        delivery.parked = True
        self.send_acks_soon()

    def unpark(self, delivery: Delivery) -> None:
        """``delivery`` is on its way again: later acks wait for it once more."""
        delivery.parked = False

    def send_acks_soon(self) -> None:
        """Send the acks collected so far at the end of this ioloop turn."""
        if not self._scheduled:
            self._scheduled = True
            self._ioloop.call_later(0, self._send_acks)

    def _send_acks(self) -> None:
        self._scheduled = False
        unsettled = self._unsettled
        while unsettled and unsettled[0].settled:
            unsettled.popleft()
        acks = self._acks
        count = 0
        if acks and self.is_open:
            channel = self._channel
            try:
                if not unsettled or self._ack_max < unsettled[0].tag:
                    channel.basic_ack(self._ack_max, multiple=True)
                    count = len(acks)
                    self._acks = []
                    self._ack_max = 0
                else:
                    low = unsettled[0].tag
                    below = [t for t in acks if t < low]
                    above = [t for t in acks if t > low]
                    if below:
                        channel.basic_ack(max(below), multiple=True)
                        count = len(below)
                    if unsettled[0].parked:
                        for tag in above:
                            channel.basic_ack(tag, multiple=False)
                        count += len(above)
                        above = []
                    self._acks = above
                    self._ack_max = max(above, default=0)
            except pika.exceptions.AMQPError as exc:
                if self._on_error is None:
                    raise
                self._on_error("acknowledging", exc)
                return
        if self._after_acks is not None:
            self._after_acks(count)
