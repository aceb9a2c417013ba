"""A gap in what the proxy follows: when the broker cancels the catalog's event consumer (its
queue deleted, its node restarted), changes made meanwhile reach no event. Until a listing has
made the copy current again, the proxy does not route by it: publishes to the x-rtopic exchanges
wait (as before their first listing) and ``/readyz`` says why (before: confirmed by a stale copy,
routed nowhere, /readyz 200)."""
from __future__ import annotations

import json

import pika
import pytest

from rtroute.ops.netaddr import free_port

from ..conftest import BROKER_URI, broker_ctl, wait_for
from .test_proxy_ops import http_get

pytestmark = pytest.mark.broker


def _event_queues(mgmt) -> set[str]:
    return {b.destination for b in mgmt.exchange_bindings("amq.rabbitmq.event", "/")}


def test_a_publish_in_an_event_gap_waits_for_the_relist_and_is_routed(proxies, exchange_name,
                                                                      mgmt):
    before = _event_queues(mgmt)
    http = free_port()
    proxy = proxies("--http", f"127.0.0.1:{http}")
    client = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    direct = pika.BlockingConnection(pika.URLParameters(BROKER_URI))
    try:
        ch = client.channel()
        ch.confirm_delivery()
        ch.exchange_declare(exchange_name, "x-rtopic", auto_delete=False)
        ch.basic_publish(exchange_name, "warm.up", b"")  # followed: listed, subscribed
        wait_for(lambda: http_get(http, "/readyz")[0] == 200, timeout=30)
        (feed,) = _event_queues(mgmt) - before  # the catalog's one event subscription
        d = direct.channel()
        queue = d.queue_declare("", exclusive=True).method.queue
        broker_ctl("delete_queue", feed)  # the broker cancels the consumer
        wait_for(lambda: http_get(http, "/readyz")[0] == 503, timeout=10)
        reason = json.loads(http_get(http, "/readyz")[1])["reason"]
        # a binding made in the gap: no event reaches the proxy for it
        d.queue_bind(queue, f"{exchange_name}.bindings", "gap.x")
        ch.basic_publish(exchange_name, "gap.*", b"in the gap", mandatory=True)
        assert d.queue_declare(queue, passive=True).method.message_count == 1
        assert "event subscription was lost" in reason
        wait_for(lambda: http_get(http, "/readyz")[0] == 200, timeout=30)
    finally:
        for conn in (client, direct):
            if conn.is_open:
                conn.close()
