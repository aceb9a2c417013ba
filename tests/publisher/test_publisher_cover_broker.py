"""RTopicPublisher against the real broker with match sets larger than one header frame: the
BCC carries a cover of the destinations, and what one publish cannot carry goes by a bound key
of its own (the planner is :func:`rtroute.routing.delivery_plan.plan_delivery`)."""
from __future__ import annotations

import pytest

from ..conftest import wait_for
from .test_publisher_broker import drain, managed, publisher  # noqa: F401 (fixtures)

LONG = "w" * 230  # ~245 bytes of BCC per key: 600 keys are more than one frame holds


def test_thousands_of_keys_to_one_queue_are_one_publish_to_the_bindings_exchange(
        channel, managed, broker_uri, management_uri):  # noqa: F811
    queue = channel.queue_declare("", exclusive=True).method.queue
    for i in range(1000):
        channel.queue_bind(queue, f"{managed}.bindings", f"one.{i:04d}.{LONG}")
    with publisher(managed, broker_uri, management_uri) as pub:
        wait_for(lambda: len(pub.bindings) == 1000, timeout=30)
        future = pub.publish("#", b"big")
        future.result(timeout=20)
        assert len(future.matched) == 1000
        assert pub.status()["published"] == 1
    [(method, _properties, body)] = drain(channel, queue)
    assert (method.exchange, method.routing_key, body) == (f"{managed}.bindings", "#", b"big")


@pytest.mark.parametrize("bound_routing_key", [False, True])
def test_distinct_queues_beyond_one_frame_get_one_copy_from_the_bindings_exchange(
        channel, managed, broker_uri, management_uri, bound_routing_key):  # noqa: F811
    queues = {}
    for i in range(600):
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_bind(queue, f"{managed}.bindings", f"many.{i:04d}.{LONG}")
        queues[f"many.{i:04d}.{LONG}"] = queue
    headers = None
    routing_key = "many.#"
    if bound_routing_key:  # one publish of it only: the rest goes by bound keys
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_bind(queue, f"{managed}.bindings", "root")
        queues["root"] = queue
        routing_key, headers = "root", {"x-rtroute-bcc": ["many.#"]}
    with publisher(managed, broker_uri, management_uri) as pub:
        wait_for(lambda: len(pub.bindings) == len(queues), timeout=30)
        future = pub.publish(routing_key, b"big", headers=headers)
        future.result(timeout=30)
        assert len(future.matched) == len(queues)
        assert pub.status()["published"] >= 2
    by_key = 0
    for key, queue in queues.items():
        got = drain(channel, queue)
        assert len(got) == 1, key
        method, properties, body = got[0]
        assert (method.exchange, body) == (f"{managed}.bindings", b"big")
        if method.routing_key != routing_key:
            assert method.routing_key == key
            assert (properties.headers or {}).get("x-rtroute-routing-key") == routing_key
            by_key += 1
    assert by_key > 0 if bound_routing_key else by_key == 0

