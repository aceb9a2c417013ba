"""The proxy under test runs as a real `rtroute proxy` process, so that it can be killed -9."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from rtroute.netaddr import free_port

from ..conftest import BROKER_URI, MANAGEMENT_URI, wait_for


def proxy_uri(port: int, scheme: str = "amqp", query: str = "") -> str:
    """The broker under test's URI (its credentials and vhost) with the proxy's port."""
    parsed = pika.URLParameters(BROKER_URI)
    vhost = "%2F" if parsed.virtual_host == "/" else parsed.virtual_host
    user, password = parsed.credentials.username, parsed.credentials.password
    return f"{scheme}://{user}:{password}@127.0.0.1:{port}/{vhost}{query}"


class ProxyProcess:
    """One `rtroute proxy` process."""

    def __init__(self, log: Path, *args: str, port: int | None = None) -> None:
        self.port = port or free_port()
        self.log_path = log
        self._log = open(log, "ab")  # noqa: SIM115 - the child writes to it until it exits
        listen = [] if "--listen-tls" in args else ["--listen", f"127.0.0.1:{self.port}"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rtroute.cli", "proxy", *listen, "--uri", BROKER_URI,
             "--management-uri", MANAGEMENT_URI, *args],
            stdout=self._log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        wait_for(self.listening, timeout=30)

    @property
    def uri(self) -> str:
        return proxy_uri(self.port)

    def listening(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"rtroute proxy exited: {self.log_path.read_text()[-2000:]}")
        return "listening on" in self.log_path.read_text()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


@pytest.fixture
def proxies(tmp_path: Path, broker_uri: str) -> Iterator:
    """``proxies(*args, port=None)`` starts a proxy process; all are stopped at the end."""
    started: list[ProxyProcess] = []

    def start(*args: str, port: int | None = None) -> ProxyProcess:
        proxy = ProxyProcess(tmp_path / f"proxy{len(started)}.log", *args, port=port)
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
