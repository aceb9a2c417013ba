"""Unroutable messages leave a trace: a rate-limited log line with the exchange, the routing
key and the count, and the last few keys in /status (before: a counter, nothing else)."""
from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.broker


def test_unroutable_messages_are_logged_once_per_interval_and_listed_in_status(
        sidecars, managed, channel):
    name = managed("unroutable")
    sc = sidecars("--rtopic", name)
    sc.wait_running(name, bindings=0)
    channel.confirm_delivery()
    for i in range(7):
        channel.basic_publish(name, f"nobody.{i}", b"m")
    deadline = time.monotonic() + 15
    while sc.exchange(name).get("unroutable", 0) < 7:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    ex = sc.exchange(name)
    assert [e["routing_key"] for e in ex["last_unroutable"]] == [f"nobody.{i}"
                                                                for i in range(2, 7)]
    lines = [line for line in sc.log().splitlines() if "unroutable message(s)" in line]
    assert len(lines) == 1  # one line per 10 s, not one per message
    assert name in lines[0] and "'nobody.0'" in lines[0] and "alternate_exchange" in lines[0]
    status = sc.status()
    assert any("x-rtroute-bcc" in hint for hint in status["hints"])


def test_a_bcc_only_publish_is_counted_by_the_empty_table_it_leaves(sidecars, managed,
                                                                   channel):
    """RabbitMQ strips BCC before the ingress queue; a publish whose only header was BCC
    arrives with an empty headers table, which the sidecar counts (before: no trace at all)."""
    import pika

    name = managed("bcc-trace")
    sc = sidecars("--rtopic", name)
    sc.wait_running(name, bindings=0)
    channel.confirm_delivery()
    channel.basic_publish(name, "k", b"bcc", pika.BasicProperties(headers={"BCC": ["x"]}))
    channel.basic_publish(name, "k", b"plain")
    deadline = time.monotonic() + 15
    while sc.exchange(name).get("received", 0) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert sc.exchange(name)["empty_headers"] == 1
