"""Divert + shovel = bridge: one `rtroute run -c` process diverts EU orders to a local
store-and-forward queue and shovels that queue to a second broker node."""
from __future__ import annotations

import uuid

import pika
import pytest

from ..conftest import BROKER_URI, MANAGEMENT_URI, wait_for
from ..sidecar.conftest import SidecarProcess
from .conftest import depth, drain

pytestmark = [pytest.mark.broker, pytest.mark.slow]

LOCAL = BROKER_URI


def test_divert_and_shovel_bridge_two_brokers(node2, tmp_path):
    tag = uuid.uuid4().hex[:8]
    orders, outbox, remote = f"bridge.orders.{tag}", f"bridge.to-eu.{tag}", f"bridge.eu.{tag}"
    config = tmp_path / "rtroute.toml"
    config.write_text(f"""
[broker]
uri = "{LOCAL}"
management_uri = "{MANAGEMENT_URI}"

[[exchange]]
name = "{orders}"
kind = "topic"

[[divert]]
name = "to-eu"
address = "{orders}"
forwarding_address = "{outbox}"
routing_type = "ANYCAST"
filter = "region = 'eu'"

[[shovel]]
name = "eu-bridge"
queue = "{outbox}"
ack_mode = "on_confirm"
publish_fields = {{ exchange = "", routing_key = "{remote}" }}

[shovel.sources]
broker = "{LOCAL}"
declarations = [{{ method = "queue.declare", queue = "{outbox}", durable = true }}]

[shovel.destinations]
broker = "{node2.uri}"
declarations = [{{ method = "queue.declare", queue = "{remote}", durable = true }}]
""")
    local = pika.BlockingConnection(pika.URLParameters(LOCAL))
    ch = local.channel()
    ch.queue_declare(outbox, durable=True)  # the divert resolves it as a queue at start
    sc = SidecarProcess(["-c", str(config)], tmp_path / "run.log")
    try:
        sc.wait_running(orders, timeout=30)
        wait_for(lambda: any(s.get("state") == "running"
                             for s in (sc.status() or {}).get("shovels", [])), 30)
        everything = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(everything, f"{orders}.bindings", "#")
        ch.confirm_delivery()
        for i in range(100):
            region = "eu" if i % 2 else "us"
            ch.basic_publish(orders, f"order.{region}", str(i).encode(), pika.BasicProperties(
                message_id=f"m{i}", headers={"region": region}, delivery_mode=2))
        wait_for(lambda: depth(node2.uri, remote) >= 50, 30)
        wait_for(lambda: ch.queue_declare(everything, passive=True).method.message_count >= 100,
                 30)
        copies = drain(node2.uri, remote)
        assert sorted(int(b) for _, _, b in copies) == list(range(1, 100, 2))
        for _, props, _ in copies:
            assert props.headers["_AMQ_ORIG_ADDRESS"] == orders
            assert props.headers["_AMQ_ORIG_QUEUE"] == "to-eu"
            assert props.headers["region"] == "eu"
            assert props.message_id != props.headers["_AMQ_ORIG_MESSAGE_ID"]
        originals = []
        while (got := ch.basic_get(everything, auto_ack=True))[0] is not None:
            originals.append(int(got[2]))
        assert sorted(originals) == list(range(100))  # non-exclusive: the originals go on
        assert depth(LOCAL, outbox) == 0  # everything was shovelled and acked
        assert sc.terminate() == 0
    finally:
        if sc.proc.poll() is None:
            sc.proc.kill()
        for name in (outbox, f"rtroute.ingress.{orders}"):
            ch.queue_delete(name)
        for name in (orders, f"{orders}.bindings"):
            ch.exchange_delete(name)
        local.close()
        remote_conn = pika.BlockingConnection(pika.URLParameters(node2.uri))
        remote_conn.channel().queue_delete(remote)
        remote_conn.close()
