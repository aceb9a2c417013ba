"""A quorum ingress queue never drops a message that keeps failing: past its delivery limit the
broker dead-letters it to ``rtroute.dead`` (reason ``delivery_limit`` in ``x-death``).

Rule per version: RabbitMQ 4.x gives quorum queues a delivery limit of 20 by default and then
drops the message unless a dead-letter exchange is set; 3.x has no limit unless one is set. The
sidecar sets both (``ingress_delivery_limit``, default 20), so both versions dead-letter.
"""
from __future__ import annotations

import time
import uuid

import pika
import pytest

from .conftest import broker_toml

pytestmark = pytest.mark.broker


def test_a_message_whose_republish_keeps_being_refused_is_dead_lettered_not_dropped(
        sidecars, managed, channel, tmp_path, broker_uri):
    name = managed("quorum")
    full = f"{name}.full"
    dead = f"rtroute-test.dead.{uuid.uuid4().hex[:8]}"
    config = tmp_path / "rtroute.toml"
    config.write_text(broker_toml() + f'''
[[exchange]]
name = "{name}"
ingress_queue_type = "quorum"
ingress_delivery_limit = 2
''')
    channel.exchange_declare("rtroute.dead", "fanout", durable=True)
    channel.queue_declare(dead, durable=True, arguments={"x-queue-type": "classic"})
    channel.queue_bind(dead, "rtroute.dead")
    # a queue that refuses every message: the sidecar's republish is nacked each time
    channel.queue_declare(full, durable=True,
                          arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    managed.queues.extend([full, dead])
    sc = sidecars("-c", str(config))
    sc.wait_running(name)
    channel.queue_bind(full, f"{name}.bindings", "a.b")
    sc.wait_running(name, bindings=1)
    channel.basic_publish(name, "a.*", b"refused", pika.BasicProperties(message_id="m1"))

    deadline = time.monotonic() + 30
    method = None
    while method is None and time.monotonic() < deadline:
        method, props, body = channel.basic_get(dead, auto_ack=True)
        time.sleep(0.1)
    assert method is not None, sc.log()
    assert body == b"refused" and props.message_id == "m1"
    death = props.headers["x-death"][0]
    assert death["reason"] == "delivery_limit"
    assert death["queue"] == f"rtroute.ingress.{name}"
    assert channel.queue_declare(f"rtroute.ingress.{name}", passive=True).method \
        .message_count == 0
    assert sc.exchange(name)["requeued"] >= 2
