"""A durable x-rtopic exchange declared through `rtroute proxy` survives a restart of the
broker's node: its layout, its registration in ``rtroute.rtopic`` and the bindings made through
the proxy; the proxy that ran through the restart and one started after it route by them.

The restart is ``stop_app``/``start_app``, as in ``tests/sidecar/test_node_restart.py`` (whose
docstring says why that reloads the metadata store as a node restart does).
"""
from __future__ import annotations

import pika
import pytest

from rtroute.proxy.catalog import REGISTRY_EXCHANGE

from ..conftest import BROKER_URI, management_client, wait_for
from ..sidecar.test_node_restart import (
    BOUND,
    assert_layout_recovered,
    layout_snapshot,
    metadata_store,
    restart_node,
)

pytestmark = pytest.mark.broker


def registration(mgmt, name: str) -> list[tuple[str, str, str]]:
    """The bindings of ``rtroute.rtopic`` that register ``name`` as x-rtopic."""
    return sorted((b.destination_type, b.destination, b.routing_key)
                  for b in mgmt.exchange_bindings(REGISTRY_EXCHANGE) if b.routing_key == name)


def through(proxy) -> pika.adapters.blocking_connection.BlockingChannel:
    """A confirming channel through ``proxy``, once the broker behind it takes connections."""
    def connect():
        try:
            return pika.BlockingConnection(pika.URLParameters(proxy.uri))
        except pika.exceptions.AMQPError:
            return None

    channel = wait_for(connect, 60, 0.2).channel()
    channel.confirm_delivery()
    return channel


def test_proxy_routes_by_bindings_made_before_a_node_restart(proxies, exchange_name):
    store = metadata_store()
    mgmt = management_client(timeout=5)
    name = exchange_name
    queues = {dest: f"{name}.{dest}" for dest in BOUND}
    persistent = pika.BasicProperties(delivery_mode=2)
    proxy = proxies()
    try:
        ch = through(proxy)
        ch.exchange_declare(name, "x-rtopic", durable=True)
        for dest, key in BOUND.items():
            ch.queue_declare(queues[dest], durable=True)
            ch.queue_bind(queues[dest], name, key)
        # confirmed to the proxy's client once stored: it must outlive the restart
        ch.basic_publish(name, "s.*.x", b"m1", persistent, mandatory=True)
        ch.connection.close()
        exchanges = [name, f"{name}.bindings"]
        before = layout_snapshot(mgmt, exchanges, list(queues.values()))
        registered = registration(mgmt, name)
        assert registered == [("exchange", f"{name}.bindings", name)]

        timings = restart_node(mgmt)

        assert_layout_recovered(mgmt, before, exchanges, list(queues.values()))
        assert registration(mgmt, name) == registered
        ch = through(proxy)  # the proxy that ran through the restart
        ch.basic_publish(name, "#.a.x", b"m2", persistent, mandatory=True)
        ch.connection.close()
        ch = through(proxies())  # one that learns the exchange from the broker alone
        ch.basic_publish(name, "s.b.#", b"m3", persistent, mandatory=True)
        ch.connection.close()

        conn = pika.BlockingConnection(pika.URLParameters(BROKER_URI))
        plain = conn.channel()
        got = {}
        for dest, queue in queues.items():
            got[dest] = []
            while (message := plain.basic_get(queue, auto_ack=True))[0] is not None:
                got[dest].append(message[2])
        conn.close()
        assert got == {"a": [b"m1", b"m2"], "b": [b"m1", b"m3"], "c": [b"m2"]}
    finally:
        conn = pika.BlockingConnection(pika.URLParameters(BROKER_URI))
        plain = conn.channel()
        for queue in queues.values():
            plain.queue_delete(queue)
        conn.close()
    print(f"\nnode restart ({store}), proxy: " + ", ".join(
        f"{step} {seconds:.1f} s" for step, seconds in timings.items()))
