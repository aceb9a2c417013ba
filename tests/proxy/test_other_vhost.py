"""A vhost other than the proxy's own: RabbitMQ's event plugin publishes the events of every
vhost in one vhost (``/`` by default), so the catalog of another vhost takes them from the
proxy's own connection (rtroute.amqp.event_feed.RelayedFeed), filtered by vhost, instead of
re-listing every 5 s: a binding made on the broker directly is seen as fast as in ``/`` (before:
after ~4.8 s, and what was published in between was confirmed and routed nowhere)."""
from __future__ import annotations

import time
import uuid
from urllib.parse import quote

import pika
import pytest

from rtroute.amqp.uri import parse_uri

from ..conftest import BROKER_URI, broker_uri_for, wait_for

pytestmark = pytest.mark.broker
# a binding seen through events arrives in milliseconds; re-listing every 5 s would not
EVENT_BOUND = 2.0


@pytest.fixture
def vhost(mgmt):
    name = f"rtroute-test-proxy-vh-{uuid.uuid4().hex[:6]}"
    mgmt.request("PUT", f"vhosts/{quote(name, safe='')}", {})
    user = parse_uri(BROKER_URI, strict=False).username
    mgmt.request("PUT", f"permissions/{quote(name, safe='')}/{quote(user, safe='')}",
                 {"configure": ".*", "write": ".*", "read": ".*"})
    yield name
    mgmt.request("DELETE", f"vhosts/{quote(name, safe='')}")


def test_a_binding_made_on_the_broker_in_another_vhost_is_seen_through_events(proxies, vhost):
    proxy = proxies()
    through = pika.BlockingConnection(pika.URLParameters(
        proxy.uri.rsplit("/", 1)[0] + "/" + quote(vhost, safe="")))
    direct = pika.BlockingConnection(pika.URLParameters(broker_uri_for(vhost)))
    try:
        ch = through.channel()
        ch.confirm_delivery()
        ch.exchange_declare("orders", "x-rtopic", auto_delete=False)
        ch.basic_publish("orders", "warm.up", b"")  # listed and followed
        d = direct.channel()
        queue = d.queue_declare("", exclusive=True).method.queue
        delays = []
        for i in range(5):
            d.queue_bind(queue, "orders.bindings", f"direct{i}.x")
            started = time.monotonic()

            def routed(i: int = i) -> bool:
                try:
                    ch.basic_publish("orders", f"direct{i}.*", b"", mandatory=True)
                    return True
                except pika.exceptions.UnroutableError:
                    return False

            wait_for(routed, timeout=10, interval=0.01)
            delays.append(time.monotonic() - started)
        print(f"vhost {vhost!r}: a binding made on the broker routed through the proxy after "
              f"{max(delays):.3f} s at most ({', '.join(f'{d:.3f}' for d in delays)})")
        assert max(delays) < EVENT_BOUND, delays
    finally:
        for conn in (through, direct):
            if conn.is_open:
                conn.close()
