"""examples/grafana/rtroute-dashboard.json queries only series that a running sidecar, a
running proxy and a running shovel process export on /metrics (a renamed metric would leave a
panel empty), and has panels for each kind of process."""
from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from rtroute.ops.netaddr import free_port

from ..conftest import BROKER_URI, MANAGEMENT_URI, wait_for
from ..processes import RtrouteProcess
from ..sidecar.conftest import delete_layouts

pytestmark = pytest.mark.broker
DASHBOARD = Path(__file__).resolve().parents[2] / "examples" / "grafana" / "rtroute-dashboard.json"
PROMQL_FUNCTIONS = {"sum", "rate", "or", "increase", "histogram_quantile", "count", "min", "max",
                    "vector", "by", "le", "job", "exchange", "divert", "kind", "instance",
                    "shovel", "state"}


def _queried_series() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    names = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", "", target["expr"])
            for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
                if word not in PROMQL_FUNCTIONS:
                    names.add(re.sub(r"_(bucket|sum|count)$", "", word)
                              if word.endswith("_bucket") else word)
    return names


def _exported(port: int) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))


def test_every_series_the_dashboard_queries_is_exported(tmp_path, broker_uri, management_uri):
    queried = _queried_series()
    assert {"rtroute_in_flight", "rtroute_proxy_ready"} <= queried  # the parser finds them
    name = "rtroute-test.grafana"
    sidecar = RtrouteProcess("rtroute.cli", [
        "run", "--rtopic", name, "--uri", BROKER_URI, "--management-uri", MANAGEMENT_URI],
        tmp_path / "sidecar.log")
    proxy = RtrouteProcess("rtroute.cli", [
        "proxy", "--listen", f"127.0.0.1:{free_port()}", "--uri", BROKER_URI,
        "--management-uri", MANAGEMENT_URI], tmp_path / "proxy.log")
    config = tmp_path / "shovel.toml"
    config.write_text(
        f'[[shovel]]\nname = "grafana"\nqueue = "{name}.src"\n'
        f'publish_fields = {{ exchange = "", routing_key = "{name}.dst" }}\n'
        f'[shovel.sources]\nbrokers = ["{BROKER_URI}"]\n'
        f'declarations = [{{ method = "queue.declare", queue = "{name}.src", auto_delete = true }}]\n'
        f'[shovel.destinations]\nbroker = "{BROKER_URI}"\n'
        f'declarations = [{{ method = "queue.declare", queue = "{name}.dst", auto_delete = true }}]\n')
    shovel = RtrouteProcess("rtroute.cli", ["shovel", "run", "-c", str(config)],
                            tmp_path / "shovel.log")
    try:
        wait_for(lambda: (sidecar.status() or {}).get("healthy"), 30)
        wait_for(lambda: proxy.status() is not None, 30)
        wait_for(lambda: shovel.status() is not None, 30)
        exported = _exported(sidecar.port) | _exported(proxy.port) | _exported(shovel.port)
        assert queried - exported == set(), (queried - exported, sidecar.log(), proxy.log(),
                                             shovel.log())
        titles = [p["title"] for p in json.loads(DASHBOARD.read_text())["panels"]
                  if p["type"] == "row"]
        assert titles[:3] == ["Sidecar (rtroute run)", "Proxy (rtroute proxy)",
                              "Shovels (rtroute shovel run)"]
    finally:
        sidecar.stop()
        proxy.stop()
        shovel.stop()
        delete_layouts([name])
