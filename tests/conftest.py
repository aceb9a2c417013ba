"""Fixtures shared by every test package: the broker under test, its management API, polling.

The broker comes from the environment, so that one suite runs against RabbitMQ 3.x and 4.x:

- ``RTROUTE_TEST_URI``: its AMQP URI (default ``amqp://guest:guest@127.0.0.1:5672/%2F``, the
  local 3.10 node that ``scripts/test.sh`` starts);
- ``RTROUTE_TEST_MANAGEMENT_URI``: its management API. Derived (same host, port 15672, the
  AMQP credentials) only when the AMQP port is RabbitMQ's default; a broker on another port
  must name it, since nothing ties the two ports together (two nodes on one host differ in
  both) and a derived URI would silently reach another node;
- ``RTROUTE_TEST_RABBITMQCTL``: the command that controls its node (default ``rabbitmqctl``,
  the host's node; for the 4.x node of ``scripts/start-rabbitmq4.sh``:
  ``chroot /srv/trixie rabbitmqctl -n rabbit4@localhost``).

Every test that uses the ``broker_uri`` or ``mgmt`` fixture, directly or through another
fixture, is marked ``broker`` (``pytest -m broker`` selects them).
"""
from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any, Callable
from urllib.parse import quote

import pika
import pytest

from rtroute.amqp import ManagementClient, ManagementError, parse_uri
from rtroute.config.constants import DEFAULT_URI

from . import (
    every_broker,
    hypothesis_profiles,  # noqa: F401 - loads the RTROUTE_HYPOTHESIS profile
)

BROKER_URI = os.environ.get("RTROUTE_TEST_URI") or DEFAULT_URI
"""The AMQP URI of the broker under test (for module-level use; fixtures: ``broker_uri``)."""
BROKER_FIXTURES = ("broker_uri", "mgmt")


def _management_uri(uri: str) -> str | None:
    """``RTROUTE_TEST_MANAGEMENT_URI``, else the default one for a broker on a default port,
    else None (it cannot be known)."""
    explicit = os.environ.get("RTROUTE_TEST_MANAGEMENT_URI")
    if explicit:
        return explicit
    parsed = parse_uri(uri, strict=False)
    default = {"amqp": (5672, "http", 15672), "amqps": (5671, "https", 15671)}[parsed.scheme]
    if parsed.port != default[0]:
        return None
    host = parsed.host if ":" not in parsed.host else f"[{parsed.host}]"
    return f"{default[1]}://{host}:{default[2]}/"


MANAGEMENT_URI = _management_uri(BROKER_URI)
"""The management API of the broker under test, None when RTROUTE_TEST_MANAGEMENT_URI must
be given; its credentials, when it has none, are those of ``BROKER_URI``."""
_BROKER = parse_uri(BROKER_URI, strict=False)
BROKER_ADDRESS = (f"[{_BROKER.host}]" if ":" in _BROKER.host else _BROKER.host) + \
    f":{_BROKER.port}"
"""``HOST:PORT`` of the broker under test, as URIs spell it (``127.0.0.1:5672``)."""


def broker_uri_for(vhost: str = "/", credentials: str | None = None, query: str = "") -> str:
    """An AMQP URI of the broker under test with another vhost, other credentials (``user:pw``,
    already URI-encoded; default: those of ``BROKER_URI``) or a query (``heartbeat=30``)."""
    if credentials is None:
        credentials = f"{quote(_BROKER.username, safe='')}:{quote(_BROKER.password, safe='')}"
    return (f"{_BROKER.scheme}://{credentials}@{BROKER_ADDRESS}/{quote(vhost, safe='')}"
            + (f"?{query}" if query else ""))


def pytest_configure(config: pytest.Config) -> None:
    if MANAGEMENT_URI is None:
        raise pytest.UsageError(
            f"RTROUTE_TEST_URI={os.environ['RTROUTE_TEST_URI']!r} is not on RabbitMQ's default "
            "port: set RTROUTE_TEST_MANAGEMENT_URI to its management API too (for example "
            "http://127.0.0.1:15673/ for the node of scripts/start-rabbitmq4.sh)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``broker`` every test that reaches the broker through the fixtures, and
    ``every_broker`` those of them that run against every broker claimed
    (tests/every_broker.py)."""
    for item in items:
        if any(name in getattr(item, "fixturenames", ()) for name in BROKER_FIXTURES):
            item.add_marker(pytest.mark.broker)
    every_broker.mark(items, config)


def _broker_reachable(uri: str) -> bool:
    parsed = parse_uri(uri, strict=False)
    try:
        with socket.create_connection((parsed.host, parsed.port), timeout=1):
            return True
    except OSError:
        return False


def management_client(timeout: float = 5) -> ManagementClient:
    """A management API client for the broker under test."""
    return ManagementClient.from_amqp_uri(BROKER_URI, MANAGEMENT_URI, timeout=timeout)


def _check_same_broker(client: ManagementClient) -> None:
    """Fail unless the management API belongs to the node that ``BROKER_URI`` reaches: a wrong
    RTROUTE_TEST_MANAGEMENT_URI would otherwise test one broker's bindings against another's."""
    connection = pika.BlockingConnection(pika.URLParameters(BROKER_URI))
    try:
        amqp = connection._impl.server_properties  # pika keeps them on the impl only
    finally:
        connection.close()
    overview = client.overview()
    amqp_side = (_text(amqp.get("cluster_name")), _text(amqp.get("version")))
    http_side = (overview.get("cluster_name"), overview.get("rabbitmq_version"))
    if amqp_side != http_side:
        pytest.fail(f"RTROUTE_TEST_MANAGEMENT_URI ({client.base_url}) answers for cluster "
                    f"{http_side[0]!r} (RabbitMQ {http_side[1]}) but RTROUTE_TEST_URI reaches "
                    f"{amqp_side[0]!r} (RabbitMQ {amqp_side[1]})")


# the stream port of each broker of the test legs (scripts/ensure-rabbitmq.sh,
# scripts/start-rabbitmq4.sh): the stream source reads over the stream protocol there
STREAM_PORTS = {5672: 5552, 5673: 5553, 5674: 5554}


def stream_uri_for_test(amqp_uri: str) -> str | None:
    """The test broker's stream URI: RTROUTE_TEST_STREAM_URI (``off``: None), else the AMQP
    URI's on the port of :data:`STREAM_PORTS` (None for another AMQP port)."""
    from urllib.parse import urlsplit

    from rtroute.amqp.stream_protocol import stream_uri_for

    given = os.environ.get("RTROUTE_TEST_STREAM_URI")
    if given:
        return None if given == "off" else given
    parts = urlsplit(amqp_uri)
    port = STREAM_PORTS.get(parts.port or 5672)
    return None if port is None else stream_uri_for(amqp_uri).replace(":5552/", f":{port}/")


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


@pytest.fixture(scope="session")
def broker_uri() -> str:
    """The AMQP URI of the broker under test, once it answers and its management API is its
    own. Broker tests are skipped when nothing listens there, unless RTROUTE_REQUIRE_BROKER=1
    (the README test command) makes that a failure."""
    if not _broker_reachable(BROKER_URI):
        where = parse_uri(BROKER_URI, strict=False)
        message = f"no RabbitMQ on {where.host}:{where.port}"
        if os.environ.get("RTROUTE_REQUIRE_BROKER") == "1":
            pytest.fail(f"{message} (scripts/test.sh starts one)")
        pytest.skip(message)
    _check_same_broker(management_client())
    return BROKER_URI


@pytest.fixture(scope="session")
def management_uri(broker_uri: str) -> str:
    """The management API URI of the broker under test (see ``MANAGEMENT_URI``)."""
    return MANAGEMENT_URI  # type: ignore[return-value] - pytest_configure ruled out None


@pytest.fixture(scope="session")
def mgmt(broker_uri: str) -> ManagementClient:
    """A management API client for the broker under test."""
    return management_client()


@pytest.fixture
def scratch_vhost(mgmt: ManagementClient) -> Iterator[str]:
    """A new vhost (other than ``/``: no event exchange in it) where the test user may do
    anything; deleted with all it holds at teardown."""
    import uuid

    name = f"rtroute-test-vh-{uuid.uuid4().hex[:6]}"
    mgmt.request("PUT", f"vhosts/{quote(name, safe='')}", {})
    user = parse_uri(BROKER_URI, strict=False).username
    mgmt.request("PUT", f"permissions/{quote(name, safe='')}/{quote(user, safe='')}",
                 {"configure": ".*", "write": ".*", "read": ".*"})
    yield name
    mgmt.request("DELETE", f"vhosts/{quote(name, safe='')}")


_OTHER_MANAGEMENT_CANDIDATES = ("http://guest:guest@127.0.0.1:15672/",
                                "http://guest:guest@127.0.0.1:15673/")


def _cluster_name(uri: str) -> str | None:
    try:
        return ManagementClient(uri, timeout=3).overview().get("cluster_name")
    except (ManagementError, ValueError):
        return None


@pytest.fixture(scope="session")
def other_management_uri(broker_uri: str) -> str:
    """The management API of a broker other than the one under test: the other of the local
    3.10 node (15672) and the 4.0 node of ``scripts/start-rabbitmq4.sh`` (15673), or
    ``RTROUTE_TEST_OTHER_MANAGEMENT_URI``."""
    own = _cluster_name(MANAGEMENT_URI)
    wanted = os.environ.get("RTROUTE_TEST_OTHER_MANAGEMENT_URI")
    for uri in ([wanted] if wanted else _OTHER_MANAGEMENT_CANDIDATES):
        cluster = _cluster_name(uri)
        if cluster and cluster != own:
            return uri
    if os.environ.get("RTROUTE_REQUIRE_BROKER4") == "1":
        pytest.fail("no second broker's management API (start scripts/start-rabbitmq4.sh)")
    pytest.skip("no second broker's management API on 15672/15673")


@pytest.fixture(scope="session")
def broker_version(mgmt: ManagementClient) -> tuple[int, ...]:
    """The RabbitMQ version of the broker under test, ``(major, minor, patch)``, for tests
    whose rule differs per version (``if broker_version >= (4,): ...``)."""
    text = mgmt.overview()["rabbitmq_version"]
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
    if found is None:
        pytest.fail(f"cannot read the broker's version {text!r}")
    return tuple(int(part) for part in found.groups())


def broker_ctl(*args: str, check: bool = True, timeout: float = 60
               ) -> subprocess.CompletedProcess:
    """Run ``rabbitmqctl ARGS`` against the node of the broker under test.

    The command is ``RTROUTE_TEST_RABBITMQCTL`` (split like a shell would), else
    ``rabbitmqctl`` when the broker is the default local one; a test calling it for another
    broker without that variable is skipped (the host's rabbitmqctl controls another node).
    """
    command = os.environ.get("RTROUTE_TEST_RABBITMQCTL")
    if not command:
        if BROKER_URI != DEFAULT_URI:
            pytest.skip("RTROUTE_TEST_RABBITMQCTL is not set: no rabbitmqctl for "
                        "RTROUTE_TEST_URI's node")
        command = "rabbitmqctl"
    return subprocess.run([*shlex.split(command), *args], capture_output=True, text=True,
                          timeout=timeout, check=check)


@contextlib.contextmanager
def memory_alarm() -> Iterator[None]:
    """A memory alarm on the broker under test while the block runs: its vm memory high
    watermark set near zero, so it blocks every connection that publishes
    (``connection.blocked``); the watermark it had is put back whatever happens."""
    done = broker_ctl("eval", "vm_memory_monitor:get_vm_memory_high_watermark().")
    previous = done.stdout.strip().splitlines()[-1]
    float(previous)  # a relative watermark, as set_vm_memory_high_watermark takes it back
    broker_ctl("set_vm_memory_high_watermark", "0.0000001")
    try:
        yield
    finally:
        broker_ctl("set_vm_memory_high_watermark", previous)


def wait_for(predicate: Callable[[], Any], timeout: float = 8.0, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout} s: {predicate}")
        time.sleep(interval)


@pytest.fixture
def until() -> Callable[..., Any]:
    """``until(predicate, timeout=8)``: poll until truthy, else fail."""
    return wait_for


def publish_frames(uri: str, queue: str, body: bytes, properties: dict) -> bytes:
    """Publishes to ``queue`` through the default exchange with a content header built here
    from ``properties`` (pika cannot encode floats, nor timestamps beyond year 9999); returns
    that header frame once the broker took the message."""
    import struct

    from rtroute.amqp import frames
    from rtroute.amqp.content_header import content_header_frame

    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        n = ch.channel_number
        header = content_header_frame(n, len(body), properties)
        frames.emit(conn._impl, b"".join((
            frames.publish_frame(n, frames.shortstr(""), frames.shortstr(queue), False),
            header, struct.pack(">BHI", frames.FRAME_BODY, n, len(body)), body,
            frames.FRAME_END)), 3)
        ch.queue_declare(queue, passive=True)  # answered once the publish was taken
        return header
    finally:
        conn.close()
