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
