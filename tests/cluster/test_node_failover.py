"""The sidecar on a 3-node cluster with a quorum ingress queue: ``kill -9`` of the node it is
connected to, and separately of the node leading its ingress queue, each with 20k persistent
messages in flight. Nothing is lost; duplicates stay within the prefetch (at-least-once: the
deliveries unacked at the loss come again); the sidecar serves again within the bound printed
(the README's "On a cluster" figures come from these runs).

The cluster's nodes are RabbitMQ 3.10.8 from the host's packages whatever the broker under
test (the 4.x node is one node in a chroot); quorum queues and their failover are the same
mechanism on 4.x.
"""
from __future__ import annotations

import collections
import threading
import time
import uuid
from pathlib import Path

import pika
import pytest

from rtroute.amqp.uri import parse_uri

from ..broker_nodes import LocalCluster, LocalNode
from ..conftest import wait_for
from ..sidecar.conftest import SidecarProcess

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.island]

COUNT = 20_000
PREFETCH = 500
KEYS = {"q1": "s.a.x", "q2": "s.b.x"}


def write_config(path: Path, name: str, nodes: list[LocalNode], cluster: LocalCluster) -> Path:
    uris = ", ".join(f'"{node.uri}"' for node in nodes)
    apis = ", ".join(f'"{uri}"' for uri in cluster.management_uris)
    path.write_text(f"""
[broker]
uri = [{uris}]
management_uri = [{apis}]

[[exchange]]
name = "{name}"
kind = "rtopic"
ingress_queue_type = "quorum"
prefetch = {PREFETCH}
""")
    return path


def connected_node(sidecar: SidecarProcess, cluster: LocalCluster) -> LocalNode:
    """The node the sidecar's connection is on (its /status says which URI)."""
    status = wait_for(lambda: (sidecar.status() or {}).get("connected_to"), 20)
    port = parse_uri(status, strict=False).port
    return next(node for node in cluster.nodes if node.amqp_port == port)


def channel_on(node: LocalNode):
    connection = pika.BlockingConnection(pika.URLParameters(node.uri))
    return connection, connection.channel()


def declare_destinations(node: LocalNode, name: str) -> dict[str, str]:
    connection, ch = channel_on(node)
    queues = {}
    for label, key in KEYS.items():
        queue = f"rtroute-test.cluster.{label}.{uuid.uuid4().hex[:6]}"
        ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
        ch.queue_bind(queue, f"{name}.bindings", key)
        queues[label] = queue
    connection.close()
    return queues


def publish(node: LocalNode, name: str, done: threading.Event, errors: list) -> None:
    try:
        connection, ch = channel_on(node)
        ch.confirm_delivery()
        for i in range(COUNT):
            ch.basic_publish(name, "s.*.x", str(i).encode(),
                             pika.BasicProperties(delivery_mode=2))
        connection.close()
    except Exception as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)
    finally:
        done.set()


def depth(node: LocalNode, queue: str) -> int:
    connection, ch = channel_on(node)
    try:
        return ch.queue_declare(queue, passive=True).method.message_count
    finally:
        connection.close()


def ids_in(node: LocalNode, queue: str) -> collections.Counter:
    """Every message in ``queue`` (consumed and acked), counted by id."""
    connection, ch = channel_on(node)
    got: collections.Counter = collections.Counter()
    ch.basic_qos(prefetch_count=2000)
    for method, _props, body in ch.consume(queue, inactivity_timeout=2):
        if method is None:
            break
        got[int(body)] += 1
        if method.delivery_tag % 1000 == 0:
            ch.basic_ack(method.delivery_tag, multiple=True)
    ch.cancel()
    ch.basic_ack(0, multiple=True)
    connection.close()
    return got


def serving_again_after_kill(survivor: LocalNode, queue: str, killed_at: float,
                             depth_at_kill: int) -> float:
    """Seconds from the kill until 1,000 more messages reached ``queue``: more than the
    prefetch (500) that may have been on their way at the kill, so new routing, whether or not
    the sidecar had to reconnect."""
    wait_for(lambda: depth(survivor, queue) >= depth_at_kill + 1000, 120, interval=0.05)
    return time.monotonic() - killed_at


def run_kill_scenario(tmp_path: Path, cluster: LocalCluster, name: str, sidecar_nodes,
                      victim_of) -> dict:
    """Starts the sidecar on ``sidecar_nodes``, publishes COUNT messages from a node that
    survives, kills ``victim_of(sidecar, ingress_leader)`` once a quarter has arrived, and
    checks every message arrives in both queues."""
    config = write_config(tmp_path / "rtroute.toml", name, sidecar_nodes, cluster)
    sidecar = SidecarProcess(["-c", str(config)], tmp_path / "sidecar.log")
    try:
        sidecar.wait_running(name, timeout=60)
        on = connected_node(sidecar, cluster)
        leader = cluster.node_named(cluster.nodes[0].management().queue(
            f"rtroute.ingress.{name}")["leader"])
        victim = victim_of(on, leader)
        survivor = next(n for n in cluster.nodes if n is not victim)
        queues = declare_destinations(survivor, name)
        sidecar.wait_running(name, bindings=2, timeout=30)
        done, errors = threading.Event(), []
        threading.Thread(target=publish, args=(survivor, name, done, errors),
                         daemon=True).start()
        wait_for(lambda: depth(survivor, queues["q1"]) > COUNT // 4, 120)
        assert depth(survivor, queues["q1"]) < COUNT - 5000, "too late: little in flight"
        depth_at_kill = depth(survivor, queues["q1"])
        killed_at = time.monotonic()
        victim.kill9()
        back_after = serving_again_after_kill(survivor, queues["q1"], killed_at, depth_at_kill)
        assert done.wait(180) and not errors, errors
        for queue in queues.values():
            wait_for(lambda q=queue: depth(survivor, q) >= COUNT, 180, interval=0.2)
        time.sleep(1)  # duplicates still on their way
        result = {"sidecar_on": on.name, "ingress_leader": leader.name, "killed": victim.name,
                  "serving_again_s": round(back_after, 2),
                  "reconnects": (sidecar.status() or {}).get("connects", 0) - 1}
        for label, queue in queues.items():
            got = ids_in(survivor, queue)
            assert set(got) == set(range(COUNT)), f"{label}: lost {COUNT - len(got)}"
            duplicates = sum(n - 1 for n in got.values())
            assert duplicates <= PREFETCH, (label, duplicates)
            result[f"duplicates_{label}"] = duplicates
        print(f"\ncluster failover: {result}")
        return result
    finally:
        sidecar.terminate()
        for node in cluster.nodes:
            if not node.running():
                node.start()


def test_kill_9_of_the_node_the_sidecar_is_connected_to_loses_nothing(tmp_path, healthy):
    name = f"rtroute-test.cluster.conn.{uuid.uuid4().hex[:6]}"
    result = run_kill_scenario(tmp_path, healthy, name, healthy.nodes,
                               victim_of=lambda on, _leader: on)
    assert result["killed"] == result["sidecar_on"]


def test_kill_9_of_the_ingress_queues_leader_loses_nothing(tmp_path, healthy):
    name = f"rtroute-test.cluster.leader.{uuid.uuid4().hex[:6]}"
    first, others = healthy.nodes[0], healthy.nodes[1:]
    # the ingress queue is declared by the sidecar: on first's node, its leader is there
    # (quorum queues are led by the declaring client's node); then serve from the others
    prepare = SidecarProcess(["-c", str(write_config(tmp_path / "first.toml", name, [first],
                                                     healthy))], tmp_path / "first.log")
    prepare.wait_running(name, timeout=60)
    prepare.terminate()
    result = run_kill_scenario(tmp_path, healthy, name, others,
                               victim_of=lambda _on, leader: leader)
    assert result["killed"] == result["ingress_leader"] == first.name
    assert result["sidecar_on"] != first.name
