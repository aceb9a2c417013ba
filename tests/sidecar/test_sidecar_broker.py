"""The sidecar end to end over the real broker: delivery semantics, live bindings, faults."""
from __future__ import annotations

import collections
import threading
import time
import uuid
from urllib.parse import quote

import pika
import pytest

from rtroute.amqp import parse_uri
from rtroute.sidecar.demo import PLUGIN_QUEUES, PLUGIN_README_TABLE

from ..conftest import BROKER_URI, management_client, wait_for
from .conftest import broker_toml, depth, drain, drain_many, publish_in_batches, wait_depth

pytestmark = pytest.mark.broker

PLUGIN = PLUGIN_QUEUES  # the rtopic plugin README's queues A-F and their keys
README_EXAMPLES = PLUGIN_README_TABLE


def bind_queues(channel, managed, exchange, bindings):
    """Declares a queue per destination and binds it to ``exchange.bindings``."""
    queues = {}
    for dest, key in bindings:
        if dest not in queues:
            queues[dest] = f"{exchange}.{dest}"
            channel.queue_declare(queues[dest], durable=True)
            managed.queues.append(queues[dest])
        channel.queue_bind(queues[dest], f"{exchange}.bindings", key)
    return queues


def start_sidecar(sidecars, channel, name, *extra):
    sc = sidecars("--rtopic", name, *extra)
    sc.wait_running(name)
    return sc


def test_plugin_readme_scenario_queue_by_queue(sidecars, channel, managed):
    name = managed("readme")
    sc = start_sidecar(sidecars, channel, name)
    queues = bind_queues(channel, managed, name, PLUGIN.items())
    sc.wait_running(name, bindings=6)
    channel.confirm_delivery()
    for i, (key, _) in enumerate(README_EXAMPLES):
        channel.basic_publish(name, key, str(i).encode())
    total = sum(len(expected) for _, expected in README_EXAMPLES)
    wait_for(lambda: sum(depth(channel, q) for q in queues.values()) >= total, 20)
    time.sleep(0.3)
    got = {dest: sorted(int(b) for _, _, b in drain(channel, q)) for dest, q in queues.items()}
    for dest in PLUGIN:
        expected = [i for i, (_, who) in enumerate(README_EXAMPLES) if dest in who]
        assert got[dest] == expected, dest


def test_delivery_keeps_body_properties_and_routing_key_and_hides_bcc(sidecars, channel,
                                                                       managed):
    name = managed("props")
    sc = start_sidecar(sidecars, channel, name)
    queues = bind_queues(channel, managed, name, [
        ("cc", "a.cc"), ("bcc", "a.bcc"), ("main", "a.main"), ("main", "b.main")])
    sc.wait_running(name, bindings=4)
    channel.confirm_delivery()
    props = pika.BasicProperties(
        content_type="application/json", content_encoding="utf-8", delivery_mode=2, priority=3,
        correlation_id="corr-1", reply_to="replies", message_id="m-1", timestamp=1700000000,
        type="t", app_id="app", expiration="60000",
        headers={"CC": ["a.cc"], "x-rtroute-bcc": ["a.bcc", "b.main"], "keep": "me"})
    channel.basic_publish(name, "a.main", b'{"x": 1}', props)
    for q in queues.values():
        wait_depth(channel, q, 1)
    for dest, q in queues.items():
        (method, got, body), = drain(channel, q)  # one copy each, "main" matched twice
        assert body == b'{"x": 1}'
        assert method.routing_key == "a.main"  # as published
        assert got.headers == {"CC": ["a.cc"], "keep": "me"}, dest  # BCC alias gone, CC kept
        for attr in ("content_type", "content_encoding", "delivery_mode", "priority",
                     "correlation_id", "reply_to", "message_id", "timestamp", "type", "app_id"):
            assert getattr(got, attr) == getattr(props, attr), attr


def test_exchange_to_exchange_binding(sidecars, channel, managed):
    name = managed("e2e")
    sc = start_sidecar(sidecars, channel, name)
    downstream = f"{name}.downstream"
    channel.exchange_declare(downstream, "fanout", auto_delete=True)
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(queue, downstream)
    channel.exchange_bind(downstream, f"{name}.bindings", "audit.all")
    sc.wait_running(name, bindings=1)
    channel.confirm_delivery()
    channel.basic_publish(name, "audit.*", b"via-exchange")
    wait_depth(channel, queue, 1)
    assert [b for _, _, b in drain(channel, queue)] == [b"via-exchange"]


def test_bindings_added_and_removed_while_running(sidecars, channel, managed):
    name = managed("live")
    sc = start_sidecar(sidecars, channel, name)
    queues = bind_queues(channel, managed, name, [("q1", "k.one")])
    sc.wait_running(name, bindings=1)
    channel.confirm_delivery()
    channel.basic_publish(name, "k.*", b"1")
    wait_depth(channel, queues["q1"], 1)
    queues.update(bind_queues(channel, managed, name, [("q2", "k.two")]))
    sc.wait_running(name, bindings=2)
    channel.basic_publish(name, "k.*", b"2")
    wait_depth(channel, queues["q2"], 1)
    channel.queue_unbind(queues["q1"], f"{name}.bindings", "k.one")
    sc.wait_running(name, bindings=1)
    channel.basic_publish(name, "k.*", b"3")
    wait_depth(channel, queues["q2"], 2)
    assert [b for _, _, b in drain(channel, queues["q1"])] == [b"1", b"2"]
    channel.queue_delete(queues["q2"])  # a deleted queue stops being a destination
    sc.wait_running(name, bindings=0)
    channel.basic_publish(name, "k.*", b"4")
    wait_for(lambda: sc.exchange(name).get("unroutable") == 1, 10)


def test_unroutable_goes_to_the_alternate_exchange(sidecars, channel, managed, tmp_path):
    name = managed("ae")
    ae = f"{name}.unroutable"
    config = tmp_path / "rtroute.toml"
    config.write_text(
        f'{broker_toml()}\n[[exchange]]\nname = "{name}"\nkind = "rtopic"\n'
        f'alternate_exchange = "{ae}"\n')
    sc = sidecars("-c", str(config))
    sc.wait_running(name)
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(queue, ae)
    channel.confirm_delivery()
    channel.basic_publish(name, "nobody.#", b"lost?", pika.BasicProperties(
        headers={"x-rtroute-bcc": ["nobody.else"]}))
    wait_depth(channel, queue, 1)
    ((method, props, body),) = drain(channel, queue)
    assert body == b"lost?" and method.routing_key == "nobody.#"
    assert "x-rtroute-bcc" not in (props.headers or {})
    assert sc.exchange(name)["unroutable"] == 1
    channel.exchange_delete(ae)


def test_malformed_messages_are_dead_lettered_and_the_sidecar_goes_on(sidecars, channel,
                                                                        managed):
    name = managed("dead")
    sc = start_sidecar(sidecars, channel, name)
    queues = bind_queues(channel, managed, name, [("ok", "a.b")])
    sc.wait_running(name, bindings=1)
    marker = uuid.uuid4().hex
    channel.confirm_delivery()
    channel.basic_publish(name, "a.b", b"bad", pika.BasicProperties(
        message_id=marker, headers={"x-rtroute-bcc": "a.b"}))  # a string, not an array
    channel.basic_publish(name, "a.*", b"good")
    wait_depth(channel, queues["ok"], 1)
    assert [b for _, _, b in drain(channel, queues["ok"])] == [b"good"]

    def dead_letter():
        for method, props, body in drain(channel, "rtroute.dead"):
            if props.message_id == marker:
                return props
        return None

    props = wait_for(dead_letter, 10)
    assert "x-rtroute-bcc" in props.headers["x-rtroute-error"]
    assert props.headers["x-rtroute-exchange"] == name
    assert sc.exchange(name)["dead_lettered"] == 1 and sc.proc.poll() is None


def publish_many(name: str, count: int, key: str, done: threading.Event) -> None:
    persistent = pika.BasicProperties(delivery_mode=2)
    publish_in_batches(BROKER_URI, name, ((key, str(i).encode(), persistent)
                                          for i in range(count)))
    done.set()


def ids_in(channel, queue):
    return collections.Counter(int(b) for _, _, b in drain_many(channel, queue))


@pytest.mark.slow
def test_kill_9_mid_stream_loses_nothing(sidecars, channel, managed):
    name = managed("kill9")
    count = 20_000
    sc = start_sidecar(sidecars, channel, name, "--prefetch", "500")
    queues = bind_queues(channel, managed, name, [("q1", "s.a.x"), ("q2", "s.b.x")])
    sc.wait_running(name, bindings=2)
    done = threading.Event()
    threading.Thread(target=publish_many, args=(name, count, "s.*.x", done), daemon=True).start()
    wait_for(lambda: depth(channel, queues["q1"]) > count // 4, 60)
    sc.kill9()
    survivor = start_sidecar(sidecars, channel, name, "--prefetch", "500")
    assert done.wait(120)
    for q in queues.values():
        wait_depth(channel, q, count, timeout=120)
    for q in queues.values():
        got = ids_in(channel, q)
        assert set(got) == set(range(count))  # nothing lost
        duplicates = sum(n - 1 for n in got.values())
        # only messages in flight at the kill can come twice: prefetch bounds them
        assert duplicates <= 500, duplicates
    assert survivor.exchange(name)["redelivered"] <= 500


def test_broker_side_close_reconnects_and_goes_on(sidecars, channel, managed, mgmt):
    name = managed("close")
    sc = start_sidecar(sidecars, channel, name)
    queues = bind_queues(channel, managed, name, [("q", "a")])
    sc.wait_running(name, bindings=1)
    wait_for(lambda: mgmt.close_connections_named(sc.name, "test: forced close"), 20)
    wait_for(lambda: (sc.status() or {}).get("connects", 0) >= 2, 30)
    sc.wait_running(name)
    channel.confirm_delivery()
    channel.basic_publish(name, "#", b"after")
    wait_depth(channel, queues["q"], 1)
    assert sc.proc.poll() is None


def test_bodies_of_every_size_cross_intact_once_per_queue(sidecars, channel, managed):
    name = managed("sizes")
    sc = start_sidecar(sidecars, channel, name)
    queues = bind_queues(channel, managed, name, [("one", "s.one"), ("two", "s.two")])
    sc.wait_running(name, bindings=2)
    channel.confirm_delivery()
    frame = 131072 - 8  # the body bytes one frame holds at RabbitMQ's default frame_max
    sizes = [0, 1, frame - 1, frame, frame + 1, 3 * frame + 17, 4 * 1024 * 1024]
    bodies = [bytes((i + n) % 251 for n in range(size)) for i, size in enumerate(sizes)]
    for body in bodies:
        channel.basic_publish(name, "s.*", body)
    for q in queues.values():
        wait_depth(channel, q, len(bodies))
        assert [b for _, _, b in drain(channel, q)] == bodies
    assert sc.exchange(name)["dead_lettered"] == 0


def test_ingress_queue_deleted_under_the_sidecar_is_declared_again(sidecars, channel, managed):
    name = managed("requeue")
    sc = start_sidecar(sidecars, channel, name)
    queues = bind_queues(channel, managed, name, [("q", "a")])
    sc.wait_running(name, bindings=1)
    channel.queue_delete(f"rtroute.ingress.{name}")
    wait_for(lambda: (sc.status() or {}).get("connects", 0) >= 2, 30)
    sc.wait_running(name)
    channel.confirm_delivery()
    channel.basic_publish(name, "#", b"after")
    wait_depth(channel, queues["q"], 1)
    assert "cancelled the consumer" in sc.log()
    assert sc.proc.poll() is None


def test_second_sidecar_is_a_hot_standby(sidecars, channel, managed):
    name = managed("standby")
    first = start_sidecar(sidecars, channel, name)
    second = start_sidecar(sidecars, channel, name)
    queues = bind_queues(channel, managed, name, [("q", "a.b")])
    first.wait_running(name, bindings=1)
    second.wait_running(name, bindings=1)
    channel.confirm_delivery()
    for i in range(50):
        channel.basic_publish(name, "a.*", str(i).encode())
    wait_depth(channel, queues["q"], 50)
    # single active consumer: exactly one of them did the work
    received = sorted([first.exchange(name)["received"], second.exchange(name)["received"]])
    assert received == [0, 50]
    active, standby = (first, second) if first.exchange(name)["received"] else (second, first)
    active.kill9()
    for i in range(50, 100):
        channel.basic_publish(name, "a.*", str(i).encode())
    wait_depth(channel, queues["q"], 100)
    assert set(ids_in(channel, queues["q"])) == set(range(100))
    assert standby.exchange(name)["received"] >= 50


def test_sigterm_drains_and_exits_cleanly(sidecars, channel, managed):
    name = managed("sigterm")
    sc = start_sidecar(sidecars, channel, name)
    queues = bind_queues(channel, managed, name, [("q", "a")])
    sc.wait_running(name, bindings=1)
    done = threading.Event()
    threading.Thread(target=publish_many, args=(name, 3000, "a", done), daemon=True).start()
    wait_for(lambda: depth(channel, queues["q"]) > 500, 30)
    assert sc.terminate() == 0
    last = sc.log().strip().splitlines()[-1]  # the last word is that it stopped, and how
    assert "sidecar stopped: " in last and "messages received" in last, last
    assert done.wait(60)
    start_sidecar(sidecars, channel, name)
    wait_depth(channel, queues["q"], 3000, timeout=60)
    assert set(ids_in(channel, queues["q"])) == set(range(3000))


@pytest.mark.slow
def test_hostile_pattern_against_20k_bindings_is_routed_once_per_queue(sidecars, channel,
                                                                          managed):
    vhost = parse_uri(BROKER_URI).vhost
    name = managed("hostile")
    sc = start_sidecar(sidecars, channel, name)
    channel.exchange_declare(f"{name}.bindings", passive=True)  # the sidecar declared it
    queues = [f"{name}.q{i}" for i in range(100)]
    for q in queues:
        channel.queue_declare(q, durable=True)
        managed.queues.append(q)
    # 20k, not 100k: creating a binding costs the broker ~0.2-0.6 ms (100k take a minute);
    # tests/sidecar/test_router.py routes the same pattern against 100k bindings. One
    # definitions import makes them (5-12 s, against ~50 s for 20k queue.bind round trips)
    # and the sidecar learns them as it learns any binding (events, listing)
    bindings = [{"source": f"{name}.bindings", "vhost": vhost, "destination": queues[i % 100],
                 "destination_type": "queue", "routing_key": f"s{i % 10}.a{i % 7}.m{i}",
                 "arguments": {}} for i in range(20_000)]
    management_client(timeout=120).request(
        "POST", f"definitions/{quote(vhost, safe='')}", {"bindings": bindings})
    sc.wait_running(name, bindings=20_000, timeout=120)
    channel.confirm_delivery()
    channel.basic_publish(name, "#.#.#.#.#", b"everyone")
    channel.basic_publish(name, "s1.#.m11", b"one")
    for q in queues:
        wait_depth(channel, q, 1, timeout=60)  # and the sidecar has nothing in flight
    for i, q in enumerate(queues):
        bodies = [b for _, _, b in drain(channel, q)]
        assert bodies.count(b"everyone") == 1, q
        assert bodies.count(b"one") == (1 if i == 11 else 0), q
    assert sc.proc.poll() is None


def test_name_bindings_type_follows_the_broker_version(sidecars, channel, managed, mgmt,
                                                       broker_version):
    """RabbitMQ 3.x: NAME.bindings is a topic exchange (a direct one scans every binding per
    BCC key there). RabbitMQ 4.x: a direct one (indexed: a BCC publish runs 1.4-1.7x a
    native topic publish at 10k bindings, against 0.6-0.7x through a topic one)."""
    name = managed("kind")
    sc = start_sidecar(sidecars, channel, name)
    queues = bind_queues(channel, managed, name, PLUGIN.items())
    sc.wait_running(name, bindings=6)
    expected = "direct" if broker_version >= (4,) else "topic"
    assert mgmt.exchange(f"{name}.bindings")["type"] == expected
    channel.confirm_delivery()
    channel.basic_publish(name, "#.mod1.info", b"x")
    wait_for(lambda: sum(depth(channel, q) for q in queues.values()) >= 3, 20)
    assert {d for d, q in queues.items() if depth(channel, q)} == set("ACF")


def test_an_existing_name_bindings_keeps_its_type(sidecars, channel, managed, mgmt,
                                                  broker_version):
    """Made before the sidecar with the type the version would not pick (a layout from an
    older RabbitMQ, say): the sidecar keeps it (RabbitMQ cannot change a type) and routes."""
    name = managed("kept")
    other = "topic" if broker_version >= (4,) else "direct"
    channel.exchange_declare(f"{name}.bindings", other, durable=True)
    queues = bind_queues(channel, managed, name, PLUGIN.items())
    sc = start_sidecar(sidecars, channel, name)
    sc.wait_running(name, bindings=6)
    assert mgmt.exchange(f"{name}.bindings")["type"] == other
    channel.confirm_delivery()
    channel.basic_publish(name, "server1.#", b"x")
    wait_for(lambda: sum(depth(channel, q) for q in queues.values()) >= 4, 20)
    assert {d for d, q in queues.items() if depth(channel, q)} == set("ABCE")
