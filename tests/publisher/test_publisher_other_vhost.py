"""A publisher in a vhost other than ``/`` follows binding changes through the event exchange
of ``/`` (rtroute.amqp.event_source), where RabbitMQ's event plugin publishes the events of every
vhost: before (#47) it re-listed every binding every 5 s there. Once it is ready, the management
API holds every listing of the bindings: a binding made at the broker can only be learnt from an
event."""
from __future__ import annotations

import uuid

import pika
import pytest

from rtroute import RTopicPublisher

from ..conftest import MANAGEMENT_URI, broker_uri_for, wait_for
from ..management_gate import ManagementGate

pytestmark = pytest.mark.broker


def test_a_binding_made_at_the_broker_counts_through_events_alone(scratch_vhost):
    name = f"rtroute.test.pubvh.{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(pika.URLParameters(broker_uri_for(scratch_vhost)))
    gate = ManagementGate(MANAGEMENT_URI, f"{name}.bindings")
    try:
        ch = conn.channel()
        ch.exchange_declare(f"{name}.bindings", "topic", durable=True)
        gate.open()
        with RTopicPublisher(broker_uri_for(scratch_vhost), name,
                             management_uri=gate.url) as pub:
            gate.hold()  # from now on no listing of the bindings completes
            queue = ch.queue_declare("", exclusive=True).method.queue
            ch.queue_bind(queue, f"{name}.bindings", "made.at.broker")
            wait_for(lambda: len(pub.bindings) == 1, timeout=30)
            pub.publish("made.at.*", b"m", mandatory=True).result(timeout=10)
            assert ch.queue_declare(queue, passive=True).method.message_count == 1
    finally:
        gate.close()
        if conn.is_open:
            conn.close()
