"""The sidecar never routes against another broker's management API (issue: a 4.x node on 5673
whose derived management URI, port 15672, is the 3.10 node's API: every binding vanished).

Needs a second broker's management API beside the one under test (the ``other_management_uri``
fixture of tests/conftest.py).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

from ..conftest import BROKER_URI, MANAGEMENT_URI


def test_another_brokers_management_api_stops_the_sidecar_with_one_line(other_management_uri,
                                                                        managed):
    name = managed("identity")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "rtroute.cli", "run", "--uri", BROKER_URI,
         "--management-uri", other_management_uri, "--rtopic", name, "--http", "127.0.0.1:0"],
        check=False, capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    assert done.returncode != 0
    assert elapsed < 30
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: the management API")
    assert "--management-uri" in last and "belongs to broker" in last
    assert "Traceback" not in done.stderr
    assert "guest:guest" not in done.stderr  # credentials masked


def test_the_wrong_api_from_the_environment_is_refused_too(other_management_uri, managed):
    name = managed("identity-env")
    env = dict(os.environ, RTROUTE_URI=BROKER_URI, RTROUTE_MANAGEMENT_URI=other_management_uri)
    done = subprocess.run(
        [sys.executable, "-m", "rtroute.cli", "run", "--rtopic", name, "--http", "127.0.0.1:0"],
        check=False, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode != 0
    assert "belongs to broker" in done.stderr.strip().splitlines()[-1]


def test_the_brokers_own_api_from_the_environment_serves(sidecars, managed, channel):
    name = managed("identity-own")
    os.environ["RTROUTE_MANAGEMENT_URI"] = MANAGEMENT_URI
    try:
        sc = sidecars("--rtopic", name)
    finally:
        del os.environ["RTROUTE_MANAGEMENT_URI"]
    channel.queue_declare(queue=f"{name}.q", exclusive=True)
    sc.wait_running(name, bindings=0)
    channel.queue_bind(f"{name}.q", f"{name}.bindings", "a.b")
    sc.wait_running(name, bindings=1)
    channel.basic_publish(name, "*.b", b"m")
    for _ in range(100):
        method, _props, body = channel.basic_get(f"{name}.q", auto_ack=True)
        if method:
            break
        time.sleep(0.1)
    assert body == b"m"
