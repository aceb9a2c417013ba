"""Fixtures of the publisher's broker tests."""
from __future__ import annotations

import pika
import pytest


@pytest.fixture
def channel(broker_uri):
    """A channel on the broker under test, for setting up and reading back."""
    connection = pika.BlockingConnection(pika.URLParameters(broker_uri))
    yield connection.channel()
    if connection.is_open:
        connection.close()
