"""A message whose matched binding keys do not fit one header frame beside its own headers is
still delivered as every other: from ``NAME.bindings`` with the routing key as published (not
through the default exchange, with exchange ``''`` and the queue name as routing key, which
neither the plugin nor a native exchange ever shows), each queue once."""
from __future__ import annotations

import pika
import pytest

from .conftest import depth, drain, wait_depth

pytestmark = pytest.mark.broker


def test_a_large_header_and_a_wildcard_key_deliver_from_the_bindings_exchange(
        sidecars, channel, managed, broker_uri):
    name = managed("bigheader")
    sc = sidecars("--rtopic", name)
    sc.wait_running(name)
    many = channel.queue_declare("", exclusive=True).method.queue
    one = channel.queue_declare("", exclusive=True).method.queue
    for i in range(500):  # ~7 KB of BCC: more than the ~1 KB the headers below leave
        channel.queue_bind(many, f"{name}.bindings", f"big.k{i:04d}")
    channel.queue_bind(one, f"{name}.bindings", "big.r")
    sc.wait_running(name, bindings=501, timeout=60)
    conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish(name, "big.*", b"payload", pika.BasicProperties(
            headers={"pad": "x" * 129_000}))
    finally:
        conn.close()
    wait_depth(channel, many, 1)
    wait_depth(channel, one, 1)
    assert depth(channel, many) == 1 and depth(channel, one) == 1
    for queue in (many, one):
        ((method, props, body),) = drain(channel, queue)
        assert (method.exchange, method.routing_key, body) == \
            (f"{name}.bindings", "big.*", b"payload")
        assert len(props.headers["pad"]) == 129_000
