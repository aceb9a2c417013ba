"""The sidecar under test runs as a real `rtroute run` process, so that it can be killed -9."""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pika
import pytest

from rtroute.amqp.uri import management_url

from ..conftest import BROKER_URI, MANAGEMENT_URI, wait_for
from ..processes import RtrouteProcess


def broker_args(args: list[str]) -> list[str]:
    """The options that point `rtroute run ARGS` at the broker under test: ``--uri`` unless
    a config file (which names it: see :func:`broker_toml`) or ARGS do, and
    ``--management-uri`` when the one the sidecar derives from the URI is not that broker's."""
    if "-c" in args or "--config" in args or "--uri" in args:
        return []
    extra = ["--uri", BROKER_URI]
    if MANAGEMENT_URI.rstrip("/") != management_url(BROKER_URI).rstrip("/"):
        extra += ["--management-uri", MANAGEMENT_URI]
    return extra


def broker_toml() -> str:
    """The ``[broker]`` table of a config file for the broker under test."""
    return f'[broker]\nuri = "{BROKER_URI}"\nmanagement_uri = "{MANAGEMENT_URI}"\n'


class SidecarProcess(RtrouteProcess):
    """One `rtroute run` process serving some exchanges, with its /status endpoint."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.name = f"rtroute-test-sidecar-{uuid.uuid4().hex[:8]}"
        super().__init__("rtroute.cli", ["run", *args, *broker_args(args), "--name", self.name],
                         log)

    def exchange(self, name: str) -> dict:
        st = self.status() or {}
        return next((e for e in st.get("exchanges", []) if e["name"] == name), {})

    def wait_running(self, name: str, bindings: int | None = None, timeout: float = 20) -> dict:
        def ready() -> Any:
            if self.proc.poll() is not None:
                pytest.fail(f"sidecar exited with {self.proc.returncode}:\n{self.log()}")
            ex = self.exchange(name)
            ok = ex.get("state") == "running" and (
                bindings is None or ex.get("bindings_known") == bindings)
            return ex if ok else None

        return wait_for(ready, timeout)


@pytest.fixture
def sidecars(tmp_path, broker_uri):
    """``start(args) -> SidecarProcess``; every process is stopped at teardown."""
    started: list[SidecarProcess] = []

    def start(*args: str) -> SidecarProcess:
        sc = SidecarProcess(list(args), tmp_path / f"sidecar-{len(started)}.log")
        started.append(sc)
        RUNNING.append(sc)
        return sc

    yield start
    for sc in started:
        sc.stop()
        RUNNING.remove(sc)


@pytest.fixture
def channel(broker_uri):
    conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
    ch = conn.channel()
    yield ch
    if conn.is_open:
        conn.close()


@pytest.fixture
def managed(channel):
    """``managed() -> name``: a fresh managed exchange name; its broker objects go at teardown."""
    names: list[str] = []
    queues: list[str] = []

    def new(label: str = "x") -> str:
        name = f"rtroute-test.{label}.{uuid.uuid4().hex[:8]}"
        names.append(name)
        return name

    new.queues = queues  # type: ignore[attr-defined]
    yield new
    delete_layouts(names, queues)


def delete_layouts(names: list[str], queues: list[str] = ()) -> None:
    """Deletes the sidecar layout of each managed exchange NAME (its ingress and shard queues,
    NAME, NAME.bindings, NAME.shards) and the ``queues``, on the broker under test."""
    conn = pika.BlockingConnection(pika.URLParameters(BROKER_URI))
    ch = conn.channel()
    for name in names:
        for obj in (f"rtroute.ingress.{name}", *(f"rtroute.shard.{name}.{i}" for i in range(8))):
            ch.queue_delete(obj)
        for ex in (name, f"{name}.bindings", f"{name}.shards"):
            ch.exchange_delete(ex)
    for q in queues:
        ch.queue_delete(q)
    conn.close()


def drain(channel, queue: str) -> list[tuple[Any, Any, bytes]]:
    """Every message now in ``queue`` (acked)."""
    got = []
    while True:
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return got
        got.append((method, props, body))


def drain_many(channel, queue: str) -> list[tuple[Any, Any, bytes]]:
    """Every message now in ``queue`` (acked), as :func:`drain` gives them, for queues of
    thousands: consumed with a prefetch window and acked in batches, not one basic.get round
    trip each (40,000 of them took 8-10 s)."""
    expected = depth(channel, queue)
    got: list[tuple[Any, Any, bytes]] = []
    if expected:
        channel.basic_qos(prefetch_count=1000)
        for method, props, body in channel.consume(queue, inactivity_timeout=10):
            if method is None:
                break
            got.append((method, props, body))
            if len(got) % 500 == 0 or len(got) >= expected:
                channel.basic_ack(method.delivery_tag, multiple=True)
            if len(got) >= expected:
                break
        if got and len(got) % 500 and len(got) < expected:  # ended by the inactivity timeout
            channel.basic_ack(got[-1][0].delivery_tag, multiple=True)
        channel.cancel()  # what it holds beyond those (none, once settled) goes back
    return got + drain(channel, queue)


def publish_in_batches(uri: str, exchange: str, messages: Iterable[tuple[str, bytes, Any]],
                       batch: int = 500) -> None:
    """Publishes ``(routing_key, body, properties)`` in transactions of ``batch``: each
    commit-ok says the broker took them, as a confirm per message would, at one round trip a
    batch (20,000 confirmed one by one took 30 s)."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        ch.tx_select()
        for n, (key, body, properties) in enumerate(messages, 1):
            ch.basic_publish(exchange, key, body, properties)
            if n % batch == 0:
                ch.tx_commit()
        ch.tx_commit()
    finally:
        if conn.is_open:
            conn.close()


def depth(channel, queue: str) -> int:
    return channel.queue_declare(queue, passive=True).method.message_count


#: the sidecars of the running test (the ``sidecars`` fixture keeps it)
RUNNING: list[SidecarProcess] = []


def _settled() -> bool | None:
    """No running sidecar of this test has a message in flight (every ingress message it took
    is settled: its republishes and copies are in their queues). None: one's /status does not
    answer (it wants a token), so nobody can tell."""
    for sc in RUNNING:
        if sc.proc.poll() is not None:
            continue
        status = sc.status()
        if status is None:
            return None
        if any(ex.get("in_flight") for ex in status.get("exchanges", [])):
            return False
    return True


#: how long stragglers (duplicates) may take to land after the count is reached, at most
STRAGGLERS = 0.3


def wait_depth(channel, queue: str, count: int, timeout: float = 30) -> None:
    """Until ``queue`` holds ``count`` messages, then until the test's sidecars have nothing in
    flight (a duplicate on its way has landed before the test counts), for :data:`STRAGGLERS`
    seconds at most: a test may hold a message in flight on purpose (a hanging transformer)."""
    wait_for(lambda: depth(channel, queue) >= count, timeout)
    deadline = time.monotonic() + STRAGGLERS
    while not _settled() and time.monotonic() < deadline:
        time.sleep(0.02)
