"""A message from a Node.js client (amqplib) with a Date.now() millisecond timestamp header is
routed, not dead-lettered (before: the ingress decoded the whole table with pika, whose
datetime conversion fails on year 57865, and dead-lettered it with every property dropped).

Needs Node.js and npm (the machine kind has them); amqplib is installed from the npm registry
into tests/sidecar/node/node_modules once."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rtroute.amqp import frames
from rtroute.amqp.content_header import decode_properties

from ..divert.test_lossless_broker import raw_consume
from ..node_amqplib import amqplib_script
from .conftest import wait_depth

pytestmark = pytest.mark.broker

NODE_DIR = Path(__file__).parent / "node"


@pytest.fixture(scope="module")
def node_publisher() -> Path:
    return amqplib_script(NODE_DIR, "publish.js")


def test_a_node_message_with_a_millisecond_timestamp_header_is_routed(node_publisher, sidecars,
                                                                     managed, channel,
                                                                     broker_uri):
    name = managed("node")
    sc = sidecars("--rtopic", name)
    queue, audit = f"{name}.q", f"{name}.audit"
    sc.wait_running(name)
    for q, key in ((queue, "orders.node.created"), (audit, "audit.node")):
        channel.queue_declare(q, durable=True)
        managed.queues.append(q)
        channel.queue_bind(q, f"{name}.bindings", key)
    sc.wait_running(name, bindings=2)
    done = subprocess.run(["node", str(node_publisher), broker_uri, name, "orders.*.created",
                           "from node"], capture_output=True, text=True, timeout=60,
                          check=True)
    sent_ms = int(done.stdout.strip())
    wait_depth(channel, queue, 1)
    wait_depth(channel, audit, 1)
    for q in (queue, audit):  # pika cannot decode such a timestamp: read the frames
        ((_, parts),) = raw_consume(broker_uri, q, 1)
        assert frames.body_of(parts) == b"from node"
        props = decode_properties(parts[0])
        assert props.message_id == "node-1" and props.timestamp == sent_ms
        assert props.headers["sent"] == sent_ms  # milliseconds: year ~55000 read as seconds
        assert props.headers["price"] == 10.7
        assert "x-rtroute-bcc" not in props.headers
    ex = sc.exchange(name)
    assert ex["dead_lettered"] == 0 and ex["routed"] == 1
