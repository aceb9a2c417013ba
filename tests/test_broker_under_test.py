"""The environment's three handles on the broker under test (tests/conftest.py) name one node:
the AMQP URI, the management API (checked by the ``broker_uri`` fixture itself) and rabbitmqctl."""
from __future__ import annotations

import json

from .conftest import broker_ctl


def test_rabbitmqctl_controls_the_broker_under_test(mgmt, broker_version):
    status = json.loads(broker_ctl("-q", "cluster_status", "--formatter", "json").stdout)
    assert status["cluster_name"] == mgmt.overview()["cluster_name"]
    versions = {node["rabbitmq_version"] for node in status["versions"].values()}
    assert versions == {".".join(map(str, broker_version))}
