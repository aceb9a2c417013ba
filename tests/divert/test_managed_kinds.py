"""topic, direct, fanout and headers exchanges managed by the sidecar (for their diverts).

NAME.bindings is a real exchange of that type: RabbitMQ routes the republished flow, and the
BCC alias header becomes a real BCC header on that republish.
"""
from __future__ import annotations

import pika
import pytest

from ..conftest import wait_for
from .conftest import depth, drain, wait_depth

pytestmark = pytest.mark.broker


def test_topic_exchange_routes_with_rabbitmq_semantics_and_bcc_alias(run_config, channel,
                                                                     managed, objects):
    name = managed("topic")
    sc = run_config([{"name": name, "kind": "topic"}])
    q = {k: objects.queue(f"{name}.{k}", bind=(f"{name}.bindings", key))
         for k, key in (("star", "a.*"), ("hash", "#.z"), ("blind", "hidden.key"))}
    channel.confirm_delivery()
    channel.basic_publish(name, "a.z", b"m1", pika.BasicProperties(
        headers={"x-rtroute-bcc": ["hidden.key"], "keep": 1}))
    channel.basic_publish(name, "nobody.here", b"m2")
    for queue in q.values():
        wait_depth(channel, queue, 1)
    for queue in q.values():
        ((method, props, body),) = drain(channel, queue)
        assert body == b"m1" and method.routing_key == "a.z"
        assert props.headers == {"keep": 1}  # alias turned into BCC, which RabbitMQ strips
    wait_for(lambda: sc.exchange(name).get("unroutable") == 1)
    ex = sc.exchange(name)
    assert (ex["kind"], ex["routed"], ex["bindings_known"]) == ("topic", 1, None)


def test_headers_exchange_with_static_bindings(run_config, channel, managed, objects):
    name = managed("headers")
    eu = objects.queue(f"{name}.eu")
    any_q = objects.queue(f"{name}.any")
    run_config([{"name": name, "kind": "headers", "bindings": [
        {"destination": eu, "arguments": {"x-match": "all", "region": "eu", "tier": "gold"}},
        {"destination": any_q, "arguments": {"x-match": "any", "region": "eu", "tier": "x"}},
    ]}])
    channel.confirm_delivery()
    for body, headers in ((b"gold-eu", {"region": "eu", "tier": "gold"}),
                          (b"silver-eu", {"region": "eu", "tier": "silver"}),
                          (b"x-us", {"region": "us", "tier": "x"})):
        channel.basic_publish(name, "", body, pika.BasicProperties(headers=headers))
    wait_depth(channel, any_q, 3)
    assert [b for _, _, b in drain(channel, eu)] == [b"gold-eu"]
    assert sorted(b for _, _, b in drain(channel, any_q)) == [b"gold-eu", b"silver-eu", b"x-us"]


@pytest.mark.parametrize("kind,key", [("direct", "exact"), ("fanout", "ignored")])
def test_direct_and_fanout_exchanges(kind, key, run_config, channel, managed, objects):
    name = managed(kind)
    run_config([{"name": name, "kind": kind}])
    queue = objects.queue(f"{name}.q", bind=(f"{name}.bindings", "exact"))
    channel.confirm_delivery()
    channel.basic_publish(name, key, b"one")
    channel.basic_publish(name, "other", b"two")
    wait_depth(channel, queue, 1)
    expected = [b"one"] if kind == "direct" else [b"one", b"two"]
    wait_for(lambda: depth(channel, queue) == len(expected))
    assert [b for _, _, b in drain(channel, queue)] == expected


def test_malformed_bcc_alias_on_a_topic_exchange_is_dead_lettered(run_config, channel, managed,
                                                                   objects):
    name = managed("topicdead")
    dead = objects.dead_letters()
    sc = run_config([{"name": name, "kind": "topic"}])
    channel.confirm_delivery()
    channel.basic_publish(name, "a", b"bad", pika.BasicProperties(
        headers={"x-rtroute-bcc": "not-an-array"}))
    wait_depth(channel, dead, 1)
    ((_, props, _),) = drain(channel, dead)
    assert "x-rtroute-bcc" in props.headers["x-rtroute-error"]
    assert sc.exchange(name)["dead_lettered"] == 1 and sc.proc.poll() is None
