"""The shipped examples run as shipped against the local broker: `rtroute run -c
examples/rtroute.toml` serves every exchange and shovel, `rtroute shovel run -c
examples/shovel.toml` runs every shovel, and `rtroute config check` accepts every example.
Their objects are deleted before and after (they use fixed names, as a user's config would)."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pika
import pytest

from .conftest import BROKER_URI, DEFAULT_URI

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MANAGED = ("logs", "priceUpdates", "orders.eu", "orders.us", "priceForwarding")
EXCHANGES = (*MANAGED, *(f"{n}.bindings" for n in MANAGED), "logs.unroutable", "my_fanout",
             "my_direct", "orders", "audit", "audit.archive", "jobs")
QUEUES = (*(f"rtroute.ingress.{n}" for n in MANAGED), "orders", "orders.dc2", "audit.shovel",
          "legacy.jobs", "shovel.orders-to-dc2")


def _clean() -> None:
    connection = pika.BlockingConnection(pika.URLParameters(DEFAULT_URI))
    channel = connection.channel()
    for queue in QUEUES:
        channel.queue_delete(queue)
    for exchange in EXCHANGES:
        channel.exchange_delete(exchange)
    connection.close()


@pytest.fixture
def local_broker(broker_uri):
    if BROKER_URI != DEFAULT_URI:
        pytest.skip("the examples name the local broker, 127.0.0.1:5672")
    _clean()
    yield
    _clean()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(args: list[str], until: callable, timeout: float = 30) -> dict:
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "rtroute.cli", *args, "--http",
                             f"127.0.0.1:{port}"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    status: dict = {}
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[0]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as r:
                    status = json.load(r)
            except OSError:
                status = {}
            if status and until(status):
                return status
            time.sleep(0.2)
        pytest.fail(f"not ready in {timeout} s: {status}")
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0]
        assert proc.returncode == 0, output
        assert "Traceback" not in output
    return status


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.toml")
                                         if p.name != "bindings.toml"))  # rtroute route's
def test_every_example_passes_config_check(name):
    done = subprocess.run([sys.executable, "-m", "rtroute.cli", "config", "check",
                           str(EXAMPLES / name)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.broker
def test_the_rtroute_example_serves_every_exchange_and_shovel(local_broker):
    def ready(status: dict) -> bool:
        return status["healthy"] and all(e["state"] == "running" for e in status["exchanges"]) \
            and all(s["state"] == "running" for s in status["shovels"])

    status = _serve(["run", "-c", str(EXAMPLES / "rtroute.toml")], ready)
    assert {e["name"] for e in status["exchanges"]} == set(MANAGED)
    assert len(status["shovels"]) == 2


@pytest.mark.broker
def test_the_shovel_example_runs_every_shovel(local_broker):
    def ready(status: dict) -> bool:
        states = {s["name"]: s["state"] for s in status["shovels"]}
        return status["healthy"] and states.get("drain-legacy") == "terminated" and all(
            state == "running" for name, state in states.items() if name != "drain-legacy")

    status = _serve(["shovel", "run", "-c", str(EXAMPLES / "shovel.toml")], ready)
    assert len(status["shovels"]) == 4
