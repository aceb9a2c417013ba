"""The proxy in front of a broker that still runs the x-rtopic plugin, with the plugin's own
exchanges (docs/migrate.md, "side by side"): clients move to the proxy one at a time while the
others still use the plugin directly. Rule: where the broker has the x-rtopic exchange type, an
exchange not in rtroute's layout is the plugin's, and everything about it passes through the
proxy unchanged (declare, bind, publish, deliveries), so both kinds of client share ONE binding
table, the plugin's, and every queue gets every message once. Before: the declaration through
the proxy failed with ``received 'x-rtopic' but current is 'x-rtopic'``."""
from __future__ import annotations

import uuid

import pika
import pika.exceptions
import pytest

from .conftest import drain
from .plugin_brokers import plugin_broker

pytestmark = pytest.mark.broker


def test_a_plugin_exchange_is_shared_by_direct_clients_and_clients_through_the_proxy(proxies):
    amqp, http = plugin_broker("plugin-3.10")
    proxy = proxies(broker=amqp, management=http)
    name = f"rtroute-test.side-by-side.{uuid.uuid4().hex[:8]}"
    direct = pika.BlockingConnection(pika.URLParameters(amqp))
    user = pika.URLParameters(amqp).credentials
    through = pika.BlockingConnection(pika.URLParameters(
        f"amqp://{user.username}:{user.password}@127.0.0.1:{proxy.port}/%2F"))
    try:
        d, t = direct.channel(), through.channel()
        d.confirm_delivery()
        t.confirm_delivery()
        d.exchange_declare(name, "x-rtopic", auto_delete=True)
        t.exchange_declare(name, "x-rtopic", auto_delete=True)  # the plugin's, as it is
        qa = d.queue_declare("", exclusive=True).method.queue
        qb = t.queue_declare("", exclusive=True).method.queue
        d.queue_bind(qa, name, "a.b")
        t.queue_bind(qb, name, "a.b")
        t.basic_publish(name, "a.*", b"through the proxy")
        d.basic_publish(name, "*.b", b"direct")
        for ch, queue in ((d, qa), (t, qb)):
            assert sorted(drain(ch, queue)) == [(name, "direct"), (name, "through the proxy")]
        # NAME stayed the plugin's: no layout was made beside it
        assert d.exchange_declare(name, "x-rtopic", passive=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="NOT_FOUND"):
            direct.channel().exchange_declare(f"{name}.bindings", passive=True)
    finally:
        through.close()
        direct.close()
