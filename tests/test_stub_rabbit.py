"""The users' stub broker (tests/stub_rabbit.py) answers as RabbitMQ does where the users'
tests rely on it: prefetch, requeue order and the redelivered flag, an unknown delivery tag,
confirms and deliveries through pika's own read path."""
from __future__ import annotations

from typing import Any

import pika

from tests.stub_rabbit import StubRabbit


def consuming(rabbit: StubRabbit, prefetch: int = 2) -> tuple[Any, list]:
    """A connection and a channel consuming ``q`` through pika's path; what it got."""
    got: list = []
    opened: list = []
    rabbit.connect(on_open_callback=lambda c: c.channel(on_open_callback=opened.append))
    rabbit.ioloop.run()
    channel = opened[0]
    channel.basic_qos(prefetch_count=prefetch)
    channel.basic_consume("q", lambda ch, method, props, body: got.append(
        (method.delivery_tag, method.redelivered, body)))
    rabbit.ioloop.run()
    return channel, got


def test_prefetch_bounds_the_unacked_and_an_ack_makes_room():
    rabbit = StubRabbit()
    for body in (b"a", b"b", b"c"):
        rabbit.enqueue("q", body)
    channel, got = consuming(rabbit)
    assert got == [(1, False, b"a"), (2, False, b"b")]
    channel.basic_ack(2, multiple=True)
    rabbit.ioloop.run()
    assert got[2:] == [(3, False, b"c")] and [m.body for m in rabbit.acked] == [b"a", b"b"]


def test_a_lost_connection_requeues_the_unacked_in_order_marked_redelivered():
    rabbit = StubRabbit()
    for body in (b"a", b"b", b"c"):
        rabbit.enqueue("q", body)
    channel, _got = consuming(rabbit)
    rabbit.drop()
    assert [(m.body, m.redelivered) for m in rabbit.queues["q"].ready] == \
        [(b"a", True), (b"b", True), (b"c", False)]
    assert not channel.is_open


def test_an_ack_of_a_tag_the_channel_does_not_have_closes_it_with_406():
    rabbit = StubRabbit()
    rabbit.enqueue("q", b"a")
    channel, _got = consuming(rabbit)
    closed: list = []
    channel.add_on_close_callback(lambda _ch, reason: closed.append(reason.reply_code))
    channel.basic_ack(7)
    rabbit.ioloop.run()
    assert closed == [406] and "unknown delivery tag 7" in rabbit.errors[0]
    assert [m.body for m in rabbit.queues["q"].ready] == [b"a"]  # back, unacked


def test_a_nack_without_requeue_dead_letters_and_with_requeue_puts_it_back_first():
    rabbit = StubRabbit()
    for body in (b"a", b"b", b"c"):
        rabbit.enqueue("q", body)
    channel, got = consuming(rabbit, prefetch=1)
    channel.basic_nack(1, requeue=False)
    rabbit.ioloop.run()
    channel.basic_reject(2, requeue=True)
    rabbit.ioloop.run()
    assert [m.body for m in rabbit.dead] == [b"a"]
    assert got[-1] == (3, True, b"b")  # requeued at the head, delivered again


def test_confirms_reach_the_confirm_delivery_callback_on_pikas_path():
    rabbit = StubRabbit()
    opened: list = []
    rabbit.connect(on_open_callback=lambda c: c.channel(on_open_callback=opened.append))
    rabbit.ioloop.run()
    channel = opened[0]
    answers: list = []
    channel.confirm_delivery(lambda frame: answers.append(type(frame.method).__name__))
    rabbit.ioloop.run()
    for body in (b"a", b"b"):
        channel.basic_publish("", "nowhere", body)
        rabbit.ioloop.turn()  # (one write per turn and connection: the stub asserts it)
    first, second = rabbit.published
    assert (first.seq, second.seq) == (1, 2)
    rabbit.ack(first)
    rabbit.nack(second)
    assert answers == ["Ack", "Nack"] and rabbit.confirmed() == [b"a"]


def test_a_publish_to_the_default_exchange_lands_in_the_queue_it_names():
    rabbit = StubRabbit()
    rabbit.declare_queue("dst")
    opened: list = []
    rabbit.connect(on_open_callback=lambda c: c.channel(on_open_callback=opened.append))
    rabbit.ioloop.run()
    opened[0].basic_publish("", "dst", b"x", pika.BasicProperties(headers={"h": 1}))
    assert rabbit.bodies("dst") == [b"x"]
    assert rabbit.queues["dst"].ready[0].properties.headers == {"h": 1}
