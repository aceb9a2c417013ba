"""The move off the plugin, tried on real brokers: a topology made on a broker WITH the x-rtopic
plugin (3.10.8 + v3.10.5 at ``RTROUTE_TEST_PLUGIN_URI``; 4.0.5 + v4.0.9 at
``RTROUTE_TEST_PLUGIN4_URI``; each with its ``..._MANAGEMENT_URI``; CI enables the plugin on
its 4.0 node while the 4.3 leg runs) is exported from it,
imported into the broker under test (4.3.6 in CI's 4.3 leg, where the plugin cannot start) by
``rtroute definitions import``, and routes the plugin README's table A-F through ``rtroute
proxy`` there, with its alternate exchange and its exchange-to-exchange binding."""
from __future__ import annotations

import json
import uuid
from urllib.parse import quote

import pika
import pytest

from rtroute.amqp import ManagementClient
from rtroute.sidecar.demo import PLUGIN_QUEUES, PLUGIN_README_TABLE

from ..conftest import MANAGEMENT_URI, broker_uri_for, wait_for
from .conftest import drain
from .plugin_brokers import (
    SOURCES,
    export_vhost,
    in_vhost,
    make_vhost,
    plugin_broker,
    rtroute_cli,
)

pytestmark = pytest.mark.broker

EXCHANGE = "orders"
UNROUTED_KEY = "nothing.matches.this"


def _plugin_topology(uri: str) -> None:
    """What a plugin user has: an x-rtopic exchange with an alternate exchange, queues A-F
    bound with the README's keys, an exchange bound from it, and messages still queued."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        ch.exchange_declare("orders.unrouted", "fanout", durable=True)
        ch.queue_declare("unrouted", durable=True)
        ch.queue_bind("unrouted", "orders.unrouted")
        ch.exchange_declare(EXCHANGE, "x-rtopic", durable=True,
                            arguments={"alternate-exchange": "orders.unrouted"})
        for queue, key in PLUGIN_QUEUES.items():
            ch.queue_declare(queue, durable=True)
            ch.queue_bind(queue, EXCHANGE, key)
        ch.exchange_declare("audit", "topic", durable=True)
        ch.exchange_bind("audit", EXCHANGE, PLUGIN_QUEUES["A"])
        ch.queue_declare("audit.all", durable=True)
        ch.queue_bind("audit.all", "audit", "#")
        ch.confirm_delivery()
        ch.basic_publish(EXCHANGE, "*.app1.mod1.info", b"before the move")
        assert ch.queue_declare("F", passive=True).method.message_count == 1  # the plugin routed
    finally:
        conn.close()


@pytest.mark.parametrize("label", sorted(SOURCES))
def test_a_plugin_brokers_export_imports_and_routes_the_plugins_table_through_the_proxy(
        label, mgmt, proxies, tmp_path):
    amqp, http = plugin_broker(label)
    source = ManagementClient(http)
    user = pika.URLParameters(amqp).credentials.username
    vhost = f"rtroute-test-migrate-{uuid.uuid4().hex[:6]}"
    make_vhost(source, vhost, user)
    try:
        _plugin_topology(in_vhost(amqp, vhost))
        exported = tmp_path / "from-plugin.json"
        exported.write_text(json.dumps(export_vhost(source, vhost)))
        target = MANAGEMENT_URI
        # into the plugin's own broker: refused whole, the plugin's exchange named
        refused = rtroute_cli("definitions", "import", str(exported), "--management-uri", http)
        assert refused.returncode == 3, refused.stderr
        assert f"exchange '{EXCHANGE}'" in refused.stderr and "exists as x-rtopic" in \
            refused.stderr
        assert not source.exchange_exists(f"{EXCHANGE}.bindings", vhost)

        done = rtroute_cli("definitions", "import", str(exported), "--management-uri", target)
        assert done.returncode == 0, done.stderr
        assert "1 x-rtopic exchange(s)" in done.stdout
        before = sorted(json.dumps(x, sort_keys=True) for x in mgmt.exchanges(vhost))
        again = rtroute_cli("definitions", "import", str(exported), "--management-uri", target)
        assert again.returncode == 0, again.stderr
        assert sorted(json.dumps(x, sort_keys=True) for x in mgmt.exchanges(vhost)) == before

        proxy = proxies()
        through = pika.BlockingConnection(pika.URLParameters(in_vhost(proxy.uri, vhost)))
        direct = pika.BlockingConnection(pika.URLParameters(broker_uri_for(vhost)))
        try:
            ch = through.channel()
            ch.confirm_delivery()
            # the proxy found the imported registration: the exchange is x-rtopic to clients
            wait_for(lambda: ch.basic_publish(EXCHANGE, "warm.up", b"") is None, timeout=15)
            # read through the proxy too: deliveries from NAME.bindings name NAME there
            d = through.channel()
            drain(d, "unrouted")
            for key, _queues in PLUGIN_README_TABLE:
                ch.basic_publish(EXCHANGE, key, key.encode())
            ch.basic_publish(EXCHANGE, UNROUTED_KEY, UNROUTED_KEY.encode())
            for queue in PLUGIN_QUEUES:
                expected = [(EXCHANGE, key) for key, queues in PLUGIN_README_TABLE
                            if queue in queues]
                assert drain(d, queue) == expected, queue
            # the exchange-to-exchange binding moved with the others, the alternate exchange
            # catches what matches no binding
            assert drain(d, "audit.all") == [
                (EXCHANGE, key) for key, queues in PLUGIN_README_TABLE if "A" in queues]
            assert drain(d, "unrouted") == [(EXCHANGE, UNROUTED_KEY)]
            # a definitions export carries no messages: what was queued stays on the old broker
            # (docs/migrate.md moves it with a shovel)
            assert direct.channel().queue_declare("F", passive=True).method.message_count == 0
        finally:
            through.close()
            direct.close()
    finally:
        source.request("DELETE", f"vhosts/{quote(vhost, safe='')}")
        if mgmt.request("GET", "vhosts") and any(
                v["name"] == vhost for v in mgmt.request("GET", "vhosts")):
            mgmt.request("DELETE", f"vhosts/{quote(vhost, safe='')}")


def test_one_vhosts_export_goes_into_the_vhost_named_with_vhost(mgmt, broker_version, tmp_path):
    """``GET /api/definitions/VHOST`` names no vhost in its items: ``--vhost`` says where it
    goes (``POST /api/definitions/VHOST``), and the output names it."""
    amqp, http = plugin_broker("plugin-3.10")
    source = ManagementClient(http)
    user = pika.URLParameters(amqp).credentials.username
    vhost = f"rtroute-test-migrate-{uuid.uuid4().hex[:6]}"
    make_vhost(source, vhost, user)
    make_vhost(mgmt, vhost, user)
    try:
        _plugin_topology(in_vhost(amqp, vhost))
        data = source.definitions(vhost)
        assert "vhost" not in data["exchanges"][0]
        given = tmp_path / "one-vhost.json"
        given.write_text(json.dumps(data))
        done = rtroute_cli("definitions", "import", str(given), "--management-uri",
                           MANAGEMENT_URI, "--vhost", vhost)
        assert done.returncode == 0, done.stderr
        assert f"vhost '{vhost}'" in done.stdout
        types = {x["name"]: x["type"] for x in mgmt.exchanges(vhost)}
        # RabbitMQ 4 gets a direct NAME.bindings, 3.x a topic one (as the proxy declares it)
        assert types[f"{EXCHANGE}.bindings"] == ("direct" if broker_version >= (4,) else "topic")
        assert types[EXCHANGE] == "fanout"
        keys = sorted(b.routing_key for b in mgmt.exchange_bindings(f"{EXCHANGE}.bindings",
                                                                    vhost)
                      if b.destination in PLUGIN_QUEUES)
        assert keys == sorted(PLUGIN_QUEUES.values())
    finally:
        source.request("DELETE", f"vhosts/{quote(vhost, safe='')}")
        mgmt.request("DELETE", f"vhosts/{quote(vhost, safe='')}")
