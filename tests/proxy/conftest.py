"""The proxy under test runs as a real `rtroute proxy` process, so that it can be killed -9."""
from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from rtroute.ops.netaddr import free_port

from ..conftest import BROKER_URI, MANAGEMENT_URI, wait_for
from ..processes import RtrouteProcess


def proxy_uri(port: int, scheme: str = "amqp", query: str = "") -> str:
    """The broker under test's URI (its credentials and vhost) with the proxy's port."""
    parsed = pika.URLParameters(BROKER_URI)
    vhost = "%2F" if parsed.virtual_host == "/" else parsed.virtual_host
    user, password = parsed.credentials.username, parsed.credentials.password
    return f"{scheme}://{user}:{password}@127.0.0.1:{port}/{vhost}{query}"


def drain(ch, queue: str) -> list[tuple[str, str]]:
    """Every message of ``queue`` (taken, auto-ack) as (exchange, body text), in order."""
    got = []
    while True:
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return got
        got.append((method.exchange, body.decode()))


def assert_round_trip(ch, exchange: str, body: bytes) -> None:
    """On channel ``ch`` through a proxy: ``exchange`` declared x-rtopic, a queue bound with
    ``a.b``, a confirmed publish to ``a.*`` that reaches it, delivered from ``exchange``."""
    ch.confirm_delivery()
    ch.exchange_declare(exchange, "x-rtopic")
    queue = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(queue, exchange, "a.b")
    ch.basic_publish(exchange, "a.*", body)
    method, _props, got = ch.basic_get(queue, auto_ack=True)
    assert (method.exchange, got) == (exchange, body)


def routed(ch, exchange: str, key: str, body: bytes = b"") -> bool:
    """Publishes ``key`` mandatory on a confirming channel: True if routed, False if
    returned (for :func:`wait_for`, until a binding made elsewhere counts)."""
    try:
        ch.basic_publish(exchange, key, body, mandatory=True)
        return True
    except pika.exceptions.UnroutableError:
        return False


class ProxyProcess(RtrouteProcess):
    """One `rtroute proxy` process, in front of the broker under test unless ``broker`` and
    ``management`` name another (its AMQP URI, amqps too, and its management API)."""

    def __init__(self, log: Path, *args: str, port: int | None = None,
                 broker: str = BROKER_URI, management: str | None = MANAGEMENT_URI) -> None:
        port = port or free_port()
        listen = [] if "--listen-tls" in args else ["--listen", f"127.0.0.1:{port}"]
        super().__init__("rtroute.cli", [
            "proxy", *listen, "--uri", broker,
            *(["--management-uri", management] if management else []), *args],
            log, http=False, port=port)
        wait_for(self.listening, timeout=30)

    @property
    def uri(self) -> str:
        return proxy_uri(self.port)

    def listening(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"rtroute proxy exited: {self.log_path.read_text()[-2000:]}")
        return "listening on" in self.log_path.read_text()

    def stop(self) -> None:
        """Gracefully (SIGTERM), else killed after 10 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        super().stop()


@pytest.fixture
def proxies(tmp_path: Path, broker_uri: str) -> Iterator:
    """``proxies(*args, port=None, **kwargs)`` starts a proxy process (``kwargs``: see
    :class:`ProxyProcess`); all are stopped at the end."""
    started: list[ProxyProcess] = []

    def start(*args: str, port: int | None = None, **kwargs: str | None) -> ProxyProcess:
        proxy = ProxyProcess(tmp_path / f"proxy{len(started)}.log", *args, port=port, **kwargs)
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()


@pytest.fixture
def exchange_name(broker_uri: str) -> Iterator[str]:
    """A fresh exchange name; its layout is deleted at the end."""
    name = f"rtroute-test-proxy-{uuid.uuid4().hex[:8]}"
    yield name
    conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        ch = conn.channel()
        for ex in (name, f"{name}.bindings"):
            ch.exchange_delete(ex)
    finally:
        conn.close()
