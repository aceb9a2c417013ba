"""The management client honours an amqps URI's TLS settings for an https API: a private CA
(cacertfile) is trusted, and without it the API is refused (before: the system CAs only, so a
private CA failed). The server is a local https listener with a certificate of that CA."""
from __future__ import annotations

import http.server
import json
import shutil
import ssl
import threading
from pathlib import Path

import pytest

from rtroute.amqp import ManagementClient, ManagementError

from ..shovel.conftest import _make_certificates


@pytest.fixture(scope="module")
def https_api(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    certs: Path = tmp_path_factory.mktemp("tls")
    _make_certificates(certs)

    class Overview(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = json.dumps({"cluster_name": "tls-test", "rabbitmq_version": "4.0.5"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Overview)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs / "server.pem", certs / "server.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield certs, f"https://localhost:{server.server_address[1]}/"
    server.shutdown()


def test_the_amqps_uris_private_ca_is_trusted_by_the_management_client(https_api):
    certs, url = https_api
    uri = f"amqps://guest:guest@localhost:5671/%2F?cacertfile={certs / 'ca.pem'}"
    client = ManagementClient.from_amqp_uri(uri, url, timeout=5)
    assert client.overview()["cluster_name"] == "tls-test"


def test_without_that_ca_the_api_is_refused(https_api):
    certs, url = https_api
    uri = f"amqps://guest:guest@localhost:5671/%2F?cacertfile={certs / 'other-ca.pem'}"
    with pytest.raises(ManagementError, match="CERTIFICATE_VERIFY_FAILED|certificate verify"):
        ManagementClient.from_amqp_uri(uri, url, timeout=5).overview()
