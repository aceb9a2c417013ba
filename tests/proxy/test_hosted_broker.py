"""The README's quick start on a hosted broker, as written, against a node of our own that looks
like one from outside: AMQP only over TLS (amqps), the management API only over HTTPS, a user
with the ``monitoring`` tag and no plugin installed by us (management and event exchange on, as
hosted RabbitMQ offers them). Only the host, the ports and the CA change: a hosted broker's
certificate is signed by a public CA, this node's by a test CA, given as ``cacertfile``."""
from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from rtroute.ops.netaddr import free_port

from ..broker_nodes import LocalNode, node_in_tempdir, rabbitmq_installed
from ..conftest import wait_for
from ..processes import port_open, stop_group
from .test_tls import _make_ca

pytestmark = [pytest.mark.broker, pytest.mark.slow]
cryptography = pytest.importorskip("cryptography")

README = Path(__file__).resolve().parents[2] / "README.md"
HOSTED = "b-1234.mq.example.com"


class HostedNode(LocalNode):
    """amqps for clients, the management API over https only (no plain http listener)."""

    def __init__(self, base: Path) -> None:
        tls = base / "tls"
        tls.mkdir(parents=True)
        self.tls = _make_ca(tls)
        self.tls_port, self.https_port = free_port(), free_port()
        super().__init__(
            base, f"rtroute-test-hosted-{uuid.uuid4().hex[:6]}@localhost", free_port(),
            free_port(), plugins=("rabbitmq_management", "rabbitmq_event_exchange"), config=(
                f"listeners.ssl.default = 127.0.0.1:{self.tls_port}\n"
                f"ssl_options.cacertfile = {self.tls['ca']}\n"
                f"ssl_options.certfile = {self.tls['server']}\n"
                f"ssl_options.keyfile = {self.tls['server_key']}\n"
                "ssl_options.verify = verify_none\n"
                "ssl_options.fail_if_no_peer_cert = false\n"
                f"management.ssl.port = {self.https_port}\n"
                "management.ssl.ip = 127.0.0.1\n"
                f"management.ssl.cacertfile = {self.tls['ca']}\n"
                f"management.ssl.certfile = {self.tls['server']}\n"
                f"management.ssl.keyfile = {self.tls['server_key']}\n"))


@pytest.fixture(scope="module")
def hosted() -> Iterator[HostedNode]:
    if not rabbitmq_installed():
        pytest.skip("rabbitmq-server not installed")
    with node_in_tempdir(HostedNode, "rtroute-hosted-") as node:
        node.ctl("add_user", "rtroute", "secret")
        node.ctl("set_permissions", "rtroute", ".*", ".*", ".*")
        node.ctl("set_user_tags", "rtroute", "monitoring")
        yield node


def _readme_hosted_snippet() -> str:
    text = README.read_text()
    start = text.index(f"export RTROUTE_URI='amqps://rtroute:secret@{HOSTED}")
    return text[start:text.index("```", start)]


def test_the_readme_hosted_quick_start_serves_clients_as_written(hosted, tmp_path):
    snippet = _readme_hosted_snippet()
    listen = free_port()
    # what changes from the README: the host and ports, and the test CA a public one stands for
    ours = (snippet
            .replace(f"{HOSTED}:5671/%2F'",
                     f"localhost:{hosted.tls_port}/%2F?cacertfile={hosted.tls['ca']}'")
            .replace(f"https://{HOSTED}/", f"https://localhost:{hosted.https_port}/")
            .replace("127.0.0.1:5680", f"127.0.0.1:{listen}"))
    assert HOSTED not in ours and "5680" not in ours, ours
    with pytest.raises((OSError, http.client.HTTPException)):  # no plain http API, as hosted
        urllib.request.urlopen(f"http://127.0.0.1:{hosted.https_port}/api/overview", timeout=3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RTROUTE_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    log = tmp_path / "proxy.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", "-c", "set -euo pipefail\n" + ours], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def listening() -> bool:
            assert proc.poll() is None, log.read_text()
            return port_open(listen)

        wait_for(listening, 30)
        name = f"rtroute-test-hosted-{uuid.uuid4().hex[:8]}"
        conn = pika.BlockingConnection(pika.URLParameters(
            f"amqp://guest:guest@127.0.0.1:{listen}/%2F"))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare(name, "x-rtopic")
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(queue, name, "orders.eu.created")
        ch.basic_publish(name, "orders.*.created", b"through a hosted broker")
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        assert (method.exchange, method.routing_key, body) == \
            (name, "orders.*.created", b"through a hosted broker")
        # the client's connection (its own user) and the proxy's (rtroute): both over TLS
        listed = hosted.ctl("list_connections", "user", "ssl", "--no-table-headers", "--quiet")
        assert sorted(listed.stdout.split()) == ["guest", "rtroute", "true", "true"], listed.stdout
        assert re.search(r"^rtroute\s+true$", listed.stdout, re.MULTILINE), listed.stdout
        ch.exchange_delete(name)
        conn.close()
    finally:
        stop_group(proc, log)
    output = log.read_text()
    assert "Traceback" not in output, output
    assert f"amqps://rtroute:***@localhost:{hosted.tls_port}" in output, output
    assert "secret" not in output
