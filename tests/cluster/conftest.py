"""A 3-node RabbitMQ cluster of the tests' own (3.10.8 from the host's packages, loopback
ports), started once for the cluster tests and stopped after them."""
from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..broker_nodes import LocalCluster, rabbitmq_installed

PLUGINS = ("rabbitmq_event_exchange", "rabbitmq_consistent_hash_exchange")


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    if not rabbitmq_installed():
        pytest.skip("rabbitmq-server is not installed")
    nodes = LocalCluster(Path(tempfile.mkdtemp(prefix="rtroute-cluster-")), plugins=PLUGINS)
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture
def healthy(cluster: LocalCluster) -> LocalCluster:
    """The cluster with every node running (a test before may have killed one)."""
    for node in cluster.nodes:
        if not node.running():
            node.start()
    return cluster
