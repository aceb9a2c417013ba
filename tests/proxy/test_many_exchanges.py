"""Thousands of x-rtopic exchanges in one vhost (issue: one channel and one event queue per
exchange ran out of channel_max at ~2,045 exchanges and made every binding event cost the broker
exchanges x proxies deliveries): a proxy's catalog has one event subscription per vhost, whatever
the number of exchanges, and routing stays right with two proxies and 3,000 exchanges. The
3,000 live in a vhost of their own, deleted at the end in one step."""
from __future__ import annotations

import threading
import time
import uuid
from urllib.parse import quote

import pika
import pytest

from rtroute.amqp.uri import parse_uri

from ..conftest import BROKER_URI, broker_uri_for, management_client, wait_for
from .conftest import routed

pytestmark = pytest.mark.broker
EXCHANGES = 3000
DECLARERS = 4  # client connections declaring at once


@pytest.fixture
def vhost(mgmt):
    name = f"rtroute-test-many-{uuid.uuid4().hex[:6]}"
    user = parse_uri(BROKER_URI, strict=False).username
    mgmt.request("PUT", f"vhosts/{quote(name, safe='')}", {})
    mgmt.request("PUT", f"permissions/{quote(name, safe='')}/{quote(user, safe='')}",
                 {"configure": ".*", "write": ".*", "read": ".*"})
    yield name
    # thousands of exchanges go with it: longer than the fixture's client waits
    management_client(timeout=300).request("DELETE", f"vhosts/{quote(name, safe='')}")


def _in_vhost(uri: str, vhost: str) -> str:
    return uri.rsplit("/", 1)[0] + "/" + quote(vhost, safe="")


def _event_queues(mgmt) -> set[str]:
    return {b["destination"] for b in mgmt.request(
        "GET", "exchanges/%2F/amq.rabbitmq.event/bindings/source")}


def _declare_all(uri: str, names: list[str]) -> None:
    failures: list[BaseException] = []

    def declare(part: list[str]) -> None:
        try:
            conn = pika.BlockingConnection(pika.URLParameters(uri))
            ch = conn.channel()
            for name in part:
                ch.exchange_declare(name, "x-rtopic", auto_delete=False)
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            failures.append(exc)

    threads = [threading.Thread(target=declare, args=(names[i::DECLARERS],))
               for i in range(DECLARERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures


def test_one_event_subscription_per_proxy_and_vhost_whatever_the_exchanges(proxies, mgmt,
                                                                           vhost):
    proxy = proxies()
    names = [f"many-{i}" for i in range(60)]
    conn = pika.BlockingConnection(pika.URLParameters(_in_vhost(proxy.uri, vhost)))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", "warm", b"")  # the catalog of the vhost is up
        before = _event_queues(mgmt)
        _declare_all(_in_vhost(proxy.uri, vhost), names)
        for name in names:  # each is followed (its bindings listed) before its publish goes
            ch.basic_publish(name, "a.*", b"")
        assert _event_queues(mgmt) - before == set()
    finally:
        conn.close()


def test_two_proxies_route_right_among_3000_exchanges(proxies, vhost):
    first, second = proxies(), proxies()
    names = [f"x{i}" for i in range(EXCHANGES)]
    a = pika.BlockingConnection(pika.URLParameters(_in_vhost(first.uri, vhost)))
    b = pika.BlockingConnection(pika.URLParameters(_in_vhost(second.uri, vhost)))
    direct = pika.BlockingConnection(pika.URLParameters(broker_uri_for(vhost)))
    try:
        started = time.monotonic()
        _declare_all(_in_vhost(first.uri, vhost), names)
        print(f"{EXCHANGES} x-rtopic exchanges declared through a proxy in "
              f"{time.monotonic() - started:.1f} s ({DECLARERS} clients at once)")
        ch = a.channel()
        queue = ch.queue_declare("", exclusive=True).method.queue
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
        late = other.queue_declare("", exclusive=True).method.queue
        other.queue_bind(late, f"{names[1]}.bindings", "late.x")
        started = time.monotonic()

        wait_for(lambda: routed(out, names[1], "late.*", b"late"), timeout=10)
        print(f"a binding made on the broker was routed through a proxy after "
              f"{time.monotonic() - started:.3f} s among {EXCHANGES} x-rtopic exchanges")
    finally:
        for conn in (a, b, direct):
            if conn.is_open:
                conn.close()
