"""A proxy killed with -9 loses nothing it confirmed: the client reconnects (as to a broker) and
publishes again what was not confirmed. Several proxies serve one broker (SO_REUSEPORT). A
broker the proxy cannot reach is a refusal with the reason; another broker's management API
stops the proxy at start."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pika
import pika.exceptions
import pytest

from rtroute.ops.netaddr import free_port

from ..conftest import wait_for

pytestmark = pytest.mark.broker
TOTAL = 2000


def test_kill_9_mid_stream_loses_nothing_confirmed(proxies, exchange_name, broker_uri):
    proxy = proxies()
    queue = f"{exchange_name}.durable"
    direct = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
        ch = conn.channel()
        ch.exchange_declare(exchange_name, "x-rtopic", durable=True)
        ch.queue_declare(queue, durable=True)
        ch.queue_bind(queue, exchange_name, "orders.eu.created")
        ch.confirm_delivery()
        confirmed: list[int] = []
        killed = threading.Event()

        def killer() -> None:
            wait_for(lambda: len(confirmed) >= 300, timeout=120)
            proxy.kill()
            killed.set()

        threading.Thread(target=killer, daemon=True).start()
        i = 0
        lost_connection = False
        while i < TOTAL:
            try:
                ch.basic_publish(exchange_name, "orders.*.created", str(i).encode(),
                                 pika.BasicProperties(delivery_mode=2))
            except (pika.exceptions.AMQPError, OSError):
                lost_connection = True
                killed.wait(30)
                again = proxies(port=proxy.port)  # the same port: clients reconnect as is
                conn = pika.BlockingConnection(pika.URLParameters(again.uri))
                ch = conn.channel()
                ch.exchange_declare(exchange_name, "x-rtopic", durable=True)
                ch.confirm_delivery()
                continue  # i was not confirmed: publish it again
            confirmed.append(i)
            i += 1
        conn.close()
        assert lost_connection
        ch = direct.channel()
        seen = set()
        while True:
            method, _props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                break
            seen.add(int(body))
        assert set(confirmed) <= seen
    finally:
        direct.channel().queue_delete(queue)
        direct.close()


def test_an_exchange_declared_through_one_proxy_is_routed_by_another(proxies, exchange_name):
    first = proxies("--reuse-port")
    second = proxies("--reuse-port", port=first.port)  # SO_REUSEPORT: both serve the port
    other = proxies()                                  # and a port of its own
    one = pika.BlockingConnection(pika.URLParameters(first.uri))
    two = pika.BlockingConnection(pika.URLParameters(other.uri))
    try:
        ch = one.channel()
        ch.exchange_declare(exchange_name, "x-rtopic")
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(queue, exchange_name, "a.b.c")
        ch2 = two.channel()
        ch2.confirm_delivery()

        def routed() -> bool:  # the registry reaches the other process through the broker
            ch2.basic_publish(exchange_name, "a.*.c", b"x")
            return ch.queue_declare(queue, passive=True).method.message_count > 0

        wait_for(routed, timeout=15, interval=0.2)
        assert second.proc.poll() is None
    finally:
        one.close()
        two.close()


def test_a_broker_the_proxy_cannot_reach_refuses_clients_with_the_reason(proxies):
    port = free_port()  # nothing listens there
    proxy = proxies(broker=f"amqp://guest:guest@127.0.0.1:{port}/%2F")
    with pytest.raises(pika.exceptions.AMQPConnectionError) as raised:
        pika.BlockingConnection(pika.URLParameters(proxy.uri + "?connection_attempts=1"))
    assert "(541) " in str(raised.value)
    assert "INTERNAL_ERROR - rtroute proxy: cannot reach the broker: " in str(raised.value)
    assert f"Connect call failed ('127.0.0.1', {port})" in str(raised.value)
    wait_for(lambda: f"cannot reach the broker amqp://guest:***@127.0.0.1:{port}/%2F for a "
             "client: " in proxy.log_path.read_text(), timeout=10)


def test_another_brokers_management_api_stops_the_proxy_with_one_line(other_management_uri,
                                                                      broker_uri):
    # before: the proxy followed that broker's bindings, said ready, and confirmed publishes
    # that reached no queue of the broker it forwards to
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "rtroute.cli", "proxy", "--uri", broker_uri,
         "--management-uri", other_management_uri, "--listen", f"127.0.0.1:{free_port()}"],
        check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert time.monotonic() - started < 30
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: the management API"), done.stderr[-2000:]
    assert "--management-uri" in last and "belongs to broker" in last
    assert "Traceback" not in done.stderr
    assert "guest:guest" not in done.stderr  # credentials masked
