"""The operations endpoint: health, status JSON, Prometheus metrics, who may read and change,
and the limits that keep one client from taking the process's descriptors, threads or memory.

Real sockets on loopback; raw requests where a client library would be too polite."""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import resource
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from rtroute.ops.http import ListenError, OpsServer, merge_status, prometheus_text
from rtroute.ops.netaddr import is_loopback, split_listen

TOKEN = "s3cret"
JSON_HEADERS = {"Content-Type": "application/json"}


def status():
    return {
        "healthy": True,
        "exchanges": [{"name": "logs", "state": "running"}],
        "metrics": {
            "rtroute_routed_total": {"help": "Messages routed", "type": "counter",
                                     "samples": [({"exchange": 'lo"gs'}, 3)]},
        },
    }


class Recorder:
    """A route handler that records its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []

    def __call__(self, path: str, body: bytes):
        self.calls.append((path, body))
        return 201, {"path": path, "body": body.decode()}


@pytest.fixture
def handler():
    return Recorder()


@pytest.fixture
def serve(handler):
    """``serve(**kwargs) -> OpsServer`` started on a free loopback port, with
    ``POST /diverts/...`` going to ``handler``; stopped at teardown."""
    started = []

    def start(**kwargs) -> OpsServer:
        kwargs.setdefault("routes", {("POST", "/diverts/"): handler})
        server = OpsServer("127.0.0.1:0", kwargs.pop("status", status), **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def server(serve):
    return serve(token=TOKEN)


def get(server, path, method="GET", data=None, headers=None):
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", data=data,
                                 method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def bearer(token=TOKEN, **headers):
    return {"Authorization": f"Bearer {token}", **headers}


def raw(server, request: bytes, timeout: float = 5.0) -> tuple[int, bytes]:
    """Sends ``request`` as is and reads the answer until the server closes: (code, body)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
        sock.sendall(request)
        answer = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def post_head(server, length: str, token: str | None = None, **headers: str) -> bytes:
    lines = ["POST /diverts/x HTTP/1.1", f"Host: 127.0.0.1:{server.port}",
             f"Content-Length: {length}", "Content-Type: application/json"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def open_sockets() -> set[str]:
    """The sockets this process holds, by inode (``socket:[N]``): an inode is not reused while
    the test runs, so a socket closed by something else meanwhile (another test's garbage) cannot
    hide one this test leaked, as a count of descriptors could."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed between the listing and the read
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:"):
                found.add(target)
    return found


# ------------------------------------------------------------------------------ what it serves


def test_healthz_status_and_metrics(server):
    assert get(server, "/healthz") == (200, '{"healthy": true}')
    assert get(server, "/readyz") == (200, '{"healthy": true}')
    code, body = get(server, "/status")
    assert code == 200 and json.loads(body)["exchanges"][0]["name"] == "logs"
    assert "metrics" not in json.loads(body)
    code, body = get(server, "/metrics")
    assert code == 200 and 'rtroute_routed_total{exchange="lo\\"gs"} 3' in body
    assert get(server, "/nope")[0] == 404


def test_livez_answers_while_readyz_follows_the_health_of_the_status(serve):
    server = serve(status=lambda: {"healthy": False, "metrics": {}})
    assert get(server, "/livez") == (200, '{"alive": true}')
    assert get(server, "/readyz") == (503, '{"healthy": false}')
    assert get(server, "/healthz") == (503, '{"healthy": false}')


def test_readyz_says_why_not_when_the_status_does(serve):
    reason = "loading bindings of 'logs.bindings': 120,000 of ~300,000 read (9 s)"
    server = serve(status=lambda: {"healthy": False, "reason": reason, "metrics": {}})
    code, body = get(server, "/readyz")
    assert (code, json.loads(body)) == (503, {"healthy": False, "reason": reason})
    merged = merge_status({"healthy": True, "reason": None}, {"healthy": False, "reason": "x"})
    assert (merged["healthy"], merged["reason"]) == (False, "x")


def test_extra_routes_receive_path_and_body(server, handler):
    code, body = get(server, "/diverts/x", method="POST", data=b"{}",
                     headers=bearer(**JSON_HEADERS))
    assert code == 201 and json.loads(body) == {"path": "/diverts/x", "body": "{}"}
    assert handler.calls == [("/diverts/x", b"{}")]


def test_listen_parsing():
    assert split_listen("127.0.0.1:8419") == ("127.0.0.1", 8419)
    assert split_listen("[::1]:80") == ("::1", 80)
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("10.0.0.1")
    with pytest.raises(ValueError):
        split_listen("127.0.0.1")
    assert prometheus_text({"healthy": True}).endswith("rtroute_ready 1.0\n")


@pytest.mark.parametrize("healthy", [True, False])
def test_every_process_kind_has_a_ready_gauge_that_follows_readyz(healthy):
    text = prometheus_text({"healthy": healthy, "metrics": {}})
    assert f"rtroute_ready {float(healthy)}" in text.splitlines()


# ------------------------------------------------------------------------------ who may do what


def test_non_loopback_requires_a_token():
    with pytest.raises(ValueError, match="token"):
        OpsServer("0.0.0.0:0", status)


def test_changes_need_the_token_but_reads_do_not(server, handler):
    assert get(server, "/status")[0] == 200
    assert get(server, "/diverts/x", "POST", b"{}", JSON_HEADERS)[0] == 401
    assert get(server, "/diverts/x", "POST", b"{}", bearer("wrong", **JSON_HEADERS))[0] == 401
    assert get(server, "/diverts/x", "POST", b"{}", bearer(**JSON_HEADERS))[0] == 201
    assert get(server, "/diverts/x", "POST", b"{}",
               {"Authorization": f"bearer  {TOKEN}", **JSON_HEADERS})[0] == 201
    assert len(handler.calls) == 2


def test_metrics_are_readable_without_the_token_unless_reads_are_protected(serve):
    open_reads = serve(token=TOKEN)
    assert get(open_reads, "/metrics")[0] == 200
    assert get(open_reads, "/livez")[0] == 200
    protected = serve(token=TOKEN, protect_reads=True)
    for path in ("/metrics", "/status", "/readyz", "/livez"):
        assert get(protected, path)[0] == 401, path
    assert get(protected, "/metrics", headers=bearer())[0] == 200


def test_changes_without_a_token_are_refused_unless_allowed(serve, handler):
    closed = serve()
    code, body = get(closed, "/diverts/x", "POST", b"{}", JSON_HEADERS)
    assert code == 403
    message = json.loads(body)["error"]
    assert "[http] token" in message and "RTROUTE_HTTP_TOKEN" in message
    assert "allow_unauthenticated_changes = true" in message
    assert get(closed, "/diverts/x", "DELETE")[0] == 403
    assert handler.calls == []
    assert get(closed, "/status")[0] == 200

    allowed = serve(allow_unauthenticated_changes=True)
    assert get(allowed, "/diverts/x", "POST", b"{}", JSON_HEADERS)[0] == 201
    assert len(handler.calls) == 1


def test_non_ascii_authorization_is_unauthorized_without_a_traceback(serve, handler, capfd):
    server = serve(token=TOKEN, protect_reads=True)
    for token in ("s3crét".encode(), "s3crét".encode("latin-1"), b"\xff\xfe"):
        authorization = b"Authorization: Bearer " + token + b"\r\n"
        change = (b"POST /diverts/x HTTP/1.1\r\nHost: 127.0.0.1\r\n" + authorization
                  + b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        read = b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n" + authorization + b"\r\n"
        assert raw(server, change)[0] == 401
        assert raw(server, read)[0] == 401
    assert get(server, "/livez", headers=bearer())[0] == 200
    assert handler.calls == []
    assert capfd.readouterr().err == ""


def test_cross_origin_text_plain_post_is_refused_and_not_handled(serve, handler):
    server = serve(allow_unauthenticated_changes=True)  # the most open configuration
    host = f"127.0.0.1:{server.port}"
    form = {"Content-Type": "text/plain"}
    assert get(server, "/diverts/x", "POST", b'{"name": "x"}',
               {"Origin": "http://evil.example", **form})[0] == 403
    assert get(server, "/diverts/x", "POST", b'{"name": "x"}', form)[0] == 415
    assert get(server, "/diverts/x", "POST", b'{"name": "x"}',
               {"Origin": "http://evil.example", **JSON_HEADERS})[0] == 403
    assert get(server, "/diverts/x", "POST", b'{"name": "x"}',
               {"Origin": "null", **JSON_HEADERS})[0] == 403
    assert get(server, "/diverts/x", "POST", b'{"name": "x"}',
               {"Origin": f"http://127.0.0.1:{server.port + 1}", **JSON_HEADERS})[0] == 403
    assert handler.calls == []
    assert get(server, "/diverts/x", "POST", b"{}",
               {"Origin": f"http://{host}", **JSON_HEADERS})[0] == 201


def test_foreign_host_header_is_refused_against_dns_rebinding(serve):
    server = serve(token=TOKEN)
    port = server.port

    def with_host(host: str, path: str = "/status") -> int:
        return raw(server, f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())[0]

    assert with_host(f"evil.example:{port}") == 403
    assert with_host("evil.example") == 403
    assert with_host(f"0.0.0.0:{port}") == 403
    assert with_host(f"evil.example:{port}", "/metrics") == 403
    for host in (f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", "LOCALHOST",
                 f"[::1]:{port}", f"127.0.0.2:{port}"):
        assert with_host(host) == 200, host
    assert raw(server, b"GET /status HTTP/1.0\r\n\r\n")[0] == 200  # no Host: not a browser


def test_host_is_not_checked_beyond_loopback_where_the_token_guards():
    server = OpsServer("0.0.0.0:0", status, token=TOKEN, protect_reads=True).start()
    try:
        assert raw(server, b"GET /status HTTP/1.1\r\nHost: sidecar.internal\r\n"
                           b"Authorization: Bearer s3cret\r\n\r\n")[0] == 200
        assert raw(server, b"GET /status HTTP/1.1\r\nHost: sidecar.internal\r\n\r\n")[0] == 401
    finally:
        server.stop()


# ------------------------------------------------------------------------------------- limits


def test_half_open_connections_do_not_exhaust_descriptors(serve):
    bound = 32
    server = serve(max_connections=bound, request_timeout=60)
    fds_before, threads_before = open_fds(), threading.active_count()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    clients = []
    # room for our own 500 sockets, the server's bound and a little: a server holding one
    # descriptor per connection would run this process out of them
    resource.setrlimit(resource.RLIMIT_NOFILE, (fds_before + 500 + bound + 40, hard))
    try:
        for _ in range(500):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            sock.sendall(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            clients.append(sock)
        started = time.monotonic()
        assert get(server, "/readyz") == (200, '{"healthy": true}')
        assert time.monotonic() - started < 3
        held_by_server = open_fds() - fds_before - len(clients)
        assert held_by_server <= bound
        assert threading.active_count() <= threads_before
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for sock in clients:
            sock.close()


def test_slow_request_is_cut_after_the_timeout(serve):
    server = serve(request_timeout=1.0)
    started = time.monotonic()
    answer = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=0.2) as sock:
        sock.sendall(b"GET /status HTTP/1.1\r\n")
        while time.monotonic() - started < 5:
            try:
                chunk = sock.recv(1024)
            except socket.timeout:
                try:
                    sock.sendall(b"X-Trickle: a\r\n")  # one header at a time, never the end
                except OSError:
                    break
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
    elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 3, elapsed
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408 ")


def test_oversized_request_head_is_refused(serve):
    server = serve(max_header_bytes=1024)
    big = b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 2000 + b"\r\n\r\n"
    assert raw(server, big)[0] == 431
    assert get(server, "/livez")[0] == 200


def test_declared_huge_body_is_refused_without_reading_it(serve, handler):
    server = serve(token=TOKEN, request_timeout=60)
    started = time.monotonic()
    code, body = raw(server, post_head(server, str(4 * 2**30), TOKEN))  # no body follows
    assert code == 413 and "65536" in json.loads(body)["error"]
    assert time.monotonic() - started < 2
    assert raw(server, post_head(server, "65537", TOKEN) + b"x" * 65537)[0] == 413
    assert raw(server, post_head(server, "9" * 40, TOKEN))[0] == 413
    assert handler.calls == []


@pytest.mark.parametrize("length", ["-1", "abc", "1e3", "+5", "0x10", "5, 5", ""])
def test_negative_or_non_numeric_content_length_is_a_bad_request(serve, handler, capfd,
                                                                 length):
    server = serve(token=TOKEN)
    code, body = raw(server, post_head(server, length, TOKEN) + b"{}")
    assert code == 400 and "Content-Length" in json.loads(body)["error"]
    assert handler.calls == [] and capfd.readouterr().err == ""


def test_wrong_token_is_refused_before_the_body_is_read(serve, handler):
    server = serve(token=TOKEN, request_timeout=60)
    started = time.monotonic()
    assert raw(server, post_head(server, str(4 * 2**30), "wrong"))[0] == 401
    assert raw(server, post_head(server, "1000", None))[0] == 401
    assert time.monotonic() - started < 2
    assert handler.calls == []


def test_expect_continue_is_answered_only_for_admitted_requests(serve, handler):
    server = serve(token=TOKEN)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(post_head(server, "2", TOKEN, Expect="100-continue"))
        assert sock.recv(1024) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"{}")
        assert sock.recv(1024).startswith(b"HTTP/1.1 201 ")
    assert raw(server, post_head(server, "2", "wrong", Expect="100-continue"))[0] == 401
    assert handler.calls == [("/diverts/x", b"{}")]


def test_chunked_bodies_are_refused(serve):
    server = serve(token=TOKEN)
    request = (f"POST /diverts/x HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
               "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
               "2\r\n{}\r\n0\r\n\r\n").encode()
    assert raw(server, request)[0] == 411


def test_new_connections_get_503_while_every_slot_is_being_answered(serve):
    release, entered = threading.Event(), threading.Semaphore(0)

    def slow(_path, _body):
        entered.release()
        release.wait(10)
        return 200, {}

    server = serve(token=TOKEN, routes={("GET", "/slow"): slow}, max_connections=2, workers=2)
    results = []
    threads = [threading.Thread(target=lambda: results.append(get(server, "/slow")))
               for _ in range(2)]
    for t in threads:
        t.start()
    try:
        assert entered.acquire(timeout=5) and entered.acquire(timeout=5)
        assert raw(server, b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")[0] == 503
    finally:
        release.set()
        for t in threads:
            t.join(10)
    assert [code for code, _ in results] == [200, 200]
    assert get(server, "/livez")[0] == 200


# ----------------------------------------------------------------------------------- failures


def test_handler_exception_answers_500_and_is_logged_once(serve, caplog, capfd):
    def broken(_path, _body):
        raise RuntimeError("boom")

    def broken_status():
        raise KeyError("healthy")

    server = serve(routes={("GET", "/broken"): broken}, status=broken_status)
    with caplog.at_level(logging.INFO, logger="rtroute.http"):
        code, body = get(server, "/broken")
        assert code == 500 and "boom" not in body
        assert get(server, "/status")[0] == 500
        assert get(server, "/livez")[0] == 200
    errors = [r for r in caplog.records if r.name == "rtroute.http"]
    assert len(errors) == 2
    assert "GET /broken failed: RuntimeError: boom" in errors[0].getMessage()
    assert "GET /status failed: KeyError" in errors[1].getMessage()
    assert capfd.readouterr().err == ""


def test_port_in_use_raises_a_clear_error(server):
    listen = f"127.0.0.1:{server.port}"
    with pytest.raises(ListenError) as caught:
        OpsServer(listen, status)
    assert str(caught.value) == f"http listen {listen}: address already in use"
    assert isinstance(caught.value, OSError) and caught.value.errno == errno.EADDRINUSE
    assert get(server, "/livez")[0] == 200


def test_stop_closes_every_socket():
    sockets_before = open_sockets()
    server = OpsServer("127.0.0.1:0", status).start()
    half_open = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    half_open.sendall(b"GET /")
    assert get(server, "/livez")[0] == 200
    server.stop()
    assert half_open.recv(1024) == b""
    half_open.close()
    deadline = time.monotonic() + 5  # the worker closes its socket just after answering
    while open_sockets() - sockets_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not open_sockets() - sockets_before
