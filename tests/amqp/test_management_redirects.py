"""The management client never sends its credentials to another origin: a redirect to another
scheme, host or port is an error naming the (masked) target, never followed; one within the
origin is followed. Two tiny HTTP servers on loopback, no broker. (And a URL whose password
urllib reads as a port is refused without quoting it.)"""
from __future__ import annotations

import http.server
import json
import threading

import pytest

from rtroute.amqp import ManagementClient, ManagementError


class _Recorder(http.server.ThreadingHTTPServer):
    """Answers each request from ``routes`` (path -> (status, Location or body)) and records
    the path and Authorization header of every request."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, str]] = {}
        self.seen: list[tuple[str, str | None]] = []
        super().__init__(("127.0.0.1", 0), _Handler)
        self.thread = threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Recorder

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        status, text = self.server.routes.get(self.path, (200, json.dumps({"ok": True})))
        if 300 <= status < 400:
            self.send_response(status)
            self.send_header("Location", text)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def servers():
    api, elsewhere = _Recorder(), _Recorder()
    yield api, elsewhere
    for server in (api, elsewhere):
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_port_is_refused_and_gets_no_credentials(servers, code):
    api, elsewhere = servers
    api.routes["/api/overview"] = (code, f"{elsewhere.url}/api/overview")
    client = ManagementClient(f"{api.url}/", "fred", "Hunter2pw", timeout=5)
    with pytest.raises(ManagementError) as info:
        client.request("GET", "overview")
    assert elsewhere.seen == []
    message = str(info.value)
    assert f"{elsewhere.url}/api/overview" in message and "another origin" in message
    assert info.value.status == code
    assert api.seen == [("/api/overview", api.seen[0][1])] and api.seen[0][1].startswith("Basic ")


def test_the_refused_location_is_shown_masked(servers):
    api, elsewhere = servers
    target = elsewhere.url.replace("http://", "http://eve:St0len@") + "/api/overview"
    api.routes["/api/overview"] = (302, target)
    client = ManagementClient(f"http://fred:Hunter2pw@{api.url[7:]}/", timeout=5)
    with pytest.raises(ManagementError) as info:
        client.request("GET", "overview")
    assert "St0len" not in str(info.value) and "Hunter2pw" not in str(info.value)
    assert "eve:***@" in str(info.value)
    assert elsewhere.seen == []


def test_a_redirect_to_another_host_name_of_the_same_port_is_refused(servers):
    api, _elsewhere = servers
    other_name = api.url.replace("127.0.0.1", "localhost")
    api.routes["/api/overview"] = (302, f"{other_name}/api/target")
    client = ManagementClient(f"{api.url}/", "fred", "Hunter2pw", timeout=5)
    with pytest.raises(ManagementError, match="another origin"):
        client.request("GET", "overview")
    assert [path for path, _auth in api.seen] == ["/api/overview"]


def test_a_redirect_within_the_origin_is_followed_with_the_credentials(servers):
    api, _elsewhere = servers
    api.routes["/api/overview"] = (302, "/api/target")
    api.routes["/api/target"] = (200, json.dumps({"here": True}))
    client = ManagementClient(f"{api.url}/", "fred", "Hunter2pw", timeout=5)
    assert client.request("GET", "overview") == {"here": True}
    assert [path for path, _auth in api.seen] == ["/api/overview", "/api/target"]
    assert api.seen[0][1] == api.seen[1][1] and api.seen[1][1].startswith("Basic ")


def test_a_url_whose_password_reads_as_a_port_is_refused_without_it():
    with pytest.raises(ValueError, match="the port is not a number") as info:
        ManagementClient("http://fred:Hunter2pw/")
    assert "Hunter2pw" not in str(info.value)
