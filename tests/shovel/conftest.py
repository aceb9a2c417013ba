"""Fixtures for the shovel tests: a second RabbitMQ node (plain and TLS listeners), two vhosts
of the broker under test, unique queue names, message helpers, and shovels run in this process."""
from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pika
import pytest

from rtroute.amqp import ConfirmWindow, ManagementClient, NotFound, connect_blocking
from rtroute.config.rtroute_toml import loads
from rtroute.config.shovel import ShovelConfig
from rtroute.ops.netaddr import free_port
from rtroute.shovel.status import ShovelState
from rtroute.shovel.worker import ShovelWorker

from ..broker_nodes import LocalNode, node_in_tempdir, rabbitmq_installed
from ..conftest import BROKER_URI, wait_for

# ------------------------------------------------------------------------------ second node


class Node(LocalNode):
    """The second broker: a node of our own (see :class:`tests.broker_nodes.LocalNode`) with a
    plain listener and a TLS one that asks for a client certificate. Its name and ports are
    its own (free ports), so that test runs against several brokers may go on at once."""

    def __init__(self, base: Path) -> None:
        self.tls = base / "tls"
        self.tls_port = free_port()
        _make_certificates(self.tls)
        super().__init__(base, f"rtroute-test-2-{uuid.uuid4().hex[:8]}@localhost", free_port(),
                         free_port(), config=(
            f"listeners.ssl.default = 127.0.0.1:{self.tls_port}\n"
            f"ssl_options.cacertfile = {self.tls / 'ca.pem'}\n"
            f"ssl_options.certfile = {self.tls / 'server.pem'}\n"
            f"ssl_options.keyfile = {self.tls / 'server.key'}\n"
            "ssl_options.verify = verify_peer\n"
            "ssl_options.fail_if_no_peer_cert = true\n"))

    def tls_uri(self, ca: str = "ca.pem", verify: str = "verify_peer") -> str:
        """An amqps URI with the client certificate, checking the server against ``ca``."""
        return (f"amqps://guest:guest@localhost:{self.tls_port}/%2F?"
                f"cacertfile={self.tls / ca}&certfile={self.tls / 'client.pem'}"
                f"&keyfile={self.tls / 'client.key'}&verify={verify}"
                "&fail_if_no_peer_cert=true&server_name_indication=localhost")


def _make_certificates(out: Path) -> None:
    """A CA, a server certificate for localhost/127.0.0.1 and a client certificate; plus a
    second CA that signed nothing (to see verification fail)."""
    out.mkdir(parents=True, exist_ok=True)

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=out, check=True, capture_output=True)

    for ca in ("ca", "other-ca"):
        ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-subj", f"/CN=rtroute test {ca}")
    (out / "san.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for who in ("server", "client"):
        ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key", "-out",
            f"{who}.csr", "-subj", f"/CN={'localhost' if who == 'server' else 'shovel'}")
        ssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", f"{who}.pem", "-extfile", "san.cnf")


@pytest.fixture(scope="session")
def node2(broker_uri: str) -> Iterator[Node]:
    """A second broker on 127.0.0.1 (plain and TLS, free ports), for the whole session."""
    if not rabbitmq_installed() or shutil.which("openssl") is None:
        pytest.skip("rabbitmq-server or openssl not installed")
    with node_in_tempdir(Node, "rtroute-node2-") as node:
        yield node


# -------------------------------------------------------------------------------- vhosts


@pytest.fixture(scope="session")
def vhosts(mgmt: ManagementClient) -> Iterator[tuple[str, str]]:
    """Two fresh vhosts of the broker under test (guest may do anything in them)."""
    names = (f"rtroute-test-a-{uuid.uuid4().hex[:6]}", f"rtroute-test-b-{uuid.uuid4().hex[:6]}")
    for vhost in names:
        mgmt.request("PUT", f"vhosts/{_q(vhost)}", {})
        mgmt.request("PUT", f"permissions/{_q(vhost)}/guest",
                     {"configure": ".*", "write": ".*", "read": ".*"})
    yield names
    for vhost in names:
        try:
            mgmt.request("DELETE", f"vhosts/{_q(vhost)}")
        except NotFound:
            pass


def _q(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


# -------------------------------------------------------------------------------- names


class Names:
    """Unique queue/exchange names for one test; deleted on every broker used at teardown."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.made: list[tuple[str, str, str]] = []   # (uri, kind, name)

    def queue(self, label: str = "q", uri: str = BROKER_URI) -> str:
        name = f"rtroute-test.shovel.{self.tag}.{label}.{uuid.uuid4().hex[:6]}"
        self.made.append((uri, "queue", name))
        return name

    def exchange(self, label: str = "x", uri: str = BROKER_URI) -> str:
        name = f"rtroute-test.shovel.{self.tag}.{label}.{uuid.uuid4().hex[:6]}"
        self.made.append((uri, "exchange", name))
        return name

    def cleanup(self) -> None:
        by_uri: dict[str, list[tuple[str, str]]] = {}
        for uri, kind, name in self.made:
            by_uri.setdefault(uri, []).append((kind, name))
        for uri, items in by_uri.items():
            try:
                connection = connect_blocking(uri)
            except Exception:  # noqa: BLE001, S112 - a vhost or node already gone
                continue
            try:
                channel = connection.channel()
                for kind, name in items:
                    if kind == "queue":
                        channel.queue_delete(name)
                    else:
                        channel.exchange_delete(name)
            except Exception:  # noqa: BLE001, S110 - best effort
                pass
            finally:
                if connection.is_open:
                    connection.close()


@pytest.fixture
def names(request: pytest.FixtureRequest, broker_uri: str) -> Iterator[Names]:
    """Unique names, by default on the broker under test (so a test using them is a broker
    test), deleted at teardown."""
    tag = request.node.name.replace("[", ".").replace("]", "")[:40]
    made = Names(tag)
    yield made
    made.cleanup()


# ------------------------------------------------------------------------------ messages


def declare_queue(uri: str, queue: str, **kwargs: Any) -> None:
    """Declare ``queue``: durable unless ``kwargs`` say otherwise, since RabbitMQ 4.x deprecates
    transient non-exclusive queues (a broker denying them closes the connection)."""
    if not kwargs.get("exclusive"):
        kwargs.setdefault("durable", True)
    connection = connect_blocking(uri)
    try:
        connection.channel().queue_declare(queue, **kwargs)
    finally:
        connection.close()


def publish(uri: str, queue_or_key: str, count: int, exchange: str = "", start: int = 0,
            properties: Callable[[int], pika.BasicProperties] | pika.BasicProperties | None = None,
            body: Callable[[int], bytes] | None = None, persistent: bool = False) -> None:
    """Publish ``count`` messages with bodies ``b"<i>"`` (i from ``start``) and wait for
    every confirm."""
    connection = connect_blocking(uri)
    try:
        window = ConfirmWindow(connection.channel(), window=500)
        window.start()
        for i in range(start, start + count):
            if callable(properties):
                props = properties(i)
            elif properties is not None:
                props = properties
            else:
                props = pika.BasicProperties(delivery_mode=2 if persistent else None)
            window.publish(exchange, queue_or_key, body(i) if body else str(i).encode(), props)
        if not window.wait_for_confirms(60):
            raise RuntimeError("confirms missing")
    finally:
        connection.close()


def depth(uri: str, queue: str) -> int:
    """Exact current depth of a queue (passive declare)."""
    connection = connect_blocking(uri)
    try:
        return connection.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        connection.close()


def drain(uri: str, queue: str, idle: float = 0.5) -> list[tuple[Any, Any, bytes]]:
    """Every message in ``queue`` as (method, properties, body), consumed and acked."""
    connection = connect_blocking(uri)
    out = []
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=1000)
        for method, props, body in channel.consume(queue, inactivity_timeout=idle):
            if method is None:
                break
            out.append((method, props, body))
            channel.basic_ack(method.delivery_tag)
        channel.cancel()
    finally:
        connection.close()
    return out


def bodies(uri: str, queue: str) -> list[int]:
    """The integer bodies of every message in ``queue`` (consumed)."""
    return [int(body) for _m, _p, body in drain(uri, queue)]


# ------------------------------------------------------------------------------- shovels


def shovel_config(text: str) -> ShovelConfig:
    """One ``[[shovel]]`` table (TOML) as a config."""
    (config,) = loads(text).shovels
    return config


def toml_shovel(name: str, src: str, dst: str, extra: str = "",
                src_declarations: str = "[]", dst_declarations: str = "[]") -> str:
    return (f'[[shovel]]\nname = "{name}"\n'
            f'sources = {{ broker = "{src}", declarations = {src_declarations} }}\n'
            f'destinations = {{ broker = "{dst}", declarations = {dst_declarations} }}\n'
            f"{extra}\n")


class Shovels:
    """Workers started by a test; all stopped at teardown."""

    def __init__(self) -> None:
        self.workers: list[ShovelWorker] = []

    def start(self, config: ShovelConfig | str, **options: Any) -> ShovelWorker:
        if isinstance(config, str):
            config = shovel_config(config)
        worker = ShovelWorker(config, **options).start()
        self.workers.append(worker)
        return worker

    def stop_all(self) -> None:
        for worker in self.workers:
            worker.stop(2)
        for worker in self.workers:
            worker.join(15)


@pytest.fixture
def shovels() -> Iterator[Shovels]:
    started = Shovels()
    yield started
    started.stop_all()


def wait_state(worker: ShovelWorker, state: ShovelState, timeout: float = 10.0) -> None:
    wait_for(lambda: worker.status.state is state, timeout)


def wait_depth(uri: str, queue: str, count: int, timeout: float = 15.0) -> None:
    wait_for(lambda: depth(uri, queue) >= count, timeout)
