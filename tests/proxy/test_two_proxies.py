"""Two proxies in front of one broker (docs/proxy.md: several proxies serve one broker): a
client's bind-ok through one means the binding routes through the other at once, as with the
plugin, where bind-ok means routable from every connection (rtroute.proxy.sync)."""
from __future__ import annotations

import pika
import pytest

pytestmark = pytest.mark.broker
ROUNDS = 1000


def test_a_publish_through_another_proxy_right_after_bind_ok_is_routed(proxies, exchange_name):
    first, second = proxies(), proxies()
    binder = pika.BlockingConnection(pika.URLParameters(first.uri))
    publisher = pika.BlockingConnection(pika.URLParameters(second.uri))
    try:
        ch = binder.channel()
        ch.exchange_declare(exchange_name, "x-rtopic", auto_delete=False)
        queue = ch.queue_declare("", exclusive=True).method.queue
        out = publisher.channel()
        out.confirm_delivery()
        unroutable = 0
        for i in range(ROUNDS):
            ch.queue_bind(queue, exchange_name, f"round{i}.new")
            # right after bind-ok, a key only the new binding matches, through the other proxy
            try:
                out.basic_publish(exchange_name, f"round{i}.*", str(i).encode(), mandatory=True)
            except pika.exceptions.UnroutableError:
                unroutable += 1
        got = ch.queue_declare(queue, passive=True).method.message_count
        assert (unroutable, got) == (0, ROUNDS)
    finally:
        publisher.close()
        binder.close()


def test_an_exchange_declared_through_one_proxy_is_x_rtopic_through_the_other(
        proxies, exchange_name):
    first, second = proxies(), proxies()
    declarer = pika.BlockingConnection(pika.URLParameters(first.uri))
    publisher = pika.BlockingConnection(pika.URLParameters(second.uri))
    try:
        out = publisher.channel()
        out.confirm_delivery()
        out.basic_publish("amq.topic", "warm", b"")  # the second proxy's catalog is up
        ch = declarer.channel()
        ch.exchange_declare(exchange_name, "x-rtopic", auto_delete=False)
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(queue, exchange_name, "a.b")
        out.basic_publish(exchange_name, "a.*", b"right after", mandatory=True)
        assert ch.queue_declare(queue, passive=True).method.message_count == 1
    finally:
        publisher.close()
        declarer.close()
