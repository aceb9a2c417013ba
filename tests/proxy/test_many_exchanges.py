"""Thousands of x-rtopic exchanges in one vhost (issue: one channel and one event queue per
exchange ran out of channel_max at ~2,045 exchanges and made every binding event cost the broker
exchanges x proxies deliveries): a proxy's catalog has one event subscription per vhost, whatever
the number of exchanges, and routing stays right with two proxies and 3,000 exchanges."""
from __future__ import annotations

import time
import uuid

import pika
import pytest

from ..conftest import wait_for

pytestmark = pytest.mark.broker
EXCHANGES = 3000


def _event_queues(mgmt) -> set[str]:
    return {b["destination"] for b in mgmt.request(
        "GET", "exchanges/%2F/amq.rabbitmq.event/bindings/source")}


def _declare(ch, names: list[str]) -> None:
    for name in names:
        ch.exchange_declare(name, "x-rtopic", auto_delete=False)


def _delete(uri: str, names: list[str]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        for name in names:
            ch.exchange_delete(name)
    finally:
        conn.close()


def test_one_event_subscription_per_proxy_and_vhost_whatever_the_exchanges(proxies, mgmt):
    proxy = proxies()
    names = [f"rtroute-test-many-{uuid.uuid4().hex[:6]}-{i}" for i in range(60)]
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", "warm", b"")  # the catalog of the vhost is up
        before = _event_queues(mgmt)
        _declare(ch, names)
        for name in names:  # each is followed (its bindings listed) before its publish goes
            ch.basic_publish(name, "a.*", b"")
        assert _event_queues(mgmt) - before == set()
    finally:
        conn.close()
        _delete(proxy.uri, names)


def test_two_proxies_route_right_among_3000_exchanges(proxies, broker_uri):
    first, second = proxies(), proxies()
    run = uuid.uuid4().hex[:6]
    names = [f"rtroute-test-3k-{run}-{i}" for i in range(EXCHANGES)]
    a = pika.BlockingConnection(pika.URLParameters(first.uri))
    b = pika.BlockingConnection(pika.URLParameters(second.uri))
    direct = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        ch = a.channel()
        started = time.monotonic()
        _declare(ch, names)
        print(f"{EXCHANGES} x-rtopic exchanges declared through a proxy in "
              f"{time.monotonic() - started:.1f} s")
        queue = f"rtroute-test-3k-{run}"
        ch.queue_declare(queue, auto_delete=True)
        targets = names[::500] + [names[-1]]
        for i, name in enumerate(targets):
            ch.queue_bind(queue, name, f"k{i}.x")
        out = b.channel()
        out.confirm_delivery()
        for i, name in enumerate(targets):
            out.basic_publish(name, f"k{i}.*", name.encode(), mandatory=True)
            out.basic_publish(name, f"k{i + 1}.*", b"no", mandatory=False)  # matches nothing
        got = []
        for _ in targets:
            method, _props, body = ch.basic_get(queue, auto_ack=True)
            got.append(body.decode() if method else None)
        assert got == targets
        # a binding made on the broker directly, around both proxies: seen through events
        other = direct.channel()
        other.queue_bind(queue, f"{names[1]}.bindings", "late.x")
        started = time.monotonic()

        def routed() -> bool:
            try:
                out.basic_publish(names[1], "late.*", b"late", mandatory=True)
                return True
            except pika.exceptions.UnroutableError:
                return False

        wait_for(routed, timeout=10)
        print(f"a binding made on the broker was routed through a proxy after "
              f"{time.monotonic() - started:.3f} s among {EXCHANGES} x-rtopic exchanges")
    finally:
        for conn in (a, b, direct):
            if conn.is_open:
                conn.close()
        _delete(broker_uri, names + [f"{n}.bindings" for n in names])
        conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
        conn.channel().queue_delete(f"rtroute-test-3k-{run}")
        conn.close()
