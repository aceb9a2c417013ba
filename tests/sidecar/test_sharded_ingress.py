"""Sharded ingress on the broker under test (3.10.8 and 4.0.5 alike): 4 shards, 2 replicas.

The first replica takes every shard; when the second one starts, the first gives two away
(without a duplicate, keeping each routing key's order); when the first is killed with
``kill -9``, the second consumes all four within the bound printed. Nothing is lost; a
duplicate can only be one the killed replica had republished but not acked (at most its
prefetch per shard).
"""
from __future__ import annotations

import threading
import time
import uuid

import pika
import pytest

from ..conftest import BROKER_URI, wait_for
from .conftest import broker_toml

pytestmark = pytest.mark.slow

SHARDS = 4
PREFETCH = 100
KEYS = [f"k{i}" for i in range(32)]


def sharded_config(tmp_path, name: str, kind: str, shards: int, prefetch: int = 1000):
    """A config file serving exchange ``name`` with a sharded ingress."""
    config = tmp_path / "rtroute.toml"
    config.write_text(broker_toml() + f'[[exchange]]\nname = "{name}"\nkind = "{kind}"\n'
                      f"shards = {shards}\nprefetch = {prefetch}\n")
    return config


def active_shards(sidecar, name: str) -> list[int]:
    """The shards the replica's last look at the management API shows it active on."""
    shards = sidecar.exchange(name).get("shards") or []
    return [i for i, s in enumerate(shards) if s.get("active")]


def received_by_shard(sidecar, name: str) -> list[int]:
    shards = sidecar.exchange(name).get("shards") or []
    return [s.get("received", 0) for s in shards]


class Publisher(threading.Thread):
    """Publishes persistent messages with confirms, round robin over KEYS, numbered per key,
    ``rate`` per second, until stopped."""

    def __init__(self, name: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.name_ = name
        self.rate = rate
        self.sent: list[tuple[str, int]] = []
        self.stop_event = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            connection = pika.BlockingConnection(pika.URLParameters(BROKER_URI))
            ch = connection.channel()
            ch.confirm_delivery()
            sequence = dict.fromkeys(KEYS, 0)
            started = time.monotonic()
            n = 0
            while not self.stop_event.is_set():
                key = KEYS[n % len(KEYS)]
                sequence[key] += 1
                ch.basic_publish(self.name_, key, f"{key}:{sequence[key]}".encode(),
                                 pika.BasicProperties(delivery_mode=2))
                self.sent.append((key, sequence[key]))
                n += 1
                ahead = started + n / self.rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            connection.close()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def test_two_replicas_share_four_shards_and_the_survivor_takes_all(
        sidecars, channel, managed, tmp_path):
    name = managed("shards")
    config = sharded_config(tmp_path, name, "rtopic", SHARDS, PREFETCH)
    a = sidecars("-c", str(config))
    a.wait_running(name)
    queue = f"rtroute-test.shards.{uuid.uuid4().hex[:8]}"
    managed.queues.append(queue)
    channel.queue_declare(queue, durable=True)
    for key in KEYS:
        channel.queue_bind(queue, f"{name}.bindings", key)
    wait_for(lambda: a.exchange(name).get("bindings_known") == len(KEYS), 20)
    # alone, the first replica is active on every shard
    wait_for(lambda: active_shards(a, name) == list(range(SHARDS)), 30)

    publisher = Publisher(name, rate=1500)
    publisher.start()
    b = sidecars("-c", str(config))
    b.wait_running(name)
    started = time.monotonic()
    wait_for(lambda: len(active_shards(a, name)) == 2 and len(active_shards(b, name)) == 2, 60)
    balanced_after = time.monotonic() - started
    # both route: each one's shards deliver to it
    wait_for(lambda: sum(received_by_shard(b, name)) > 100, 20)
    handed = set(active_shards(b, name))
    assert not handed & set(active_shards(a, name))

    # kill -9 of the first: the second consumes every shard
    before = received_by_shard(b, name)
    a.kill9()
    killed_at = time.monotonic()
    wait_for(lambda: all(now > then for now, then in zip(received_by_shard(b, name),
                                                         before)), 30, interval=0.05)
    taken_over_after = time.monotonic() - killed_at
    time.sleep(1)
    publisher.stop_event.set()
    publisher.join(30)
    assert publisher.error is None, publisher.error
    wait_for(lambda: b.exchange(name).get("in_flight") == 0, 30)
    time.sleep(1)

    got: list[tuple[str, int]] = []
    while True:
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            break
        key, number = body.decode().split(":")
        got.append((key, int(number)))
    sent = publisher.sent
    missing = set(sent) - set(got)
    assert not missing, f"{len(missing)} of {len(sent)} messages lost"
    duplicates = len(got) - len(set(got))
    assert duplicates <= SHARDS * PREFETCH
    # per routing key, the first copy of each message comes in publish order
    seen: set[tuple[str, int]] = set()
    last = dict.fromkeys(KEYS, 0)
    for key, number in got:
        if (key, number) in seen:
            continue
        seen.add((key, number))
        assert number > last[key], f"{key}: {number} after {last[key]}"
        last[key] = number
    b_status = b.exchange(name)
    print(f"\nsharded ingress ({SHARDS} shards, 2 replicas): balanced "
          f"{balanced_after:.1f} s after the second started; after kill -9 of the first, "
          f"the second consumed all {SHARDS} shards within {taken_over_after:.2f} s; "
          f"{len(sent)} sent, 0 lost, {duplicates} duplicates; the survivor routed "
          f"{b_status.get('received')}")


def test_shard_queues_on_the_broker(sidecars, channel, managed, tmp_path):
    """The layout: NAME -> NAME.shards (x-consistent-hash) -> one queue per shard, each a
    single-active-consumer queue; one routing key always lands on the same shard."""
    name = managed("layout")
    config = sharded_config(tmp_path, name, "topic", 3)
    sc = sidecars("-c", str(config))
    sc.wait_running(name)
    sc.terminate()
    try:
        for i in range(3):
            channel.queue_declare(f"rtroute.shard.{name}.{i}", passive=True)
        channel.confirm_delivery()
        for _ in range(5):
            channel.basic_publish(name, "same.key", b"x")
        for _ in range(30):
            channel.basic_publish(name, f"key.{uuid.uuid4().hex}", b"y")
        depths = [channel.queue_declare(f"rtroute.shard.{name}.{i}", passive=True)
                  .method.message_count for i in range(3)]
        assert sum(depths) == 35
        assert all(d > 0 for d in depths)  # 30 random keys spread over every shard
        # the five with one key are in one shard, in order
        found = []
        for i in range(3):
            while True:
                method, _p, _body = channel.basic_get(f"rtroute.shard.{name}.{i}", auto_ack=True)
                if method is None:
                    break
                if method.routing_key == "same.key":
                    found.append(i)
        assert len(found) == 5 and len(set(found)) == 1
    finally:
        channel.exchange_delete(f"{name}.shards")
        for i in range(3):
            channel.queue_delete(f"rtroute.shard.{name}.{i}")
