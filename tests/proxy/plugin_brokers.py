"""The brokers that run the real x-rtopic plugin, as the migration tests use them (sources of a
plugin user's topology), and what those tests do with them."""
from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import quote

import pytest

from rtroute.amqp import ManagementClient

# CI's 4.3 leg names them RTROUTE_TEST_SOURCE_PLUGIN..., so that the parity suites, which read
# RTROUTE_TEST_PLUGIN_URI, run their live checks in the 3.10 leg only
SOURCES = {"plugin-3.10": "PLUGIN", "plugin-4.0": "PLUGIN4"}


def plugin_broker(label: str) -> tuple[str, str]:
    """``(AMQP URI, management URI)`` of the plugin's broker ``label`` (a key of
    :data:`SOURCES`); the test skips without one."""
    for prefix in (f"RTROUTE_TEST_SOURCE_{SOURCES[label]}", f"RTROUTE_TEST_{SOURCES[label]}"):
        amqp, http = os.environ.get(f"{prefix}_URI"), os.environ.get(f"{prefix}_MANAGEMENT_URI")
        if amqp and http:
            return amqp, http
    pytest.skip(f"RTROUTE_TEST_{SOURCES[label]}_URI and ..._MANAGEMENT_URI (or "
                f"RTROUTE_TEST_SOURCE_{SOURCES[label]}_...) name no broker with the x-rtopic "
                "plugin")


def in_vhost(uri: str, vhost: str) -> str:
    """``uri`` with ``vhost`` instead of its own."""
    return uri.split("?", 1)[0].rsplit("/", 1)[0] + "/" + quote(vhost, safe="")


def make_vhost(management: ManagementClient, vhost: str, user: str) -> None:
    """Creates ``vhost`` and lets ``user`` do anything in it."""
    management.request("PUT", f"vhosts/{quote(vhost, safe='')}", {})
    management.request("PUT", f"permissions/{quote(vhost, safe='')}/{quote(user, safe='')}",
                       {"configure": ".*", "write": ".*", "read": ".*"})


def export_vhost(management: ManagementClient, vhost: str) -> dict:
    """The whole broker's export, narrowed to ``vhost`` (what an operator would keep)."""
    data = management.definitions()
    for kind in ("permissions", "queues", "exchanges", "bindings", "policies", "parameters"):
        data[kind] = [x for x in data.get(kind, []) if x.get("vhost") == vhost]
    data["vhosts"] = [v for v in data["vhosts"] if v["name"] == vhost]
    data["users"], data["global_parameters"], data["topic_permissions"] = [], [], []
    return data


def rtroute_cli(*args: str) -> subprocess.CompletedProcess:
    """``rtroute ARGS`` in a process of its own, its output captured."""
    return subprocess.run([sys.executable, "-m", "rtroute.cli", *args], check=False,
                          capture_output=True, text=True, timeout=120)
