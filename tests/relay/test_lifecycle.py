"""The relay's life cycle on the stub broker: a publish channel that closes alone, a connection
that drops mid-window, what a previous connection still reports, shards, and a drain."""
from __future__ import annotations

from rtroute.relay import Policy, RetryWithBackoff

from .rig import Rig


def test_a_publish_channel_close_mid_window_fails_in_flight_and_calls_on_broken():
    """What was in flight fails and, by the default policy, is rejected on the consume channel,
    which is still open; what was not written yet is handed back by detach."""
    rig = Rig(window=3)
    entries = [rig.single() for _ in range(3)]
    rig.turn()
    waiting = rig.item()
    rig.relay.submit(waiting, [rig.out(waiting)])     # waits for room in the window
    rig.broker.ack(1)                                 # above the low watermark: it still waits
    rig.broker.close_channel(rig.broker.publish_channel, 406, "PRECONDITION_FAILED")
    rig.turn()
    assert rig.broken == ["(406, 'PRECONDITION_FAILED')"]
    # the default policy requeues what failed, on the consume channel that is still open
    assert rig.settled() == [("reject", entries[1].tag, True), ("reject", entries[2].tag, True),
                             ("ack", entries[0].tag, True)]
    assert [out.item for out in rig.relay.detach()] == [waiting]   # never written: given back


def test_a_failed_publish_is_left_to_the_broker_by_the_retry_policy():
    rig = Rig(RetryWithBackoff(retries=3, delay=0.1))
    rig.single()
    rig.turn()
    rig.broker.close_channel(rig.broker.publish_channel)
    rig.turn()
    assert rig.settled() == []


def test_a_connection_drop_mid_window_sends_no_ack_and_forgets_every_item():
    rig = Rig()
    for _ in range(4):
        rig.single()
    rig.turn()
    rig.broker.ack(2, multiple=True)                  # the acks would go at the end of the turn
    rig.broker.drop_connection()                      # the failed publishes try to requeue
    assert rig.errors == ["nacking: ConnectionWrongStateError"] * 2
    rig.relay.detach()
    rig.turn()
    assert rig.settled() == [] and len(rig.settler) == 0
    assert rig.relay.status()["in_flight"] == 0


def test_a_relay_detached_first_by_its_caller_does_not_even_try():
    rig = Rig()
    rig.broker.publish_channel._on_close.insert(0, lambda _ch, _reason: rig.relay.detach())
    for _ in range(4):
        rig.single()
    rig.turn()
    rig.broker.drop_connection()
    rig.turn()
    assert rig.settled() == [] and rig.errors == []


def test_a_confirm_or_timer_of_a_previous_connection_settles_nothing():
    rig = Rig(RetryWithBackoff(retries=3, delay=0.5))
    entry = rig.single()
    rig.turn()
    rig.broker.nack(1)                                # a retry is armed for 0.5 s
    window = rig.relay.window
    rig.relay.detach()
    rig.ioloop.advance(5.0)
    assert rig.seqs() == [1] and entry.parked         # the retry never went out
    window._on_confirm(1, False, True)                # a late confirm of the old window
    window._on_channel_closed(None, RuntimeError("late close"))
    rig.turn()
    assert rig.settled() == []


def test_shard_settlers_ack_independently_and_closing_one_resets_only_its_items():
    rig = Rig(RetryWithBackoff(retries=0, delay=0.1))
    shard = rig.broker.consume_channel()
    shard_settler = rig.upstream.open(shard)
    main_item = rig.item()
    shard_items = [rig.item(shard, shard_settler) for _ in range(2)]
    rig.relay.submit(main_item, [rig.out(main_item)])
    for item in shard_items:
        rig.relay.submit(item, [rig.out(item, channel=shard)])
    rig.turn()
    rig.broker.ack(2)
    rig.turn()
    assert shard.settled and shard.settled[0].tag == 1 and rig.broker.consume.settled == []
    rig.broker.nack(3)                                 # refused: held for a requeue
    rig.turn()
    rig.upstream.close(shard_settler)                  # the shard is released meanwhile
    rig.ioloop.advance(2.0)
    assert [s.kind for s in shard.settled] == ["ack"]  # its held item was forgotten
    rig.broker.ack(1)
    rig.turn()
    assert rig.settled() == [("ack", main_item.tag, True)]
    assert rig.upstream.settlers == [rig.settler]


def test_a_drain_parks_what_waits_and_lets_in_flight_confirms_settle():
    rig = Rig(Policy(), window=2)
    entries = [rig.single() for _ in range(4)]
    rig.turn()
    rig.relay.drain()
    assert not rig.relay.queued and entries[2].parked and entries[3].parked
    assert not rig.relay.drained
    rig.broker.ack(2, multiple=True)
    rig.turn()
    assert rig.seqs() == [1, 2]                        # nothing new went out
    assert rig.settled() == [("ack", entries[1].tag, True)]
    assert rig.relay.drained


def test_a_drain_without_parking_sends_what_waits_but_no_retry():
    rig = Rig(RetryWithBackoff(retries=3, delay=0.5), window=2)
    entries = [rig.single() for _ in range(3)]        # the third waits for room
    rig.turn()
    rig.broker.nack(1)                                # a retry is armed for 0.5 s
    rig.turn()
    rig.relay.drain(park=False)
    assert not rig.relay.drained
    rig.turn()
    assert rig.seqs() == [1, 2, 3]                    # what waited went out
    rig.broker.ack(3, multiple=True)
    rig.ioloop.advance(5.0)
    assert rig.seqs() == [1, 2, 3] and entries[0].parked   # the retry never went out
    assert rig.relay.drained                          # the parked one: the broker's to requeue
    # 1 is parked below them: 2 and 3 are acked one by one, no multiple ack covers 1
    assert rig.settled() == [("ack", 2, False), ("ack", 3, False)]
