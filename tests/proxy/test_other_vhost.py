"""A vhost other than the proxy's own: RabbitMQ's event plugin publishes the events of every
vhost in one vhost (``/`` by default), so the catalog of another vhost takes them from the
proxy's own connection (rtroute.amqp.event_feed.RelayedFeed), filtered by vhost, instead of
re-listing every 5 s: a binding made on the broker directly is seen as fast as in ``/`` (before:
after ~4.8 s, and what was published in between was confirmed and routed nowhere)."""
from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pika
import pytest

from ..conftest import MANAGEMENT_URI, broker_uri_for, wait_for
from ..management_gate import ManagementGate
from .conftest import routed

pytestmark = pytest.mark.broker
# a binding seen through events arrives in milliseconds; re-listing every 5 s would not
EVENT_BOUND = 2.0


@pytest.fixture
def vhost(scratch_vhost):
    return scratch_vhost


@contextlib.contextmanager
def _followed(proxy, vhost: str, name: str) -> Iterator[tuple[Any, Any]]:
    """``(through, direct)``: a confirming channel through ``proxy`` to the x-rtopic exchange
    ``name`` of ``vhost`` (declared, listed and followed), and a channel to the broker."""
    through = pika.BlockingConnection(pika.URLParameters(
        proxy.uri.rsplit("/", 1)[0] + "/" + quote(vhost, safe="")))
    direct = pika.BlockingConnection(pika.URLParameters(broker_uri_for(vhost)))
    try:
        ch = through.channel()
        ch.confirm_delivery()
        ch.exchange_declare(name, "x-rtopic", auto_delete=False)
        ch.basic_publish(name, "warm.up", b"")  # listed and followed
        yield ch, direct.channel()
    finally:
        for conn in (through, direct):
            if conn.is_open:
                conn.close()


def test_a_binding_made_on_the_broker_in_another_vhost_is_seen_through_events(proxies, vhost):
    proxy = proxies()
    with _followed(proxy, vhost, "orders") as (ch, d):
        queue = d.queue_declare("", exclusive=True).method.queue
        delays = []
        for i in range(5):
            d.queue_bind(queue, "orders.bindings", f"direct{i}.x")
            started = time.monotonic()
            wait_for(lambda i=i: routed(ch, "orders", f"direct{i}.*"), timeout=10,
                     interval=0.01)
            delays.append(time.monotonic() - started)
        print(f"vhost {vhost!r}: a binding made on the broker routed through the proxy after "
              f"{max(delays):.3f} s at most ({', '.join(f'{d:.3f}' for d in delays)})")
        assert max(delays) < EVENT_BOUND, delays


def test_a_proxy_whose_own_vhost_has_no_events_follows_them_from_the_event_vhost(
        proxies, scratch_vhost):
    """The proxy's own URI names a vhost without the event exchange (its other vhosts took
    their events from its own connection, so every vhost polled): the catalogs follow the
    event vhost's events through a connection there (rtroute.amqp.event_source). Once the
    exchange is followed, the management API holds every listing of its bindings: a binding
    made at the broker can only be learnt from an event."""
    name = f"orders-{uuid.uuid4().hex[:6]}"
    gate = ManagementGate(MANAGEMENT_URI, name + ".bindings")
    gate.open()
    try:
        proxy = proxies(broker=broker_uri_for(scratch_vhost), management=gate.url)
        with _followed(proxy, scratch_vhost, name) as (ch, d):
            gate.hold()
            queue = d.queue_declare("", exclusive=True).method.queue
            d.queue_bind(queue, f"{name}.bindings", "direct.x")
            started = time.monotonic()
            wait_for(lambda: routed(ch, name, "direct.*"), timeout=30, interval=0.01)
            print(f"proxy of vhost {scratch_vhost!r}: a binding made at the broker routed "
                  f"after {time.monotonic() - started:.3f} s")
    finally:
        gate.close()
