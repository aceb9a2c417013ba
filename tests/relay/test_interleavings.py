"""Random interleavings of the broker's answers, flow control and time on the stub broker: the
stub's invariants hold at every step (each sequence number settled once, nothing written while
blocked, one write per turn, no tag settled twice, no ack before its publish was acked), and
once the broker answers everything every delivery has been settled upstream exactly once:
at-least-once, nothing stuck, nothing lost."""
from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rtroute.relay import RetryWithBackoff, Settlement

from .rig import Rig


class RelayMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rig = Rig(RetryWithBackoff(retries=1, delay=0.1, unroutable=Settlement.HOLD),
                       window=4, has_dlx=lambda: True)
        self.entries: list = []
        self.gone = False

    def unsettled_seqs(self) -> list[int]:
        broker = self.rig.broker
        return [p.seq for p in broker.published if p.seq not in broker.settled_seqs]

    @precondition(lambda self: not self.gone)
    @rule()
    def deliver(self) -> None:
        self.entries.append(self.rig.single())

    @precondition(lambda self: not self.gone)
    @rule(which=st.integers(0, 3), multiple=st.booleans())
    def ack(self, which: int, multiple: bool) -> None:
        seqs = self.unsettled_seqs()
        if seqs:
            self.rig.broker.ack(seqs[min(which, len(seqs) - 1)], multiple=multiple)

    @precondition(lambda self: not self.gone)
    @rule(which=st.integers(0, 3))
    def nack(self, which: int) -> None:
        seqs = self.unsettled_seqs()
        if seqs:
            self.rig.broker.nack(seqs[min(which, len(seqs) - 1)])

    @precondition(lambda self: not self.gone)
    @rule(which=st.integers(0, 3))
    def return_then_ack(self, which: int) -> None:
        seqs = self.unsettled_seqs()
        if seqs:
            seq = seqs[min(which, len(seqs) - 1)]
            self.rig.broker.return_(seq)
            self.rig.broker.ack(seq)

    @precondition(lambda self: not self.gone)
    @rule()
    def block_or_unblock(self) -> None:
        if self.rig.broker.blocked:
            self.rig.broker.unblock()
        else:
            self.rig.broker.block()

    @rule()
    def turn(self) -> None:
        self.rig.turn()

    @rule(seconds=st.sampled_from([0.05, 0.1, 0.5, 1.0, 3.0]))
    def advance(self, seconds: float) -> None:
        self.rig.ioloop.advance(seconds)

    @precondition(lambda self: not self.gone)
    @rule()
    def drop(self) -> None:
        self.rig.relay.detach()
        self.rig.broker.drop_connection()
        self.gone = True

    @invariant()
    def a_blocked_relay_says_so(self) -> None:
        assert self.rig.relay.blocked == (self.rig.broker.blocked and not self.gone)

    def teardown(self) -> None:
        rig = self.rig
        if self.gone:
            return  # what was not acked is the broker's to redeliver
        if rig.broker.blocked:
            rig.broker.unblock()
        for _ in range(50):   # the broker now takes everything, until all is settled
            rig.turn()
            rig.broker.ack_all()
            rig.ioloop.advance(30.0)
        settled = {}
        for record in rig.broker.consume.settled:
            covered = range(1, record.tag + 1) if record.multiple else [record.tag]
            for tag in covered:
                settled.setdefault(tag, record.kind)
        assert sorted(settled) == [entry.tag for entry in self.entries]


RelayMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40,
                                          deadline=None)
test_random_interleavings_keep_at_least_once_and_ack_order = RelayMachine.TestCase
