"""``rtroute definitions convert``: the file written, the findings printed, the exit codes of
docs/migrate.md (0 done, 1 an error, 3 written but something cannot be carried over)."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from rtroute.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "definitions-plugin-3.10.json"


def run(*args: str):
    return CliRunner().invoke(main, ["definitions", "convert", *args])


def test_the_plugin_export_of_the_guide_converts_and_reports(tmp_path):
    out, report = tmp_path / "out.json", tmp_path / "report.json"
    result = run(str(EXAMPLE), "-o", str(out), "--report", str(report))
    assert result.exit_code == 0, result.output
    assert "converted: exchange 'orders' (vhost 'shop')" in result.output
    assert "changed: policy 'ha-orders' (vhost 'shop'): removed" in result.output
    types = {x["name"]: x["type"] for x in json.loads(out.read_text())["exchanges"]}
    assert types["orders"] == "fanout" and types["orders.bindings"] == "direct"
    assert json.loads(report.read_text())["converted"] == 1


def test_what_cannot_be_carried_over_exits_3_with_the_file_written(tmp_path):
    data = json.loads(EXAMPLE.read_text())
    data["bindings"].append({"source": "audit", "vhost": "shop", "destination": "orders",
                             "destination_type": "exchange", "routing_key": "#",
                             "arguments": {}})
    given, out = tmp_path / "in.json", tmp_path / "out.json"
    given.write_text(json.dumps(data))
    result = run(str(given), "-o", str(out))
    assert result.exit_code == 3
    assert "cannot: binding 'audit' -> 'orders'" in result.output
    assert out.exists()


def test_a_file_that_is_not_json_names_its_line(tmp_path):
    given = tmp_path / "broken.json"
    given.write_text('{\n  "exchanges": [\n    oops\n]}')
    result = run(str(given), "-o", str(tmp_path / "out.json"))
    assert result.exit_code == 1
    assert f"{given}:3: not JSON" in result.output
