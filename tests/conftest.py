"""Fixtures shared by every test package: the local broker, its management API, polling."""
from __future__ import annotations

import os
import socket
import time
from typing import Any, Callable

import pytest

from rtroute.amqp import ManagementClient

BROKER_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


def _broker_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5672), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def broker_uri() -> str:
    """The local broker's URI; broker tests are skipped when nothing listens on 5672,
    unless RTROUTE_REQUIRE_BROKER=1 (the README test command) makes that a failure."""
    if not _broker_reachable():
        if os.environ.get("RTROUTE_REQUIRE_BROKER") == "1":
            pytest.fail("no RabbitMQ on 127.0.0.1:5672 (scripts/test.sh starts one)")
        pytest.skip("no RabbitMQ on 127.0.0.1:5672")
    return BROKER_URI


@pytest.fixture(scope="session")
def mgmt(broker_uri: str) -> ManagementClient:
    """A management API client for the local broker."""
    return ManagementClient.from_amqp_uri(broker_uri, timeout=5)


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
