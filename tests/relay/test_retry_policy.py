"""RetryWithBackoff (the shovel's rules) on the stub broker: nacks are retried with exponential
back-off, then refused (held and requeued, or dead-lettered where a dead-letter exchange
exists); returns follow ``unroutable``; a failed publish is left to the broker."""
from __future__ import annotations

import pytest

from rtroute.relay import RetryWithBackoff, Settlement

from .rig import Rig


class Recording(RetryWithBackoff):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.refusals: list[str] = []
        self.retries_made = 0

    def refused(self, out, why):
        self.refusals.append(why)

    def retrying(self, out):
        self.retries_made += 1


def test_a_nack_is_retried_after_exponential_back_off_then_refused_to_a_held_requeue():
    policy = Recording(retries=2, delay=0.1)
    rig = Rig(policy)
    entry = rig.single()
    rig.turn()
    rig.broker.nack(1)
    rig.turn()
    assert entry.parked and len(rig.broker.published) == 1
    rig.ioloop.advance(0.099)
    assert len(rig.broker.published) == 1
    rig.ioloop.advance(0.001)
    assert rig.seqs() == [1, 2] and not entry.parked
    rig.broker.nack(2)
    rig.ioloop.advance(0.199)
    assert len(rig.broker.published) == 2
    rig.ioloop.advance(0.001)
    assert rig.seqs() == [1, 2, 3] and policy.retries_made == 2
    rig.broker.nack(3)
    rig.turn()
    assert policy.refusals == ["nacked"] and rig.settled() == []   # held (BACKOFF)
    rig.ioloop.advance(1.0)
    assert rig.settled() == [("nack", entry.tag, True)]
    assert rig.nacked == [(entry.tag, True)]


def test_each_refusal_round_waits_twice_as_long_until_an_ack_resets_the_back_off():
    rig = Rig(Recording(retries=0, delay=0.1))
    first = rig.single()
    rig.turn()
    rig.broker.nack(1)
    rig.ioloop.advance(1.0)
    assert rig.settled() == [("nack", first.tag, True)]
    second = rig.single()
    rig.turn()
    rig.broker.nack(2)
    rig.ioloop.advance(1.999)
    assert len(rig.settled()) == 1                       # this round waits 2 s
    rig.ioloop.advance(0.001)
    assert rig.settled()[-1] == ("nack", second.tag, True)
    third, fourth = rig.single(), rig.single()
    rig.turn()
    rig.broker.ack(3)                                    # the destination takes one again
    rig.relay.upstream.reset_backoff()
    rig.broker.nack(4)
    rig.ioloop.advance(1.0)
    assert rig.settled()[-2:] == [("ack", third.tag, True), ("nack", fourth.tag, True)]


@pytest.mark.parametrize("has_dlx", [True, False])
def test_refused_to_dead_letter_nacks_without_requeue_only_when_a_dlx_exists(has_dlx):
    rig = Rig(Recording(retries=0, delay=0.1, refused=Settlement.DEAD_LETTER),
              has_dlx=lambda: has_dlx)
    entry = rig.single()
    rig.turn()
    rig.broker.nack(1)
    rig.turn()
    if has_dlx:
        assert rig.settled() == [("nack", entry.tag, False)]
    else:
        assert rig.settled() == [] and entry.parked
        rig.ioloop.advance(1.0)
        assert rig.settled() == [("nack", entry.tag, True)]


def test_dead_letter_while_the_dlx_probe_asks_parks_the_item_and_later_acks_go_one_by_one():
    answer: list = [None]
    rig = Rig(Recording(retries=0, delay=0.1, refused=Settlement.DEAD_LETTER),
              has_dlx=lambda: answer[0])
    refused, later1, later2 = rig.single(), rig.single(), rig.single()
    rig.turn()
    rig.broker.nack(1)
    rig.broker.ack(2)
    rig.broker.ack(3)
    rig.turn()
    # the parked item no longer holds the acks behind it: they go one by one
    assert rig.settled() == [("ack", later1.tag, False), ("ack", later2.tag, False)]
    answer[0] = True
    rig.relay.upstream.dlx_answered()
    rig.turn()
    assert rig.settled()[-1] == ("nack", refused.tag, False)


@pytest.mark.parametrize(("unroutable", "expected"), [
    (Settlement.ACK, [("ack", 1, True)]),
    (Settlement.DEAD_LETTER, [("nack", 1, False)]),
])
def test_a_returned_message_is_settled_as_unroutable_says(unroutable, expected):
    rig = Rig(Recording(retries=3, delay=0.1, unroutable=unroutable), has_dlx=lambda: True)
    entry = rig.single()
    rig.turn()
    rig.broker.return_(1)
    rig.broker.ack(1)
    if unroutable is Settlement.ACK:
        rig.broker.ready(entry)
    rig.turn()
    assert rig.settled() == expected


def test_a_returned_message_to_hold_is_requeued_after_the_hold_delay():
    rig = Rig(Recording(retries=3, delay=0.1, unroutable=Settlement.HOLD))
    entry = rig.single()
    rig.turn()
    rig.broker.return_(1)
    rig.broker.ack(1)
    rig.ioloop.advance(0.999)
    assert rig.settled() == [] and entry.parked
    rig.ioloop.advance(0.001)
    assert rig.settled() == [("nack", entry.tag, True)]


def test_a_retry_goes_ahead_of_waiting_publishes():
    rig = Rig(Recording(retries=1, delay=0.5))
    first, second = rig.single(), rig.single()
    rig.turn()
    rig.broker.block()
    third = rig.single()                             # waits while blocked
    rig.broker.nack(1)
    rig.ioloop.advance(0.5)                          # the retry is due: it waits too, first
    rig.broker.unblock()
    rig.turn()
    assert [p.body for p in rig.broker.published] == [first.body, second.body, first.body,
                                                      third.body]
    assert rig.seqs() == [1, 2, 3, 4]
