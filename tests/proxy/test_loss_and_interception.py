"""What the proxy must never do: confirm what it routed nowhere, drop a ``mandatory`` message
silently, let a user who may not read an exchange receive its messages, keep an auto-delete
x-rtopic exchange alive after its last binding, or hang a client that reopens a channel."""
from __future__ import annotations

import threading
import uuid
from urllib.parse import quote

import pika
import pika.exceptions
import pytest

from ..conftest import BROKER_URI, broker_uri_for, wait_for

pytestmark = pytest.mark.broker
_PARSED = pika.URLParameters(BROKER_URI)


def proxied(uri: str, port: int) -> str:
    return uri.replace(f":{_PARSED.port}/", f":{port}/")


def test_a_mandatory_publish_after_a_plain_one_of_the_same_key_is_returned(
        proxies, exchange_name):
    proxy = proxies()
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare(exchange_name, "x-rtopic", auto_delete=True)
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(queue, exchange_name, "a.b")
        ch.basic_publish(exchange_name, "no.match", b"body")  # confirmed, routed nowhere
        with pytest.raises(pika.exceptions.UnroutableError):
            ch.basic_publish(exchange_name, "no.match", b"body", mandatory=True)
        ch.basic_publish(exchange_name, "no.match", b"body")  # no return asked for
    finally:
        conn.close()


def test_a_registration_by_a_user_who_cannot_read_the_exchange_is_ignored(
        proxies, exchange_name, mgmt, broker_uri):
    """The attack: NAME is another user's topic exchange; a user with read on rtroute.rtopic
    and configure/write on NAME.bindings declares NAME.bindings, binds a queue of theirs and
    registers it. Publishes to NAME through the proxy must still reach NAME's own queues."""
    name, bindings = exchange_name, f"{exchange_name}.bindings"
    user, secret = f"rtroute-test-attacker-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    own = f"^({bindings.replace('.', '[.]')}|{user}[.].*)$"
    mgmt.request("PUT", f"users/{user}", {"password": secret, "tags": ""})
    vhost = quote(_PARSED.virtual_host, safe="")
    mgmt.request("PUT", f"permissions/{vhost}/{user}",
                 {"configure": own, "write": own, "read": f"^(rtroute[.]rtopic|{own[2:-2]})$"})
    proxy = proxies()
    victim = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        vch = victim.channel()
        vch.exchange_declare(name, "topic", auto_delete=True)
        victim_queue = vch.queue_declare("", exclusive=True).method.queue
        vch.queue_bind(victim_queue, name, "orders.#")
        attacker = pika.BlockingConnection(pika.URLParameters(
            broker_uri_for(credentials=f"{user}:{secret}")))
        ach = attacker.channel()
        ach.exchange_declare(REGISTRY := "rtroute.rtopic", "direct", durable=True,
                             internal=True, passive=True)
        ach.exchange_declare(bindings, "fanout", auto_delete=True)
        stolen = ach.queue_declare(f"{user}.q", exclusive=True).method.queue
        ach.queue_bind(stolen, bindings, "")
        ach.exchange_bind(bindings, REGISTRY, name)
        wait_for(lambda: "ignoring the x-rtopic registration" in proxy.log_path.read_text(),
                 timeout=20)
        conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
        ch = conn.channel()
        ch.confirm_delivery()
        for i in range(20):
            ch.basic_publish(name, "orders.eu", str(i).encode())
        conn.close()
        wait_for(lambda: vch.queue_declare(victim_queue, passive=True)
                 .method.message_count == 20, timeout=10)
        assert ach.queue_declare(stolen, passive=True).method.message_count == 0
        attacker.close()
    finally:
        victim.close()
        mgmt.request("DELETE", f"users/{user}")


def test_an_auto_delete_x_rtopic_exchange_goes_with_its_last_binding(proxies, exchange_name):
    proxy = proxies()
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        ch = conn.channel()
        ch.exchange_declare(exchange_name, "x-rtopic", auto_delete=True)
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(queue, exchange_name, "a.b")
        ch.queue_unbind(queue, exchange_name, "a.b")

        def gone() -> bool:
            probe = conn.channel()
            try:
                probe.exchange_declare(exchange_name, "x-rtopic", passive=True)
            except pika.exceptions.ChannelClosedByBroker as exc:
                return exc.reply_code == 404
            probe.close()
            return False

        wait_for(gone, timeout=20)  # as the plugin: passive 404, a publish 404
        ch = conn.channel()
        ch.confirm_delivery()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            ch.basic_publish(exchange_name, "a.b", b"x")
        assert closed.value.reply_code == 404
    finally:
        conn.close()


def test_a_passive_x_rtopic_declare_of_another_exchange_is_ok_and_registers_nothing(
        proxies, exchange_name, mgmt):
    proxy = proxies()
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        ch = conn.channel()
        ch.exchange_declare(exchange_name, "topic", auto_delete=True)
        ch.exchange_declare(exchange_name, "x-rtopic", passive=True)  # as the plugin: ok
        registry = [b.routing_key for b in mgmt.exchange_bindings("rtroute.rtopic",
                                                                  _PARSED.virtual_host)]
        assert exchange_name not in registry
    finally:
        conn.close()


def test_reopening_a_channel_after_the_proxys_406_never_hangs(proxies, exchange_name):
    """A match set no header frame can carry is the proxy's own 406 (frame_max 8192 here, the
    least RabbitMQ 4.3 takes: 120 queues, each by its own 100-byte key, all matched by '#')."""
    proxy = proxies()
    uri = proxy.uri + ("&" if "?" in proxy.uri else "?") + "frame_max=8192"
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel(channel_number=1)
        ch.exchange_declare(exchange_name, "x-rtopic", auto_delete=True)
        queues = []
        for i in range(120):
            queue = ch.queue_declare("", exclusive=True).method.queue
            ch.queue_bind(queue, exchange_name, f"key-number-{i:04d}." + "w" * 85)
            queues.append(queue)
        ch.close()
        for _ in range(10):
            done = threading.Event()
            outcome: list = []

            def attempt(done: threading.Event = done, outcome: list = outcome) -> None:
                try:
                    channel = conn.channel(channel_number=1)
                    channel.confirm_delivery()
                    try:
                        channel.basic_publish(exchange_name, "#", b"too many")
                        outcome.append("confirmed")
                    except pika.exceptions.ChannelClosedByBroker as exc:
                        outcome.append(exc.reply_code)
                finally:
                    done.set()

            worker = threading.Thread(target=attempt, daemon=True)
            worker.start()
            # BlockingConnection is single-threaded: the test thread waits, pika's calls run
            # in the worker; a hang leaves `done` unset
            assert done.wait(20), "channel.open after the proxy's 406 hung"
            assert outcome == [406]
        ch = conn.channel(channel_number=1)
        ch.confirm_delivery()
        ch.basic_publish(exchange_name, "key-number-0001." + "w" * 85, b"one")
        assert ch.queue_declare(queues[1], passive=True).method.message_count == 1
    finally:
        conn.close()
