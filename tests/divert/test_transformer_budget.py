"""A transformer runs off the ioloop with a time budget: one that never returns costs its own
copies (dead-lettered with the reason), never the other messages, and never stops the process."""
from __future__ import annotations

import time

import pytest

from .conftest import divert_status, drain, wait_depth

pytestmark = pytest.mark.broker


def test_a_transformer_that_never_returns_stalls_nothing_else(run_config, channel, managed,
                                                             objects):
    name, other = managed("hang"), managed("hang-neighbour")
    target = objects.queue(f"{name}.target")
    local, other_local = objects.queue(f"{name}.local"), objects.queue(f"{other}.local")
    dead = objects.dead_letters()
    sc = run_config([{"name": name, "kind": "fanout"}, {"name": other, "kind": "fanout"}],
                    [{"name": f"{name}-hang", "address": name, "forwarding_address": target,
                      "routing_type": "ANYCAST",
                      "transformer": "tests.divert.transformers:hang"}])
    channel.queue_bind(local, f"{name}.bindings")
    channel.queue_bind(other_local, f"{other}.bindings")
    channel.confirm_delivery()
    started = time.monotonic()
    channel.basic_publish(name, "", b"first")
    for i in range(20):
        channel.basic_publish(other, "", f"other-{i}".encode())
    wait_depth(channel, other_local, 20, timeout=4)  # flows while the transformer hangs
    assert time.monotonic() - started < 4
    wait_depth(channel, dead, 1, timeout=20)  # the budget ran out: dead-lettered
    channel.basic_publish(name, "", b"second")  # while the transformer still hangs
    wait_depth(channel, dead, 2, timeout=5)
    reasons = [p.headers["x-rtroute-error"] for _, p, _ in drain(channel, dead)]
    assert "took over 5 s" in reasons[0]
    assert "still running an earlier copy" in reasons[1]
    assert sorted(b for _, _, b in drain(channel, local)) == [b"first", b"second"]
    assert drain(channel, target) == []
    assert divert_status(sc, f"{name}-hang")["dead_lettered"] == 2
    assert "has run for over 5 s" in sc.log()
    assert sc.terminate() == 0  # SIGTERM still stops it
