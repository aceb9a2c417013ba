"""`rtroute bench sidecar --scenario NAME -n N`: one scenario, a few thousand messages, seconds
instead of the full run's minutes, against the broker under test."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rtroute.cli import main

pytestmark = pytest.mark.broker


def test_one_scenario_with_fewer_messages_runs_only_that(broker_uri, management_uri, tmp_path):
    out = tmp_path / "sidecar.json"
    done = CliRunner().invoke(main, [
        "bench", "sidecar", "--uri", broker_uri, "--management-uri", management_uri,
        "--scenario", "exact-key", "-n", "500", "--repeat", "1", "--json", str(out)])
    assert done.exit_code == 0, done.output
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert [(r["scenario"], r["messages"]) for r in rows] == [("1 queue/msg, exact key", 500)]
    assert "(1 scenarios," in done.output


def test_an_unknown_scenario_is_a_usage_error_listing_the_names():
    done = CliRunner().invoke(main, ["bench", "sidecar", "--scenario", "all"])
    assert done.exit_code == 2 and "1-queue" in done.output and "exact-key" in done.output
