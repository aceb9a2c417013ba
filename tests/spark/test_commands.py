"""`rtroute spark route|diff` through click's runner, on small files, on the tests' session."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from rtroute.spark.commands import spark as spark_group
from rtroute.spark.commands.output import format_table

from .conftest import PLUGIN, random_messages


@pytest.fixture
def files(tmp_path):
    bindings = tmp_path / "bindings.toml"
    bindings.write_text("".join(f'{d} = "{k}"\n' for d, k in PLUGIN.items()))
    after = tmp_path / "after.json"
    after.write_text(json.dumps({**PLUGIN, "F": [], "H": ["server1.app1.mod1.info"]}))
    rows = random_messages(400, seed=5) + [{"id": 400, "routing_key": None, "headers": None}]
    jsonl = tmp_path / "messages.jsonl"
    with jsonl.open("w") as f:
        for row in rows:  # headers as JSON objects, as a JSON lines archive would hold them
            headers = json.loads(row["headers"]) if row["headers"] else None
            f.write(json.dumps({**row, "headers": headers}) + "\n")
    parquet = tmp_path / "messages.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    return {"bindings": bindings, "after": after, "jsonl": jsonl, "parquet": parquet,
            "rows": rows, "dir": tmp_path}


def _cells(output: str) -> dict[str, list[str]]:
    """The rows of the printed tables: first cell -> the other cells."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in output.splitlines()
            if line.startswith("| ")]
    return {row[0]: row[1:] for row in rows}


def _run(*args: str):
    result = CliRunner().invoke(spark_group, [*args, "--master", "local[1]"])
    assert result.exit_code == 0, result.output
    return result


def test_route_command_writes_parquet_and_prints_a_summary(spark, files):
    out = {}
    for name in ("jsonl", "parquet"):
        out[name] = files["dir"] / f"out-{name}"
        result = _run("route", "--messages", str(files[name]), "--bindings",
                      str(files["bindings"]), "--out", str(out[name]))
        cells = _cells(result.output)
        assert cells["messages"] == ["401"] and cells["errors"] == ["1"]
        assert cells["routing key is null"] == ["1"]
        assert cells["destination"] == ["messages"] and set(PLUGIN) <= set(cells)
    routed = spark.read.parquet(str(out["jsonl"]))
    assert {"destinations", "delivered_headers", "error", "id"} <= set(routed.columns)
    by_format = [{r["id"]: (r["destinations"], r["error"]) for r in
                  spark.read.parquet(str(out[name])).collect()} for name in ("jsonl", "parquet")]
    assert len(by_format[0]) == len(files["rows"])
    assert by_format[0] == by_format[1]  # JSON lines and Parquet inputs route alike


def test_route_command_refuses_to_overwrite_and_reports_bad_input(spark, files):
    out = files["dir"] / "exists"
    out.mkdir()
    args = ["route", "--messages", str(files["parquet"]), "--bindings", str(files["bindings"]),
            "--out", str(out), "--master", "local[1]"]
    result = CliRunner().invoke(spark_group, args)
    assert result.exit_code == 1 and "--overwrite" in result.output
    bad = files["dir"] / "bad.json"
    bad.write_text('{"A": 5}')
    args[4] = str(bad)
    result = CliRunner().invoke(spark_group, args + ["--overwrite"])
    assert result.exit_code == 1 and "expected a binding key" in result.output
    result = CliRunner().invoke(spark_group, args + ["--overwrite", "--conf", "no-equals"])
    assert result.exit_code == 2 and "expected KEY=VALUE" in result.output


def test_diff_command_prints_changed_destinations(spark, files):
    changed = files["dir"] / "changed"
    result = _run("diff", "--messages", str(files["parquet"]), "--before", str(files["bindings"]),
                  "--after", str(files["after"]), "--out", str(changed))
    cells = _cells(result.output)
    assert cells["destination"] == ["before", "after", "gained", "lost"]
    f_before, f_after, f_gained, f_lost = map(int, cells["F"])
    assert f_after == f_gained == 0 and f_before == f_lost > 0
    h_before, h_after, h_gained, h_lost = map(int, cells["H"])
    assert h_before == h_lost == 0 and h_after == h_gained > 0
    assert "A" not in cells  # unchanged destinations are not listed
    assert 0 < int(cells["changed"][0]) <= f_lost + h_gained
    rows = spark.read.parquet(str(changed)).collect()
    assert rows and all(r["destinations_added"] or r["destinations_removed"] for r in rows)


def test_format_table_right_aligns_numbers():
    assert format_table(["name", "n"], [["a", 1000], ["bb", 2]]).splitlines() == [
        "| name |     n |", "|------|------:|", "| a    | 1,000 |", "| bb   |     2 |"]


def test_message_format_is_told_by_file_names(tmp_path):
    from rtroute.spark.job import message_format

    (tmp_path / "part-0.snappy.parquet").write_bytes(b"")
    (tmp_path / "_SUCCESS").write_bytes(b"")
    assert message_format(tmp_path) == "parquet"
    assert message_format("s3a://bucket/day.jsonl") == "json"
    with pytest.raises(ValueError, match="give the format"):
        message_format("hdfs:///archive/")


def test_a_missing_local_archive_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(spark_group, ["route", "--messages", str(tmp_path / "nope"),
                                              "--bindings", "b.toml", "--out", "o"])
    assert result.exit_code == 2 and "does not exist" in result.output
