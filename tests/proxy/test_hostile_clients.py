"""Hostile clients are normal: before the broker accepted a login the proxy buffers no more
than RabbitMQ would read (one frame of at most 4096 bytes before ``tune-ok``, the negotiated
``frame_max`` after), starts no work (no catalog thread, no broker connection of its own), and a
client whose vhost the proxy cannot follow is told so instead of waiting forever."""
from __future__ import annotations

import contextlib
import os
import socket
import struct
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pika
import pika.exceptions
import pytest

from rtroute.proxy.server import HANDSHAKE_TIMEOUT, MAX_UNAUTHENTICATED_PER_SOURCE

from ..conftest import BROKER_URI, broker_uri_for, wait_for
from .raw_client import PROTOCOL_HEADER, RawClient, connection_open, method, start_ok, tune_ok

pytestmark = pytest.mark.broker
_PARSED = pika.URLParameters(BROKER_URI)
USER, PASSWORD = _PARSED.credentials.username, _PARSED.credentials.password


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.fixture
def vhost(mgmt):
    """A fresh vhost the test user may use."""
    name = f"rtroute-test-proxy-vh-{uuid.uuid4().hex[:6]}"
    mgmt.request("PUT", f"vhosts/{quote(name, safe='')}", {})
    mgmt.request("PUT", f"permissions/{quote(name, safe='')}/{quote(USER, safe='')}",
                 {"configure": ".*", "write": ".*", "read": ".*"})
    yield name
    mgmt.request("DELETE", f"vhosts/{quote(name, safe='')}")


def test_a_giant_frame_before_authentication_is_refused_without_buffering_it(proxies):
    proxy = proxies()
    before = rss_mib(proxy.proc.pid)
    client = RawClient(proxy.port)
    client.send(PROTOCOL_HEADER)
    assert client.method_ids()[:2] == (10, 10)
    # a frame announcing 2 GiB, then zeros: RabbitMQ reads at most 4096 (3.x) or 8192 (4.3)
    # bytes before tune-ok
    client.send(struct.pack(">BHI", 1, 0, 2 ** 31))
    closed = False
    try:
        for _ in range(64):
            client.send(b"\x00" * (1 << 20))
    except OSError:
        closed = True
    assert closed or client.closed(timeout=10)
    assert rss_mib(proxy.proc.pid) < before + 32


def _too_large_frame_refusal(port: int, frame_type: int) -> tuple[int, str]:
    """The connection.close (code, text) that a frame of ``frame_type`` announcing 2 GiB gets
    on a channel opened after login, from whatever listens on ``port``."""
    client = RawClient(port)
    opened = client.handshake(USER, PASSWORD, _PARSED.virtual_host, frame_max=131072)
    assert opened is not None and opened[:2] == (10, 41)
    client.send(method(1, 20, 10, b"\x00"))  # channel.open
    assert client.method_ids()[:2] == (20, 11)
    client.send(struct.pack(">BHI", frame_type, 1, 2 ** 31))
    closing = client.method_ids()
    assert closing is not None and closing[:2] == (10, 50)  # connection.close
    assert client.closed()
    return struct.unpack_from(">H", closing[2])[0], closing[2][3:3 + closing[2][2]].decode()


@pytest.mark.parametrize("frame_type", [1, 2, 3])  # method, content header, body
def test_a_frame_larger_than_frame_max_after_login_is_refused_as_the_broker_does(proxies,
                                                                                 frame_type):
    proxy = proxies()
    code, text = _too_large_frame_refusal(proxy.port, frame_type)
    assert (code, text.split(" - ")[0]) == (501, "FRAME_ERROR")
    assert "frame_too_large" in text
    # the broker's own words, its frame's type included (before: always "type 1")
    assert (code, text) == _too_large_frame_refusal(_PARSED.port, frame_type)


def test_a_frame_with_a_bad_end_octet_is_refused_even_when_the_proxy_rewrites_it(
        proxies, exchange_name):
    proxy = proxies()
    client = RawClient(proxy.port)
    assert client.handshake(USER, PASSWORD, _PARSED.virtual_host)[:2] == (10, 41)
    client.send(method(1, 20, 10, b"\x00"))
    assert client.method_ids()[:2] == (20, 11)
    declare = method(1, 40, 10, b"\x00\x00" + bytes((len(exchange_name),)) +
                     exchange_name.encode() + b"\x08x-rtopic" + b"\x00" + b"\x00" * 4)
    client.send(declare[:-1] + b"\x00")  # exchange.declare x-rtopic, end octet 0x00
    closing = client.method_ids()
    assert closing is not None and closing[:2] == (10, 50)
    assert struct.unpack_from(">H", closing[2])[0] == 501


def test_pipelined_bad_logins_start_no_catalog_and_no_thread(proxies):
    proxy = proxies()
    wait_for(lambda: "connected to" in proxy.log_path.read_text(), timeout=30)
    baseline = threads(proxy.proc.pid)
    clients = []
    for i in range(50):
        client = RawClient(proxy.port)
        # start-ok with a wrong password, tune-ok and open of a made-up vhost, all at once
        client.send(PROTOCOL_HEADER + start_ok(USER, "wrong-" + uuid.uuid4().hex) +
                    tune_ok() + connection_open(f"made-up-{i}-{uuid.uuid4().hex[:6]}"))
        clients.append(client)
    for client in clients:
        assert client.closed(timeout=20)  # the broker refused the login
        client.close()
    # a thread per made-up vhost before the fix (50); the resolver's pool at most now
    assert threads(proxy.proc.pid) <= baseline + 8
    assert "made-up-" not in proxy.log_path.read_text()  # no catalog was ever started


def test_a_vhost_catalog_is_shared_and_stops_after_its_last_client(proxies, vhost):
    proxy = proxies()
    wait_for(lambda: "connected to" in proxy.log_path.read_text(), timeout=30)
    uri = broker_uri_for(vhost).replace(f":{_PARSED.port}/", f":{proxy.port}/")
    connections = [pika.BlockingConnection(pika.URLParameters(uri)) for _ in range(3)]
    for conn in connections:
        conn.channel().exchange_declare(f"x-{uuid.uuid4().hex[:6]}", "x-rtopic",
                                        auto_delete=True)
    log = proxy.log_path.read_text()
    assert log.count(f"proxy catalog of vhost {vhost!r} started") == 1  # shared
    peak = threads(proxy.proc.pid)
    for conn in connections:
        conn.close()
    wait_for(lambda: f"proxy catalog of vhost {vhost!r} stopped" in
             proxy.log_path.read_text(), timeout=30)
    wait_for(lambda: threads(proxy.proc.pid) < peak, timeout=30)  # its thread ended


def test_a_vhost_the_proxy_user_cannot_open_is_an_error_not_a_hang(proxies, vhost, mgmt):
    user, secret = f"rtroute-test-proxy-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    mgmt.request("PUT", f"users/{user}", {"password": secret, "tags": "management"})
    try:
        mgmt.request("PUT", f"permissions/%2F/{user}",
                     {"configure": ".*", "write": ".*", "read": ".*"})
        proxy = proxies(broker=broker_uri_for(credentials=f"{user}:{secret}"))
        uri = broker_uri_for(vhost).replace(f":{_PARSED.port}/", f":{proxy.port}/")
        started = time.monotonic()
        with pytest.raises(pika.exceptions.AMQPConnectionError) as refused:
            conn = pika.BlockingConnection(pika.URLParameters(uri))
            conn.channel()
        assert time.monotonic() - started < 20
        assert "541" in str(refused.value) or "cannot follow" in str(refused.value)
        assert "cannot follow the x-rtopic exchanges of vhost" in proxy.log_path.read_text()
    finally:
        mgmt.request("DELETE", f"users/{user}")


def _broker_sockets(pid: int, broker_port: int) -> int:
    """How many established TCP connections process ``pid`` has to ``broker_port``."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            count += remote_port == broker_port and fields[3] == "01" and fields[9] in inodes
    return count


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_idle_sockets_cost_the_broker_nothing_and_are_capped_per_source(proxies):
    # before: each accepted socket opened a broker connection before a byte arrived, with no
    # cap (2,000 idle sockets exhausted a node with 1,024 file descriptors)
    proxy = proxies()
    pid, port = proxy.proc.pid, _PARSED.port
    wait_for(lambda: _broker_sockets(pid, port) >= 1, timeout=20)  # the catalog's own
    baseline = _broker_sockets(pid, port)
    extra = 36
    idle = [socket.create_connection(("127.0.0.1", proxy.port))
            for _ in range(MAX_UNAUTHENTICATED_PER_SOURCE + extra)]
    try:
        # those beyond the cap are closed at once; the others wait, holding nothing upstream
        wait_for(lambda: sum(map(_closed_by_peer, idle)) == extra, timeout=10)
        assert _broker_sockets(pid, port) == baseline
        assert "have not logged in yet" in proxy.log_path.read_text()
        # and each of them is closed once its login is overdue, as RabbitMQ closes it
        wait_for(lambda: all(map(_closed_by_peer, idle)), timeout=HANDSHAKE_TIMEOUT + 10)
    finally:
        for sock in idle:
            sock.close()
    # the source is served again once they are gone
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    conn.close()
    wait_for(lambda: _broker_sockets(pid, port) == baseline, timeout=10)


def _header_of_payload(port: int, payload: int, frame_max: int = 8192) -> tuple[int, int]:
    """What whatever listens on ``port`` answers a publish (to the default exchange, in
    confirm mode) whose content header frame carries exactly ``payload`` bytes: the
    ``(class, method)`` of its first method frame (``basic.ack`` 60.80, ``connection.close``
    10.50)."""
    client = RawClient(port)
    try:
        opened = client.handshake(USER, PASSWORD, _PARSED.virtual_host, frame_max=frame_max)
        assert opened is not None and opened[:2] == (10, 41)
        client.send(method(1, 20, 10, b"\x00"))  # channel.open
        assert client.method_ids()[:2] == (20, 11)
        client.send(method(1, 85, 10, b"\x00"))  # confirm.select
        assert client.method_ids()[:2] == (85, 11)
        base = len(pika.frame.Header(1, 0, pika.BasicProperties(headers={"p": ""})).marshal())
        header = pika.frame.Header(1, 0, pika.BasicProperties(
            headers={"p": "x" * (payload - (base - 8))})).marshal()
        assert len(header) == payload + 8
        queue = f"rtroute-test-nowhere-{uuid.uuid4().hex[:6]}"
        client.send(method(1, 60, 40, b"\x00\x00" + bytes((0, len(queue))) + queue.encode()
                           + b"\x00") + header)  # basic.publish to "" (unroutable: acked)
        answer = client.method_ids()
        assert answer is not None
        return answer[:2]
    finally:
        client.close()


def test_a_content_header_of_frame_max_payload_bytes_is_taken_as_the_broker_takes_it(proxies):
    # RabbitMQ forgives the frame's 8 bytes of head and end (FRAME_SIZE_FUDGE): a payload of
    # frame_max is taken, one byte more closes the connection; the proxy refused the first
    # 8 bytes sooner
    proxy = proxies()
    for payload in (8192, 8193):
        assert _header_of_payload(proxy.port, payload) == \
            _header_of_payload(_PARSED.port, payload)
    assert _header_of_payload(proxy.port, 8192) == (60, 80)
    assert _header_of_payload(proxy.port, 8193) == (10, 50)
