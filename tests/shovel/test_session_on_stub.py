"""The shovel's session on the stub broker (tests/stub_broker.py): its own source and
destination sides connect, declare, consume and publish through the relay, in each ack mode,
and every message is found where it must be -- in the source queue, acknowledged there, in the
destination queue -- after confirms, a nack and a lost destination link. No RabbitMQ: the
broker tier keeps what only RabbitMQ can show (tests/shovel/test_moving.py,
test_nothing_vanishes.py)."""
from __future__ import annotations

from typing import Any

import pika
import pytest

from rtroute.config.shovel import ShovelConfig
from rtroute.config.shovel_fields import Endpoint
from rtroute.shovel.session import Session
from rtroute.shovel.worker import ShovelWorker
from tests.stub_rabbit import StubRabbit

URI = "amqp://guest:guest@stub.invalid:5672/%2F"
BODIES = [f"m{i}".encode() for i in range(1, 6)]


@pytest.fixture
def rabbit(monkeypatch: pytest.MonkeyPatch) -> StubRabbit:
    rabbit = StubRabbit()
    monkeypatch.setattr(pika, "SelectConnection", rabbit.connect)
    rabbit.declare_queue("dst")
    for body in BODIES:
        rabbit.enqueue("src", body, "k")
    return rabbit


def session_on(rabbit: StubRabbit, ack_mode: str, **config: Any) -> Session:
    """A session of a shovel ``src`` -> ``dst`` on ``rabbit``, started and consuming."""
    cfg = ShovelConfig(name="s", sources=Endpoint([URI]), destinations=Endpoint([URI]),
                       queue="src", dest_queue="dst", ack_mode=ack_mode,
                       **{"prefetch_count": 10, **config})
    worker = ShovelWorker(cfg, shovelled_by="stub")
    worker.ioloop.close()
    worker.ioloop = rabbit.ioloop  # the worker's loop is the stub's virtual one
    session = Session(worker, 1)
    session.start()
    rabbit.ioloop.run()
    assert session.running and session.source.consumer_tag is not None
    return session


def dst_publishes(rabbit: StubRabbit) -> list:
    return rabbit.to("", "dst")


def acked_at_source(rabbit: StubRabbit) -> list[bytes]:
    return [m.body for m in rabbit.acked if m.queue == "src"]


# -- on_confirm --------------------------------------------------------------------------------

def test_on_confirm_acks_each_source_message_only_once_the_destination_confirmed_it(rabbit):
    session = session_on(rabbit, "on_confirm")
    assert [p.body for p in dst_publishes(rabbit)] == BODIES
    assert acked_at_source(rabbit) == [] and rabbit.bodies("src") == BODIES  # all unacked
    published = dst_publishes(rabbit)
    rabbit.ack(published[2], multiple=True)  # m1..m3 confirmed
    rabbit.ioloop.run()
    assert acked_at_source(rabbit) == BODIES[:3]
    assert rabbit.bodies("src") == BODIES[3:]
    rabbit.ack(published[4])  # m5 before m4: acks go out in delivery order, m5 waits
    rabbit.ioloop.run()
    assert acked_at_source(rabbit) == BODIES[:3] and rabbit.bodies("src") == BODIES[3:]
    rabbit.ack(published[3])
    rabbit.ioloop.run()
    assert acked_at_source(rabbit) == BODIES and rabbit.bodies("src") == []
    assert session.source.channel.settled[-1].multiple  # one ack covered m4 and m5
    assert rabbit.bodies("dst") == BODIES and rabbit.errors == []
    assert session.counters["moved"] == 5


def test_on_confirm_a_nacked_publish_is_published_again_and_acked_once_confirmed(rabbit):
    session = session_on(rabbit, "on_confirm", nack_retries=2, nack_retry_delay=0.5)
    first = dst_publishes(rabbit)
    rabbit.nack(first[1])  # m2 refused once
    for published in first[:1] + first[2:]:
        rabbit.ack(published)
    rabbit.ioloop.run()
    assert b"m2" not in acked_at_source(rabbit) and rabbit.bodies("src") == [b"m2"]
    rabbit.ioloop.advance(0.5)  # the retry's back-off
    again = dst_publishes(rabbit)[5:]
    assert [p.body for p in again] == [b"m2"]
    rabbit.ack(again[0])
    rabbit.ioloop.run()
    assert sorted(acked_at_source(rabbit)) == BODIES and rabbit.bodies("src") == []
    assert session.counters["nacked"] == 1 and session.counters["retried"] == 1
    assert rabbit.errors == []


def test_on_confirm_a_refused_message_goes_back_to_the_source_not_to_the_void(rabbit):
    session_on(rabbit, "on_confirm", nack_retries=0, on_refused="requeue")
    published = dst_publishes(rabbit)
    rabbit.nack(published[0])
    for one in published[1:]:
        rabbit.ack(one)
    rabbit.ioloop.run()
    assert acked_at_source(rabbit) == BODIES[1:]
    assert rabbit.bodies("src") == [b"m1"]  # held (unacked) until its back-off ends
    rabbit.ioloop.advance(1.0)
    # requeued with basic.nack, then delivered again (redelivered) and published again
    m1 = next(m for m in rabbit.unacked() if m.body == b"m1")
    assert m1.redelivered and m1.deliveries == 2
    assert [p.body for p in dst_publishes(rabbit)[5:]] == [b"m1"]
    assert rabbit.errors == []


def test_on_confirm_a_lost_destination_link_requeues_every_unconfirmed_message(rabbit):
    session = session_on(rabbit, "on_confirm")
    published = dst_publishes(rabbit)
    rabbit.ack(published[1], multiple=True)  # m1, m2 confirmed
    rabbit.ioloop.run()
    assert acked_at_source(rabbit) == BODIES[:2]
    rabbit.drop(session.destination.connection)  # m3..m5 in flight
    rabbit.ioloop.run()
    assert not session.alive
    # the session dropped the source too: what was not acked is back, in order
    assert not session.source.connection.is_open
    assert [m.body for m in rabbit.queues["src"].ready] == BODIES[2:]
    assert all(m.redelivered for m in rabbit.queues["src"].ready)
    assert acked_at_source(rabbit) == BODIES[:2] and rabbit.errors == []


def test_on_confirm_a_blocked_destination_holds_deliveries_then_a_loss_requeues_them(rabbit):
    rabbit.queues["src"].ready.clear()
    session = session_on(rabbit, "on_confirm")
    rabbit.block()
    for body in BODIES:
        rabbit.enqueue("src", body)
    rabbit.ioloop.run()
    assert dst_publishes(rabbit) == [] and len(session.destination.pending) == 5
    rabbit.drop(session.destination.connection)
    rabbit.ioloop.run()
    assert [m.body for m in rabbit.queues["src"].ready] == BODIES
    assert acked_at_source(rabbit) == [] and rabbit.errors == []


# -- on_publish --------------------------------------------------------------------------------

def test_on_publish_acks_at_the_source_once_written_without_waiting_for_a_confirm(rabbit):
    session = session_on(rabbit, "on_publish")
    published = dst_publishes(rabbit)
    assert [p.body for p in published] == BODIES and all(p.seq == 0 for p in published)
    assert sorted(acked_at_source(rabbit)) == BODIES and rabbit.bodies("src") == []
    assert rabbit.bodies("dst") == BODIES
    assert session.counters["forwarded"] == 5 and rabbit.errors == []


def test_on_publish_a_lost_destination_link_requeues_what_was_not_written(rabbit):
    session = session_on(rabbit, "on_publish")  # m1..m5 written and acked
    rabbit.block()
    for body in (b"m6", b"m7"):
        rabbit.enqueue("src", body)
    rabbit.ioloop.run()
    assert len(session.destination.pending) == 2
    rabbit.drop(session.destination.connection)
    rabbit.ioloop.run()
    assert sorted(acked_at_source(rabbit)) == BODIES
    assert [m.body for m in rabbit.queues["src"].ready] == [b"m6", b"m7"]
    assert rabbit.bodies("dst") == BODIES and rabbit.errors == []


# -- no_ack ------------------------------------------------------------------------------------

def test_no_ack_consumes_without_acknowledgements_and_publishes_without_confirms(rabbit):
    session = session_on(rabbit, "no_ack")
    source_channel = session.source.channel
    assert source_channel.settled == []  # nothing acked: the broker forgot them on delivery
    assert [m.state for m in rabbit.acked] == ["dropped"] * 5
    assert [p.body for p in dst_publishes(rabbit)] == BODIES
    assert all(p.seq == 0 for p in dst_publishes(rabbit))
    assert rabbit.bodies("src") == [] and rabbit.bodies("dst") == BODIES


def test_no_ack_what_waits_for_a_blocked_destination_is_gone_with_its_link(rabbit):
    """no_ack is at-most-once, as the plugin's: the source forgot each message on delivery,
    so what was delivered and not written when the link drops is nowhere (counted, not
    redelivered)."""
    rabbit.queues["src"].ready.clear()
    session = session_on(rabbit, "no_ack")
    rabbit.block()
    for body in BODIES[:2]:
        rabbit.enqueue("src", body)
    rabbit.ioloop.run()
    assert len(session.destination.pending) == 2
    rabbit.drop(session.destination.connection)
    rabbit.ioloop.run()
    assert rabbit.bodies("src") == [] and dst_publishes(rabbit) == []
    assert [m.body for m in rabbit.acked] == BODIES[:2]


# -- what every mode shares --------------------------------------------------------------------

@pytest.mark.parametrize("ack_mode", ["on_confirm", "on_publish"])
def test_a_lost_source_link_ends_the_session_and_nothing_unacked_stays_taken(rabbit, ack_mode):
    session = session_on(rabbit, ack_mode)
    rabbit.drop(session.source.connection)
    rabbit.ioloop.run()
    assert not session.alive and not session.destination.connection.is_open
    if ack_mode == "on_confirm":  # none confirmed: all five back at the source, in order
        assert [m.body for m in rabbit.queues["src"].ready] == BODIES
        assert acked_at_source(rabbit) == []
    else:  # written, so acked before the loss
        assert rabbit.bodies("src") == [] and acked_at_source(rabbit) == BODIES
    assert rabbit.errors == []


def test_a_destination_channel_closed_by_the_broker_ends_the_session_and_requeues(rabbit):
    session = session_on(rabbit, "on_confirm")
    rabbit.close_channel(session.destination.channel, 406, "PRECONDITION_FAILED - test")
    rabbit.ioloop.run()
    assert not session.alive
    assert [m.body for m in rabbit.queues["src"].ready] == BODIES
    assert not session.source.connection.is_open and acked_at_source(rabbit) == []


@pytest.mark.parametrize(("on_unroutable", "acked"), [("drop", True), ("requeue", False)])
def test_a_returned_message_is_acked_or_held_then_requeued_as_on_unroutable_says(
        rabbit, on_unroutable, acked):
    rabbit.queues["src"].ready[1:] = []
    session = session_on(rabbit, "on_confirm", on_unroutable=on_unroutable)
    (published,) = dst_publishes(rabbit)
    rabbit.return_(published)
    rabbit.ack(published)
    rabbit.ioloop.run()
    assert session.counters["returned"] == 1
    if acked:
        assert acked_at_source(rabbit) == [b"m1"] and rabbit.bodies("src") == []
        return
    assert acked_at_source(rabbit) == [] and rabbit.bodies("src") == [b"m1"]  # held
    rabbit.ioloop.advance(1.0)  # HOLD_DELAY: requeued, then delivered again
    m1 = rabbit.unacked()[0]
    assert m1.body == b"m1" and m1.deliveries == 2


def test_src_delete_after_takes_that_many_and_leaves_the_rest_in_the_queue(rabbit):
    # (a prefetch above the budget would bounce the deliveries beyond it -- nacked with
    # requeue, delivered again at once -- until the budget's last confirm)
    session = session_on(rabbit, "on_confirm", src_delete_after=3, prefetch_count=3)
    assert [p.body for p in dst_publishes(rabbit)] == BODIES[:3]
    rabbit.ack_all()
    rabbit.ioloop.run()
    assert acked_at_source(rabbit) == BODIES[:3]
    assert not session.alive and not session.source.connection.is_open
    assert [m.body for m in rabbit.queues["src"].ready] == BODIES[3:]


def test_deliveries_beyond_src_delete_after_wait_parked_and_go_back_once(rabbit):
    """A prefetch above src-delete-after: what comes beyond the budget is not nacked (the
    broker would deliver it again at once, every turn, until the budget's last confirm) but
    parked, unacknowledged, and back in the queue, delivered once, when the session ends."""
    session = session_on(rabbit, "on_confirm", src_delete_after=3)  # prefetch 10
    assert [p.body for p in dst_publishes(rabbit)] == BODIES[:3]
    assert sorted(m.body for m in rabbit.unacked()) == BODIES
    assert all(m.deliveries == 1 for m in rabbit.unacked())
    rabbit.ack_all()
    rabbit.ioloop.run()
    assert acked_at_source(rabbit) == BODIES[:3]
    assert not session.alive
    assert [m.body for m in rabbit.queues["src"].ready] == BODIES[3:]
    assert all(m.deliveries == 1 for m in rabbit.queues["src"].ready)


def test_a_requeue_under_src_delete_after_takes_a_parked_delivery_instead(rabbit):
    """The destination refuses one of the budget's messages (back to the source): the budget
    has room for one more, taken from what comes next (here the broker delivers the requeued
    message again before the parked ones are looked at); exactly three are taken in all, the
    others go back to the queue, none twice."""
    session = session_on(rabbit, "on_confirm", src_delete_after=3, nack_retries=0,
                         on_refused="requeue")
    published = dst_publishes(rabbit)
    assert [p.body for p in published] == BODIES[:3]
    rabbit.nack(published[0])  # m1 refused: requeued after its back-off
    rabbit.ack(published[1])
    rabbit.ack(published[2])
    rabbit.ioloop.run()
    rabbit.ioloop.advance(1.0)
    (again,) = dst_publishes(rabbit)[3:]
    assert again.body in (b"m1", b"m4")
    rabbit.ack(again)
    rabbit.ioloop.run()
    assert sorted(acked_at_source(rabbit)) == sorted([b"m2", b"m3", again.body])
    assert not session.alive
    assert sorted(m.body for m in rabbit.queues["src"].ready) == \
        sorted(set(BODIES) - {b"m2", b"m3", again.body})