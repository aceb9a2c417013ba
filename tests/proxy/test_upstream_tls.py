"""amqps between the proxy and the broker: a node of our own with a TLS listener that asks for a
client certificate (a test CA made here); the proxy's ``--uri`` is ``amqps://`` with the CA, its
certificate and key. A broker whose certificate the proxy cannot verify is refused: the client's
connection ends at once and the proxy logs why."""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest

from rtroute.ops.netaddr import free_port

from ..broker_nodes import LocalNode, node_in_tempdir, rabbitmq_installed
from ..conftest import wait_for
from .test_tls import _make_ca

pytestmark = [pytest.mark.broker, pytest.mark.slow]
cryptography = pytest.importorskip("cryptography")


class TlsNode(LocalNode):
    """A node with a plain listener, a TLS one (client certificates required) and the
    management API; ``tls`` holds the CA, the server's and a client's certificate, and
    ``other`` a CA that signed nothing of it."""

    def __init__(self, base: Path) -> None:
        self.tls = _make_ca(_mkdir(base / "tls"))
        self.other = _make_ca(_mkdir(base / "other"))
        self.tls_port = free_port()
        super().__init__(base, f"rtroute-test-proxy-tls-{uuid.uuid4().hex[:6]}@localhost",
                         free_port(), free_port(), management_port=free_port(), config=(
                             f"listeners.ssl.default = 127.0.0.1:{self.tls_port}\n"
                             f"ssl_options.cacertfile = {self.tls['ca']}\n"
                             f"ssl_options.certfile = {self.tls['server']}\n"
                             f"ssl_options.keyfile = {self.tls['server_key']}\n"
                             "ssl_options.verify = verify_peer\n"
                             "ssl_options.fail_if_no_peer_cert = true\n"))

    def tls_uri(self, ca: Path) -> str:
        """The proxy's amqps URI: the server checked against ``ca``, the client certificate."""
        return (f"amqps://guest:guest@127.0.0.1:{self.tls_port}/%2F?cacertfile={ca}"
                f"&certfile={self.tls['client']}&keyfile={self.tls['client_key']}"
                "&verify=verify_peer")


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def tls_node() -> Iterator[TlsNode]:
    if not rabbitmq_installed():
        pytest.skip("rabbitmq-server not installed")
    with node_in_tempdir(TlsNode, "rtroute-proxy-tls-") as node:
        yield node


def test_a_client_reaches_an_amqps_broker_through_the_proxy(proxies, tls_node):
    proxy = proxies(broker=tls_node.tls_uri(tls_node.tls["ca"]),
                    management=tls_node.management_uri)
    name = f"rtroute-test-proxy-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare(name, "x-rtopic")
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(queue, name, "orders.eu.created")
        ch.basic_publish(name, "orders.*.created", b"over amqps")  # raises unless confirmed
        ch.basic_publish(name, "orders.us.*", b"matches nothing")
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        assert (method.exchange, method.routing_key, body) == \
            (name, "orders.*.created", b"over amqps")
        assert ch.queue_declare(queue, passive=True).method.message_count == 0
        # the client's connection and the proxy's catalog connection: both over TLS
        listed = tls_node.ctl("list_connections", "ssl", "--no-table-headers", "--quiet")
        assert listed.stdout.split() == ["true", "true"]
        ch.exchange_delete(name)
    finally:
        conn.close()


def test_a_broker_certificate_the_proxy_does_not_trust_is_refused(proxies, tls_node):
    """The client is refused as RabbitMQ refuses a connection during its handshake: a
    ``connection.close`` whose text says why, as the proxy's log does."""
    proxy = proxies(broker=tls_node.tls_uri(tls_node.other["ca"]),
                    management=tls_node.management_uri)
    started = time.monotonic()
    with pytest.raises(pika.exceptions.AMQPConnectionError) as raised:
        pika.BlockingConnection(pika.URLParameters(proxy.uri + "?connection_attempts=1"))
    assert time.monotonic() - started < 10  # an answer, not a hang
    # (pika calls any refusal before connection.tune a "probable authentication error")
    assert "(541) " in str(raised.value)
    assert "INTERNAL_ERROR - rtroute proxy: cannot reach the broker: " in str(raised.value)
    assert "certificate verify failed" in str(raised.value)
    wait_for(lambda: "certificate verify failed" in proxy.log_path.read_text(), timeout=10)
    log = proxy.log_path.read_text()
    assert f"cannot reach the broker amqps://guest:***@127.0.0.1:{tls_node.tls_port}" in log
