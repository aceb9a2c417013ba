"""How much broker work one client has in flight: its share of the broker, metered by confirms.

A publish to an x-rtopic exchange costs the broker one route per routing key it carries (the
key and each ``BCC`` entry: up to one per destination queue). A client that publishes without
confirms, as fast as it can, would otherwise queue seconds of that work in the broker's
channel and queue processes, ahead of every other client's messages to the same queues (what
``rtroute bench proxy-isolation`` measures). So the proxy keeps, per client connection, the
cost of its publishes to x-rtopic exchanges that the broker has not confirmed yet, and stops
reading the client while that is at its budget (``--client-in-flight``): the client's TCP
buffers fill, as when RabbitMQ's own credit flow blocks a publisher.

To see the broker's confirms on a channel whose client did not ask for them, the proxy puts
the channel in confirm mode itself (``confirm.select`` with no-wait, before the channel's
first publish to an x-rtopic exchange) and swallows the broker's ``basic.ack``/``basic.nack``
that the client did not ask for. When such a client asks for confirms later, the broker's
delivery tags run ahead of the client's by the publishes made before: the meter keeps that
offset and gives the tag the client expects. A channel in transaction mode is never put in
confirm mode (RabbitMQ refuses both at once); a client that asks for transactions on a channel
the proxy has put in confirm mode is refused with a channel error that says why.

Pure bookkeeping: no I/O (the session writes the frames).
"""
from __future__ import annotations

__all__ = ["DEFAULT_BUDGET", "TX_REFUSED", "ConfirmMeter"]

# routing keys (the key and each BCC entry) a client's unconfirmed publishes to x-rtopic
# exchanges may hold at the broker. Measured with rtroute bench proxy-isolation (docs/proxy.md):
# a client publishing `#` over 100 queues keeps 2 messages in flight, the broker is as busy as
# without a bound, and the other clients' confirms wait behind 2 messages instead of seconds.
DEFAULT_BUDGET = 256

TX_REFUSED = ("PRECONDITION_FAILED - rtroute proxy: cannot switch this channel to transaction "
              "mode: it published to an x-rtopic exchange without confirms, and the proxy put it "
              "in confirm mode to meter its broker work; use tx.select before the channel's first "
              "publish, or another channel")


class _Channel:
    """A channel in confirm mode: the broker numbers its publishes from 1."""

    __slots__ = ("offset", "pending", "seq")

    def __init__(self, offset: int | None) -> None:
        self.seq = 0  # the broker's number of the channel's last publish
        # publishes the broker numbered before the client asked for confirms; None: the client
        # has not asked (the proxy selected them: every confirm is the proxy's)
        self.offset = offset
        self.pending: dict[int, int] = {}  # broker tag -> cost, of metered publishes


class ConfirmMeter:
    """The confirm-mode channels of one client connection and its cost in flight.

    Args:
        budget: the cost in flight at which :attr:`full` turns true (one publish is always let
            through when nothing is in flight, whatever its cost).
    """

    __slots__ = ("_tx", "budget", "channels", "in_flight")

    def __init__(self, budget: int = DEFAULT_BUDGET) -> None:
        if budget < 1:
            raise ValueError(f"the in-flight budget must be at least 1 (got {budget})")
        self.budget = budget
        self.in_flight = 0
        self.channels: dict[int, _Channel] = {}  # channel -> its confirms (counted channels)
        self._tx: set[int] = set()

    @property
    def full(self) -> bool:
        """The client is at its budget: read nothing more until confirms come."""
        return self.in_flight >= self.budget

    def room(self, cost: int) -> int:
        """How many publishes of ``cost`` each fit in the budget now (at least 1 when nothing
        is in flight, 0 when :attr:`full`)."""
        if self.in_flight >= self.budget:
            return 0
        return max(1, (self.budget - self.in_flight) // max(1, cost))

    def needs_select(self, channel: int) -> bool:
        """The channel publishes to an x-rtopic exchange and is not counted yet, nor in
        transaction mode: the proxy sends ``confirm.select`` (no-wait) first, then
        :meth:`selected_by_proxy`."""
        return channel not in self.channels and channel not in self._tx

    def selected_by_proxy(self, channel: int) -> None:
        self.channels[channel] = _Channel(None)

    def selected_by_client(self, channel: int) -> None:
        """The client's ``confirm.select`` (passed to the broker as it is)."""
        state = self.channels.get(channel)
        if state is None:
            self.channels[channel] = _Channel(0)
        elif state.offset is None:
            state.offset = state.seq

    def tx_select(self, channel: int) -> bool:
        """The client's ``tx.select``; False: refused (:data:`TX_REFUSED`), the proxy put the
        channel in confirm mode. A channel the client put in confirm mode itself passes: the
        broker refuses it, as without the proxy."""
        state = self.channels.get(channel)
        if state is not None and state.offset is None:
            return False
        if state is None:
            self._tx.add(channel)
        return True

    def published(self, channel: int, cost: int = 0, count: int = 1) -> None:
        """``count`` publishes on ``channel`` went to the broker, each of ``cost`` (0: not
        metered, e.g. to an exchange that is no x-rtopic: only numbered)."""
        state = self.channels.get(channel)
        if state is None:
            return
        if cost:
            pending = state.pending
            for seq in range(state.seq + 1, state.seq + count + 1):
                pending[seq] = cost
            self.in_flight += cost * count
        state.seq += count

    def confirmed(self, channel: int, tag: int, multiple: bool) -> int | None:
        """The broker's ``basic.ack``/``basic.nack`` of ``tag`` on ``channel``: the cost it
        settles leaves the budget. Returns the tag to give the client (its own numbering), or
        None when the client did not ask for this confirm (swallow it)."""
        state = self.channels.get(channel)
        if state is None:
            return tag  # not counted: the client's own, as it is
        pending = state.pending
        if pending:
            settled = 0
            if multiple:
                while pending:
                    first = next(iter(pending))
                    if first > tag:
                        break
                    settled += pending.pop(first)
            else:
                settled = pending.pop(tag, 0)
            self.in_flight -= settled
        offset = state.offset
        if offset is None or tag <= offset:
            return None
        return tag - offset

    def closed(self, channel: int) -> None:
        """The client closes the channel: its cost leaves the budget, and the confirms the
        broker still sends on it before its ``close-ok`` are swallowed (the client discards
        them anyway) until the channel is opened again (:meth:`reset`)."""
        was_counted = channel in self.channels
        self.reset(channel)
        if was_counted:
            self.channels[channel] = _Channel(None)

    def reset(self, channel: int) -> None:
        """The channel closed (or opened again): its confirms will not come."""
        self._tx.discard(channel)
        state = self.channels.pop(channel, None)
        if state is not None:
            self.in_flight -= sum(state.pending.values())
