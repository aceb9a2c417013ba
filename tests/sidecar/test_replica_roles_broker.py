"""Two replicas of the sidecar on one exchange: ``/status`` (and ``rtroute status``) says which
one routes it, as the broker sees it (the ingress queue's single active consumer), and the
standby says ``active`` once the active replica is gone (kill -9). Before, nothing showed which
replica was which."""
from __future__ import annotations

import urllib.request

import pytest

from ..conftest import wait_for

pytestmark = pytest.mark.broker


def test_one_replica_is_active_the_other_standby_and_the_standby_takes_over(sidecars, managed):
    name = managed("roles")
    first = sidecars("--rtopic", name)
    first.wait_running(name)
    second = sidecars("--rtopic", name)
    second.wait_running(name)

    def roles() -> tuple:
        return first.exchange(name).get("role"), second.exchange(name).get("role")

    # the broker's statistics name the active consumer within ~5 s
    assert wait_for(lambda: roles() == ("active", "standby"), 30)
    with urllib.request.urlopen(f"http://127.0.0.1:{second.port}/metrics", timeout=5) as r:
        metrics = r.read().decode()
    assert f'rtroute_exchange_active{{exchange="{name}",vhost="/"}} 0.0' in metrics
    first.kill9()
    assert wait_for(lambda: second.exchange(name).get("role") == "active", 60)
