"""Fixtures for the amqp tests: the local broker, unique names cleaned up afterwards, and a pika
SelectConnection run in a background thread (the way the sidecar runs its ioloop)."""
from __future__ import annotations

import threading
import uuid
from typing import Any, Callable

import pika
import pytest

from rtroute.amqp import Backoff, ManagementClient, ReconnectingConnection, connect_blocking

from ..conftest import wait_for


class Names:
    """Unique queue/exchange names for one test; deletes them all at teardown."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.queues: list[str] = []
        self.exchanges: list[str] = []

    def queue(self, label: str = "q") -> str:
        name = f"rtroute-test.{self.tag}.{label}.{uuid.uuid4().hex[:8]}"
        self.queues.append(name)
        return name

    def exchange(self, label: str = "x") -> str:
        name = f"rtroute-test.{self.tag}.{label}.{uuid.uuid4().hex[:8]}"
        self.exchanges.append(name)
        return name

    def cleanup(self, uri: str) -> None:
        connection = connect_blocking(uri)
        try:
            channel = connection.channel()
            for name in self.queues:
                channel.queue_delete(name)
            for name in self.exchanges:
                channel.exchange_delete(name)
        finally:
            connection.close()


@pytest.fixture
def names(request: pytest.FixtureRequest, broker_uri: str):
    """Fresh names per test, deleted (queues and exchanges) after it."""
    tag = request.node.name.replace("[", ".").replace("]", "")[:40]
    created = Names(tag)
    yield created
    created.cleanup(broker_uri)


@pytest.fixture
def connection(broker_uri: str):
    """A BlockingConnection to the local broker."""
    conn = connect_blocking(broker_uri, connection_name="rtroute-test")
    yield conn
    if conn.is_open:
        conn.close()


@pytest.fixture
def channel(connection: pika.BlockingConnection):
    """A channel on :func:`connection`."""
    return connection.channel()


def message_count(uri: str, queue: str) -> int:
    """Exact current depth of a queue (passive declare; the management API lags)."""
    conn = connect_blocking(uri)
    try:
        return conn.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        conn.close()


@pytest.fixture
def depth(broker_uri: str) -> Callable[[str], int]:
    """``depth(queue)``: exact message count."""
    return lambda queue: message_count(broker_uri, queue)


class IoloopRunner:
    """A ReconnectingConnection whose ioloop runs in a background thread.

    ``on_ready`` (optional) is called in the ioloop on every (re)connect, like the sidecar's.
    ``call(fn)`` runs ``fn()`` in the ioloop thread and returns its result to the test thread.
    """

    def __init__(self, uri: str, connection_name: str, declarations: Any = (),
                 on_ready: Callable[..., Any] | None = None,
                 on_lost: Callable[[str], Any] | None = None) -> None:
        self.connection_name = connection_name
        self.readies: list[tuple[Any, Any, str | None]] = []
        self.losses: list[str] = []
        self._user_on_ready = on_ready
        self._user_on_lost = on_lost
        self.rc = ReconnectingConnection(
            uri, self._on_ready, on_lost=self._on_lost, declarations=declarations,
            backoff=Backoff(0.2, 1.0), connection_name=connection_name,
        )
        self.thread = threading.Thread(target=self.rc.run, daemon=True)

    def _on_ready(self, connection: Any, channel: Any, last_queue: str | None) -> None:
        self.readies.append((connection, channel, last_queue))
        if self._user_on_ready is not None:
            self._user_on_ready(connection, channel, last_queue)

    def _on_lost(self, reason: str) -> None:
        self.losses.append(reason)
        if self._user_on_lost is not None:
            self._user_on_lost(reason)

    def start(self, timeout: float = 10.0) -> IoloopRunner:
        self.thread.start()
        self.wait_ready(1, timeout)
        return self

    def wait_ready(self, count: int, timeout: float = 10.0) -> None:
        wait_for(lambda: len(self.readies) >= count, timeout)

    @property
    def connection(self) -> Any:
        return self.readies[-1][0]

    @property
    def channel(self) -> Any:
        return self.readies[-1][1]

    def call(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        done = threading.Event()
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
                box["error"] = exc
            done.set()

        self.rc.add_callback_threadsafe(run)
        if not done.wait(timeout):
            pytest.fail("ioloop call timed out")
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def stop(self) -> None:
        self.rc.stop()
        self.thread.join(10)


@pytest.fixture
def ioloop(broker_uri: str):
    """Factory: ``ioloop(declarations=(), on_ready=None, on_lost=None, uri=None)`` -> a started
    :class:`IoloopRunner`."""
    runners: list[IoloopRunner] = []

    def start(declarations: Any = (), on_ready: Callable[..., Any] | None = None,
              on_lost: Callable[[str], Any] | None = None,
              uri: str | None = None) -> IoloopRunner:
        name = f"rtroute-test-{uuid.uuid4().hex[:8]}"
        runner = IoloopRunner(uri or broker_uri, name, declarations, on_ready, on_lost)
        runners.append(runner)
        return runner.start()

    yield start
    for runner in runners:
        runner.stop()


def close_from_broker(mgmt: ManagementClient, connection_name: str, timeout: float = 10.0) -> None:
    """Close a connection through the management API, waiting until the API knows it (the
    connection list comes from statistics emitted every ~5 s)."""
    wait_for(lambda: mgmt.close_connections_named(connection_name, "test: forced close"),
             timeout, interval=0.2)


@pytest.fixture
def force_close(mgmt: ManagementClient) -> Callable[..., None]:
    """``force_close(connection_name)``: close it from the broker side."""
    return lambda name, timeout=10.0: close_from_broker(mgmt, name, timeout)

