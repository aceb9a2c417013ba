"""The fan-in on the stub broker: an item is settled once, after every publish made for it has
its outcome, in any order; acks of one turn go out together."""
from __future__ import annotations

import pytest

from rtroute.relay import Outgoing, Policy, Settlement
from rtroute.relay.policy import OK, Replace, Settle

from .rig import Rig, frames_of


def test_an_item_is_acked_only_after_every_publish_of_it_is_confirmed_in_any_order():
    rig = Rig()
    item = rig.item()
    rig.relay.submit(item, [rig.out(item, str(i)) for i in range(3)])
    rig.turn()
    assert rig.seqs() == [1, 2, 3]
    rig.broker.ack(2)
    rig.broker.ack(3)
    rig.turn()
    assert rig.settled() == []
    rig.broker.ack(1)
    rig.turn()
    assert rig.settled() == [("ack", 1, True)]


def test_items_settled_in_one_turn_go_out_as_one_multiple_ack():
    rig = Rig()
    entries = [rig.single() for _ in range(5)]
    rig.turn()
    rig.broker.ack(5, multiple=True)
    rig.turn()
    assert rig.settled() == [("ack", entries[-1].tag, True)]


def test_submit_tracks_its_item_so_a_later_items_ack_does_not_cover_it():
    # the caller tracks nothing (rig.item does not): the relay's submit does, in order
    rig = Rig()
    first, second = rig.item(), rig.item()
    rig.relay.submit(first, [rig.out(first)])
    rig.relay.submit(second, [rig.out(second)])
    assert first in rig.settler and second in rig.settler
    rig.turn()
    rig.broker.ack(2)
    rig.turn()
    assert rig.settled() == []          # a multiple ack of 2 would settle 1 unconfirmed
    rig.broker.ack(1)
    rig.turn()
    assert rig.settled() == [("ack", 2, True)]


def test_an_item_with_no_publishes_settles_at_once_without_passing_earlier_ones():
    rig = Rig()
    first, empty = rig.item(), rig.item()
    rig.relay.submit(first, [rig.out(first)])
    rig.broker.ready(empty)
    rig.relay.submit(empty, [])
    rig.turn()
    assert rig.settled() == []          # 2 is settled, but 1 still waits: no multiple ack yet
    rig.broker.ack(1)
    rig.turn()
    assert rig.settled() == [("ack", 2, True)]


def test_deferred_publishes_hold_the_item_until_added_and_confirmed():
    rig = Rig()
    item = rig.item()
    rig.relay.submit(item, [rig.out(item, "now")], deferred=1)
    rig.turn()
    rig.broker.ack(1)
    rig.turn()
    assert rig.settled() == []
    rig.relay.add(item, rig.out(item, "later"))
    rig.turn()
    rig.broker.ack(2)
    rig.turn()
    assert rig.settled() == [("ack", 1, True)]


def test_a_nacked_publish_rejects_its_item_with_requeue_and_frees_the_acks_behind_it():
    rig = Rig()
    first, second = rig.item(), rig.item()
    rig.relay.submit(first, [rig.out(first, "a"), rig.out(first, "b")])
    rig.relay.submit(second, [rig.out(second)])
    rig.turn()
    rig.broker.ack(3)
    rig.broker.nack(1)
    rig.turn()
    assert rig.settled() == []          # the item still waits for its second publish
    rig.broker.ack(2)
    rig.turn()
    assert rig.settled() == [("reject", 1, True), ("ack", 2, True)]
    assert rig.nacked == [(1, True)]


class DeadLetterCopies(Policy):
    """The sidecar's shape: a returned copy is replaced by a dead letter; a returned original
    is counted and acked."""

    def __init__(self) -> None:
        self.returned_originals = 0

    def returned(self, out, future):
        if out.body.endswith(b"/copy"):
            body = out.body + b"-dead"
            data = frames_of(1, "dlx", "", body)
            return Replace(Outgoing("dlx", "", frames=data, frame_count=len(data), body=body))
        self.returned_originals += 1
        return OK


def test_a_returned_copy_is_replaced_by_a_dead_letter_and_the_item_waits_for_it():
    rig = Rig(DeadLetterCopies())
    item = rig.item()
    rig.relay.submit(item, [rig.out(item, "original"), rig.out(item, "copy")])
    rig.turn()
    rig.broker.ack(1)
    rig.broker.return_(2)
    rig.broker.ack(2)
    rig.turn()
    assert rig.broker.by_seq(3).exchange == "dlx"
    assert rig.broker.by_seq(3).body == b"2.1/copy-dead"
    assert rig.settled() == []
    rig.broker.ack(3)
    rig.turn()
    assert rig.settled() == [("ack", 1, True)]
    assert rig.policy.returned_originals == 0


def test_a_returned_original_is_counted_and_acked():
    rig = Rig(DeadLetterCopies())
    item = rig.item()
    rig.relay.submit(item, [rig.out(item, "original")])
    rig.turn()
    rig.broker.return_(1)
    rig.broker.ack(1)
    rig.turn()
    assert rig.settled() == [("ack", 1, True)] and rig.policy.returned_originals == 1


def test_the_first_settle_verdict_wins_once_every_publish_has_its_outcome():
    class HoldReturned(Policy):
        def returned(self, out, future):
            return Settle(Settlement.HOLD)

        def nacked(self, out, future):
            return Settle(Settlement.REQUEUE)

    rig = Rig(HoldReturned())
    item = rig.item()
    rig.relay.submit(item, [rig.out(item, "a"), rig.out(item, "b")])
    rig.turn()
    rig.broker.return_(1)
    rig.broker.ack(1)
    rig.broker.nack(2)
    rig.turn()
    assert rig.settled() == [] and item.parked      # held, not rejected
    rig.ioloop.advance(1.0)
    assert rig.settled() == [("nack", 1, True)]


def test_the_stub_fails_an_ack_sent_before_the_publish_was_confirmed():
    rig = Rig()
    entry = rig.single()
    rig.turn()
    rig.settler.ack(entry)       # what a broken fan-in would do
    with pytest.raises(AssertionError, match="acked before (its|their) publishes were confirmed"):
        rig.turn()
