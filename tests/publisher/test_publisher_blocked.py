"""``connection.blocked`` (a memory alarm on the broker): RTopicPublisher sends nothing while
the broker blocks its connection -- messages wait in its queue, in order, and ``status()``
says ``blocked`` -- then, once unblocked, sends them all and every future is acked (the
shovel's and the sidecar's rule, all three through ``rtroute.relay.flow.FlowControl``).

The alarm is raised on the broker under test itself, and its watermark put back whatever
happens."""
from __future__ import annotations

import uuid

import pytest

from rtroute import RTopicPublisher
from rtroute.amqp.confirm_window import Outcome

from ..conftest import memory_alarm, wait_for

pytestmark = pytest.mark.broker

COUNT = 200


def test_messages_wait_in_order_while_the_broker_blocks_the_connection(
        broker_uri, management_uri, channel):
    name = f"rtroute.test.pub-blocked.{uuid.uuid4().hex[:8]}"
    channel.exchange_declare(f"{name}.bindings", "topic", durable=True)
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(queue, f"{name}.bindings", "k.1")
    try:
        with RTopicPublisher(broker_uri, name, management_uri=management_uri) as pub:
            wait_for(lambda: len(pub.bindings) == 1, 15)
            assert pub.publish("k.*", b"before").result(timeout=10) is Outcome.ACKED
            with memory_alarm():
                first = pub.publish("k.1", b"0")  # the broker blocks on a publish
                wait_for(lambda: pub.status()["blocked"], 30)
                futures = [first, *(pub.publish("k.*" if i % 2 else "k.1", str(i).encode())
                                    for i in range(1, COUNT))]
                status = pub.status()
                assert status["queued"] == COUNT - 1  # nothing more was sent
                assert not any(f.done() for f in futures[1:])
            assert all(f.result(timeout=30) is Outcome.ACKED for f in futures)
            assert not pub.status()["blocked"]
        bodies = []
        while True:
            method, _props, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                break
            bodies.append(body)
        assert bodies == [b"before", *(str(i).encode() for i in range(COUNT))]
    finally:
        channel.exchange_delete(f"{name}.bindings")
