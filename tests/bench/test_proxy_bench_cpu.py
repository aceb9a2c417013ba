"""`rtroute bench proxy` reports the proxy's CPU per message from /proc."""
from __future__ import annotations

import os
import sys

import pytest

from rtroute.bench.proxy import SHAPES, cpu_seconds


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_cpu_seconds_grow_with_the_work_a_process_does():
    before = cpu_seconds(os.getpid())
    total = 0
    while cpu_seconds(os.getpid()) - before < 0.05:
        total += sum(range(10_000))
    assert total > 0


def test_a_process_that_is_gone_has_used_nothing():
    assert cpu_seconds(2 ** 22 + 1) == 0.0  # above Linux's largest pid


def test_the_shapes_are_the_four_one_queue_keys_and_ten_queues():
    assert [(s.rtopic_key, s.matched) for s in SHAPES] == [
        ("hit.app1.mod1.t0", 1), ("*.app1.mod1.t0", 1), ("hit.#", 1), ("#.t0", 1),
        ("hit.app1.mod1.*", 10)]


def test_with_the_brokers_pid_the_brokers_cpu_per_message_is_reported_per_path(monkeypatch):
    """--broker-pid: the broker's CPU over each path's run, per message (no broker here: the
    paths and /proc are stand-ins)."""
    import types

    from rtroute.bench import proxy

    Conn = types.SimpleNamespace(_impl=types.SimpleNamespace(
        server_properties={"version": b"4.3.6"}))

    class Setup:
        native, name, queues, total = "native", "rt", [], 100

        def __init__(self, *_args):
            pass

        def purge(self, _channel):
            pass

    clock = {"broker": 0.0, "proxy": 0.0}
    costs = iter([(0.02, 0.0), (0.01, 0.005)])  # (broker, proxy) seconds: topic, then proxy

    def path(*_args):
        broker, own = next(costs)
        clock["broker"] += broker
        clock["proxy"] += own
        return 1000.0

    monkeypatch.setattr(proxy, "_open", lambda *_a: (Conn, None, None, None))
    monkeypatch.setattr(proxy, "_Setup", Setup)
    monkeypatch.setattr(proxy, "register_rtopic", lambda *_a: None)
    monkeypatch.setattr(proxy, "publish", lambda *_a, **_k: None)
    monkeypatch.setattr(proxy, "_pika_path", path)
    monkeypatch.setattr(proxy, "_close", lambda *_a: None)
    monkeypatch.setattr(proxy, "cpu_seconds", lambda pid: clock["broker" if pid == 7 else "proxy"])
    shape = SHAPES[0].__class__(**{**SHAPES[0].__dict__, "messages": 1000})
    row = proxy.run_shape("amqp://", shape, "amqp://p", lambda _line: None, 1, None, 100,
                          proxy_pid=8, broker_pid=7)
    assert row["broker_cpu_us_per_msg"] == pytest.approx({"native": 20.0, "proxy": 10.0})
    assert row["proxy_cpu_us_per_msg"] == pytest.approx(5.0)
    monkeypatch.setattr(proxy, "_pika_path", lambda *_a: 1000.0)
    assert "broker_cpu_us_per_msg" not in proxy.run_shape(
        "amqp://", shape, "amqp://p", lambda _line: None, 1, None, 100, proxy_pid=8)
