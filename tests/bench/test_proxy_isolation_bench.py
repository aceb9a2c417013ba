"""`rtroute bench proxy-isolation` runs end to end against the broker and reports its figures
(what they are is for docs/proxy.md, not asserted here: no timed assertion in the suite)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rtroute.cli import main

pytestmark = pytest.mark.broker


def test_the_isolation_bench_reports_rates_and_answer_times(broker_uri, management_uri, tmp_path):
    out = tmp_path / "isolation.json"
    result = CliRunner().invoke(main, [
        "bench", "proxy-isolation", "--uri", broker_uri, "--management-uri", management_uri,
        "--seconds", "0.5", "--bindings", "200", "--queues", "5", "--rounds", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "confirms/s" in result.output and "SIGTERM under that load" in result.output
    rows = json.loads(out.read_text())["rows"]
    assert [r["unit"] for r in rows] == ["msg/s", "msg/s", "s", "s", "s"]
    assert rows[0]["value"] > 0 and rows[0]["baseline_value"] > 0
    # the same-run baseline: the same two clients straight to the broker
    assert "straight to the broker" in rows[1]["name"] and rows[1]["baseline_value"] > 0
    assert rows[0]["direct_ratio"] == rows[1]["ratio"]
    # the hostile client is a load: its '#' messages are routed, through the proxy and straight
    # (its frames were once malformed: the broker closed its connection at the first publish and
    # the bench measured a client that published nothing)
    assert rows[0]["hostile_routed_per_s"] > 0 and rows[1]["hostile_routed_per_s"] > 0
    # two rounds, each a pair of rates measured back to back; the ratio is their median
    assert len(rows[0]["rounds"]) == 2 and len(rows[1]["rounds"]) == 2
    ratios = sorted(beside / alone for alone, beside in rows[0]["rounds"])
    assert rows[0]["ratio"] == pytest.approx(sum(ratios) / 2)
