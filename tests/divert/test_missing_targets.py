"""A divert's forwarding address that does not exist: said at creation, its copies
dead-lettered with the reason (never dropped), and a target created later used at once.

Before: an exclusive ANYCAST divert to a missing queue was accepted without a word and its
messages vanished (counted ``unrouted``, acked); a queue created after start got nothing for up
to ~30 s (the addresses were looked up again on a timer only)."""
from __future__ import annotations

import pika
import pytest

from .conftest import divert_status, drain, http, wait_depth

pytestmark = pytest.mark.broker

TOKEN = "missing-target-token"


def test_an_exclusive_anycast_divert_to_no_queue_warns_and_dead_letters(run_config, channel,
                                                                       managed, objects):
    name = managed("anycast-none")
    missing = f"{name}.nowhere"
    local = objects.queue(f"{name}.local")
    dead = objects.dead_letters()
    sc = run_config([{"name": name, "kind": "topic"}], http={"token": TOKEN})
    channel.queue_bind(local, f"{name}.bindings", "#")
    body = {"name": f"{name}-d", "address": name, "forwarding_address": missing,
            "routing_type": "ANYCAST", "exclusive": True}
    code, answer = http(sc, "POST", "/diverts", body, TOKEN)
    assert code == 201
    assert answer["warnings"] and missing in answer["warnings"][0]
    assert f"forwarding address '{missing}' is neither" in sc.log()
    channel.confirm_delivery()
    for i in range(3):
        channel.basic_publish(name, "k", f"m{i}".encode(), pika.BasicProperties(message_id=str(i)))
    wait_depth(channel, dead, 3)
    got = drain(channel, dead)
    assert sorted(b for _, _, b in got) == [b"m0", b"m1", b"m2"]
    assert all("no queue took the copy" in p.headers["x-rtroute-error"] for _, p, _ in got)
    assert drain(channel, local) == []  # exclusive: the originals went nowhere else
    status = divert_status(sc, f"{name}-d")
    assert status["dead_lettered"] == 3 and status["forwarded"] == 0


def test_a_target_created_after_start_is_used_at_once(run_config, channel, managed, objects):
    name = managed("late-target")
    late = f"{name}.late"
    dead = objects.dead_letters()
    sc = run_config([{"name": name, "kind": "topic"}],
                    [{"name": f"{name}-d", "address": name, "forwarding_address": late,
                      "routing_type": "STRIP", "exclusive": True}])
    assert sc.status()["forwarding_addresses"][late] is None
    assert f"forwarding address {late}: no exchange or queue of that name" in sc.log()
    objects.queue(late)  # now it exists; the next copy must reach it, no timer involved
    channel.confirm_delivery()
    channel.basic_publish(name, "k", b"first")
    wait_depth(channel, late, 1, timeout=5)
    assert [b for _, _, b in drain(channel, late)] == [b"first"]
    assert drain(channel, dead) == []
    assert sc.status()["forwarding_addresses"][late] == "queue"
