"""The outbox on the stub broker: order, the window's pause and resume, one write per turn, the
frame_max guard, and publishing without confirms."""
from __future__ import annotations

import pika
import pytest

from rtroute.relay import Hook, Outgoing, PauseReason, Policy, RetryWithBackoff, Settlement

from .rig import Rig


def test_a_full_window_pauses_and_resumes_at_the_low_watermark_in_order():
    rig = Rig(window=4)
    entries = [rig.single() for _ in range(10)]
    rig.turn()
    assert rig.seqs() == [1, 2, 3, 4]
    assert PauseReason.WINDOW in rig.relay.outbox.pause_reasons
    rig.broker.ack(1)
    rig.turn()
    assert len(rig.broker.published) == 4        # 3 in flight: above the low watermark (2)
    rig.broker.ack(2)
    rig.turn()
    assert rig.seqs() == [1, 2, 3, 4, 5, 6]      # resumed at 2 in flight, filled up again
    rig.broker.ack(6, multiple=True)
    rig.turn()
    rig.broker.ack(10, multiple=True)
    rig.turn()
    assert [p.body for p in rig.broker.published] == [e.body for e in entries]
    assert rig.settled()[-1] == ("ack", 10, True)


def test_the_publishes_of_one_turn_are_one_write():
    rig = Rig(window=100)
    writes = rig.broker.writes
    for _ in range(20):
        rig.single()
    item = rig.item()
    rig.relay.submit(item, [rig.out(item, str(i)) for i in range(5)])
    rig.turn()
    assert rig.broker.writes == writes + 1 and len(rig.broker.published) == 25


def test_properties_and_ready_made_frames_keep_sequence_numbers_in_write_order():
    rig = Rig()
    item = rig.item()
    outs = [rig.out(item, "0"),
            Outgoing("ex", "p", properties=pika.BasicProperties(), body=b"2.1/1"),
            rig.out(item, "2")]
    rig.relay.submit(item, outs)
    rig.turn()
    assert [(p.seq, p.body) for p in rig.broker.published] == [
        (1, b"2.1/0"), (2, b"2.1/1"), (3, b"2.1/2")]


class Refusing(RetryWithBackoff):
    def __init__(self) -> None:
        super().__init__(retries=3, delay=0.1, refused=Settlement.DEAD_LETTER)
        self.reasons: list[str] = []

    def refused(self, out, why):
        self.reasons.append(why)


@pytest.mark.parametrize("policy", ["default", "retry"])
def test_an_oversized_header_is_never_written_and_goes_to_the_policy(policy):
    rig = Rig(Refusing() if policy == "retry" else Policy(), frame_max=4096,
              has_dlx=lambda: True)
    big = rig.single(headers={"big": "x" * 5000}, checked=False)
    small = rig.single(checked=False)
    rig.turn()
    assert [p.body for p in rig.broker.published] == [small.body]
    assert rig.seqs() == [1]                      # no sequence number spent on the big one
    if policy == "retry":
        assert rig.settled() == [("nack", big.tag, False)]       # refused: dead-lettered
        assert "exceed the connection's frame_max (4096 bytes)" in rig.policy.reasons[0]
    else:
        assert rig.settled() == [("reject", big.tag, True)]


def test_a_header_of_frame_max_plus_eight_bytes_is_accepted_one_more_is_not():
    rig = Rig(frame_max=4096)
    probe = rig.single(headers={"h": ""}, checked=False)
    base = len(probe.frames[1])
    fits = rig.single(headers={"h": "x" * (4096 + 8 - base)}, checked=False)
    too_big = rig.single(headers={"h": "x" * (4096 + 9 - base)}, checked=False)
    assert len(fits.frames[1]) == 4096 + 8 and len(too_big.frames[1]) == 4096 + 9
    rig.turn()
    assert [p.body for p in rig.broker.published] == [probe.body, fits.body]
    assert rig.settled() == [("reject", too_big.tag, True)]


def test_an_unencodable_property_goes_to_the_policy_without_spending_a_sequence_number():
    rig = Rig()
    item = rig.item()
    bad = Outgoing("ex", "k", properties=pika.BasicProperties(headers={"f": 1.5}),
                   body=b"2.1/bad")
    good = rig.out(item, "good")
    rig.relay.submit(item, [bad, good])
    rig.turn()
    assert [(p.seq, p.body) for p in rig.broker.published] == [(1, b"2.1/good")]
    rig.broker.ack(1)
    rig.turn()
    assert rig.settled() == [("reject", item.tag, True)]


class CountingWrites(Policy):
    hooks = frozenset({Hook.WRITTEN})

    def __init__(self) -> None:
        self.writes: list[int] = []

    def written(self, count):
        self.writes.append(count)


def test_on_publish_acks_at_write_and_no_ack_never_acks():
    on_publish = Rig(CountingWrites(), confirms=False, ack_on_write=True)
    entries = [on_publish.single() for _ in range(3)]
    for entry in entries:
        on_publish.broker.ready(entry)
    on_publish.turn()
    assert [p.seq for p in on_publish.broker.published] == [0, 0, 0]   # no confirm mode
    assert on_publish.settled() == [("ack", entries[-1].tag, True)]
    assert on_publish.broker.writes == 1 and on_publish.policy.writes == [3]
    no_ack = Rig(confirms=False)
    for _ in range(3):
        no_ack.single()
    no_ack.turn()
    assert len(no_ack.broker.published) == 3 and no_ack.settled() == []


def test_a_return_without_confirms_reaches_the_policy():
    class Counting(Policy):
        def __init__(self) -> None:
            self.returns: list = []

        def returned_unconfirmed(self, reply_code, reply_text):
            self.returns.append((reply_code, reply_text))

    rig = Rig(Counting(), confirms=False)
    rig.single()
    rig.turn()
    channel = rig.broker.publish_channel
    method = pika.spec.Basic.Return(312, "NO_ROUTE", "ex", "k")
    for callback in channel._on_return:
        callback(channel, method, pika.BasicProperties(), b"")
    assert rig.policy.returns == [(312, "NO_ROUTE")]
