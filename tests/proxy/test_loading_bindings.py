"""While the bindings of an x-rtopic exchange load, the proxy is not ready and says how far the
load is, and a client's publish waits for them instead of being refused (issue #47: at 300,000
bindings the listing outlasted every fixed timeout, while ``/readyz`` said 200).

The listing is held by a gate in front of the real management API (as long as the broker's
listing of 300,000 bindings takes, or longer), then let through."""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pika
import pytest

from rtroute.ops.netaddr import free_port

from ..conftest import MANAGEMENT_URI, wait_for
from ..management_gate import ManagementGate
from .test_proxy_ops import http_get

pytestmark = pytest.mark.broker


@pytest.fixture
def gate(exchange_name: str) -> Iterator[ManagementGate]:
    gate = ManagementGate(MANAGEMENT_URI, exchange_name + ".bindings")
    yield gate
    gate.close()


def declare_with_a_binding(uri: str, name: str) -> str:
    """Through a proxy at ``uri``: ``name`` x-rtopic, a queue bound with ``a.b``; the queue."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        ch.exchange_declare(name, "x-rtopic")
        queue = ch.queue_declare("", durable=False, auto_delete=False).method.queue
        ch.queue_bind(queue, name, "a.b")
        return queue
    finally:
        conn.close()


def readyz(port: int) -> tuple[int, dict]:
    code, body = http_get(port, "/readyz")
    return code, json.loads(body)


def test_readyz_says_how_far_the_load_is_and_a_publish_waits_for_it(proxies, exchange_name,
                                                                     gate, broker_uri):
    queue = declare_with_a_binding(proxies().uri, exchange_name)
    http = free_port()
    proxy = proxies("--http", f"127.0.0.1:{http}", management=gate.url)
    wait_for(lambda: gate.holding, timeout=30)

    def loading() -> str | None:
        code, body = readyz(http)
        reason = body.get("reason") or ""
        return reason if code == 503 and ": waiting " in reason else None

    reason = wait_for(loading, timeout=20)
    assert reason.startswith(f"loading bindings of '{exchange_name}.bindings': waiting "), reason
    assert "management API's answer" in reason

    published: list = []
    sending = threading.Event()

    def publish() -> None:  # a client that comes while the bindings load
        conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            sending.set()
            ch.basic_publish(exchange_name, "a.*", b"waited")
            published.append("confirmed")
        except Exception as exc:  # noqa: BLE001 - the test reports it
            published.append(exc)
        finally:
            if conn.is_open:
                conn.close()

    client = threading.Thread(target=publish)
    client.start()
    # the publish is held while the listing is: neither confirmed nor refused (a negative:
    # the client gets a moment to be answered wrongly)
    assert sending.wait(20)
    client.join(1.0)
    assert published == [] and readyz(http)[0] == 503
    gate.open()
    client.join(30)
    assert published == ["confirmed"]
    wait_for(lambda: readyz(http) == (200, {"healthy": True}), timeout=20)
    conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        _method, _props, body = conn.channel().basic_get(queue, auto_ack=True)
        assert body == b"waited"
        conn.channel().queue_delete(queue)
    finally:
        conn.close()


def test_a_failing_listing_is_the_reason_readyz_gives(proxies, exchange_name, gate):
    declare_with_a_binding(proxies().uri, exchange_name)
    http = free_port()
    proxies("--http", f"127.0.0.1:{http}", management=gate.url)
    wait_for(lambda: gate.holding, timeout=30)
    gate.fail(500, "the gate says no")

    def failed() -> str | None:
        code, body = readyz(http)
        reason = body.get("reason") or ""
        return reason if code == 503 and "the gate says no" in reason else None

    reason = wait_for(failed, timeout=20)
    assert reason.startswith(f"loading bindings of '{exchange_name}.bindings': failed after "), \
        reason
    assert "HTTP 500" in reason
