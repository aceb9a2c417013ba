"""A client connected to `rtroute proxy` sees the x-rtopic plugin: the README example, with
confirms, a CC and a real BCC, deliveries naming the exchange as declared."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pika
import pika.exceptions
import pytest

from rtroute.sidecar.demo import PLUGIN_QUEUES, PLUGIN_README_TABLE

from ..conftest import wait_for
from ..node_amqplib import amqplib_script

pytestmark = pytest.mark.broker

BINDINGS = PLUGIN_QUEUES
# the plugin README's table: publish key -> queues
EXPECTED = dict(PLUGIN_README_TABLE)
CC_MESSAGE = ("nothing.matches", {"CC": ["server2.app2.mod1.warning"], "BCC": ["#.error"]}, "BD")
NODE_DIR = Path(__file__).parent / "node"


def expected_deliveries() -> dict[str, list[tuple[str, str]]]:
    """queue -> [(body, routing key)] in publish order."""
    out: dict[str, list[tuple[str, str]]] = {q: [] for q in BINDINGS}
    for i, (key, queues) in enumerate(EXPECTED.items()):
        for q in queues:
            out[q].append((str(i), key))
    for q in CC_MESSAGE[2]:
        out[q].append(("cc", CC_MESSAGE[0]))
    return out


def drain(ch, name: str) -> dict[str, list[tuple[str, str, str, dict]]]:
    got: dict[str, list] = {}
    for q in BINDINGS:
        got[q] = []
        while True:
            method, props, body = ch.basic_get(f"{name}.{q}", auto_ack=True)
            if method is None:
                break
            got[q].append((body.decode(), method.exchange, method.routing_key,
                           props.headers or {}))
    return got


def run_example(uri: str, name: str) -> dict[str, list[tuple[str, str, str, dict]]]:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare(name, "x-rtopic", durable=True)
        for q, key in BINDINGS.items():
            ch.queue_declare(f"{name}.{q}", exclusive=True)
            ch.queue_bind(f"{name}.{q}", name, key)
        for i, key in enumerate(EXPECTED):
            ch.basic_publish(name, key, str(i).encode())  # raises unless confirmed
        key, headers, _ = CC_MESSAGE
        ch.basic_publish(name, key, b"cc", pika.BasicProperties(headers=headers))
        return drain(ch, name)
    finally:
        conn.close()


def check(got: dict, name: str) -> None:
    want = expected_deliveries()
    for q in BINDINGS:
        assert [(body, key) for body, _, key, _ in got[q]] == want[q], q
        for body, exchange, _, headers in got[q]:
            assert exchange == name  # as declared, not NAME.bindings
            assert "BCC" not in headers
            if body == "cc":
                assert headers["CC"] == ["server2.app2.mod1.warning"]


def test_the_plugin_readme_example_through_the_proxy(proxies, exchange_name):
    proxy = proxies()
    check(run_example(proxy.uri, exchange_name), exchange_name)


def test_bindings_made_elsewhere_are_followed(proxies, exchange_name, broker_uri):
    proxy = proxies()
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    direct = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare(exchange_name, "x-rtopic", durable=True)
        other = direct.channel()  # a binding made straight on the broker, as with the sidecar
        queue = other.queue_declare("", exclusive=True).method.queue
        other.queue_bind(queue, f"{exchange_name}.bindings", "orders.eu.created")

        def routed() -> bool:
            ch.basic_publish(exchange_name, "orders.*.created", b"x")
            return other.queue_declare(queue, passive=True).method.message_count > 0

        wait_for(routed, timeout=15, interval=0.2)
    finally:
        conn.close()
        direct.close()


def test_mandatory_unroutable_comes_back_naming_the_exchange(proxies, exchange_name):
    proxy = proxies()
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        ch = conn.channel()
        ch.exchange_declare(exchange_name, "x-rtopic")
        returned = []
        ch.add_on_return_callback(lambda _c, method, _p, body: returned.append(
            (method.exchange, method.routing_key, body)))
        ch.basic_publish(exchange_name, "no.*.match", b"back", mandatory=True)
        conn.process_data_events(time_limit=1)
        wait_for(lambda: returned or conn.process_data_events(time_limit=0.2), timeout=10)
        assert returned == [(exchange_name, "no.*.match", b"back")]
    finally:
        conn.close()


def test_a_passive_declare_of_a_missing_exchange_names_it(proxies, exchange_name):
    proxy = proxies()
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as raised:
            ch.exchange_declare(exchange_name, "x-rtopic", passive=True)
        assert raised.value.reply_code == 404
        assert f"'{exchange_name}'" in raised.value.reply_text
    finally:
        conn.close()


def test_transactions_commit_rewritten_publishes(proxies, exchange_name):
    proxy = proxies()
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        ch = conn.channel()
        ch.exchange_declare(exchange_name, "x-rtopic")
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(queue, exchange_name, "a.b")
        ch.tx_select()
        ch.basic_publish(exchange_name, "a.*", b"1")
        assert ch.queue_declare(queue, passive=True).method.message_count == 0
        ch.tx_commit()
        assert ch.queue_declare(queue, passive=True).method.message_count == 1
    finally:
        conn.close()


@pytest.fixture(scope="module")
def node_client() -> Path:
    return amqplib_script(NODE_DIR, "rtopic.js")


def test_the_plugin_readme_example_from_node_amqplib(proxies, exchange_name, node_client):
    proxy = proxies()
    done = subprocess.run(["node", str(node_client), proxy.uri, exchange_name],
                          check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    got = {q: [tuple(d) for d in rows] for q, rows in json.loads(done.stdout).items()}
    check(got, exchange_name)


def test_name_bindings_type_follows_the_broker_version_and_redeclares_pass(
        proxies, exchange_name, mgmt, broker_version):
    """As the sidecar: direct on RabbitMQ 4 (indexed direct routing), topic on 3.x; declaring
    the x-rtopic exchange again (another client, after a restart) checks it, whatever type."""
    proxy = proxies()
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        ch = conn.channel()
        ch.exchange_declare(exchange_name, "x-rtopic", durable=True)
        expected = "direct" if broker_version >= (4,) else "topic"
        assert mgmt.exchange(f"{exchange_name}.bindings")["type"] == expected
        ch.exchange_declare(exchange_name, "x-rtopic", durable=True)
        ch.exchange_declare(exchange_name, "x-rtopic", passive=True)
    finally:
        conn.close()
