"""`rtroute bench ... --json FILE`: every command writes a report that reads back, with the
machine, the parameters and rows that carry a unit and the ratio to their baseline."""
from __future__ import annotations

import functools
import json

import pytest
from click.testing import CliRunner

from rtroute.bench import confirms, divert, match, selector, shovel
from rtroute.bench.report import SCHEMA, build_report, read_report, write_report
from rtroute.cli import main


def _run_json(tmp_path, *args: str) -> dict:
    path = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["bench", *args, "--json", str(path)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"wrote {path}" in result.output
    return read_report(path)


def _check_rows(report: dict, benchmark: str, unit: str) -> list[dict]:
    assert report["schema"] == SCHEMA and report["benchmark"] == benchmark
    machine = report["machine"]
    assert machine["cpu_count"] >= 1 and machine["python"] and machine["rtroute"]
    assert machine["core"] in ("native", "reference")
    compared = [r for r in report["rows"] if r.get("baseline")]
    assert compared, report["rows"]
    for row in compared:
        assert row["unit"] == unit and row["value"] > 0 and row["baseline_value"] > 0
        assert row["ratio"] > 0 and row["ratio_means"]
    return compared


def test_report_round_trips_and_drops_non_finite_numbers(tmp_path):
    report = build_report("match", {"sizes": (1, 2)},
                          [{"name": "native", "value": float("inf"), "unit": "µs/query"}])
    back = read_report(write_report(tmp_path / "sub" / "r.json", report))
    assert back == report and back["rows"][0]["value"] is None
    assert back["parameters"]["sizes"] == [1, 2]


def test_report_rows_need_a_name_value_and_unit():
    with pytest.raises(ValueError, match="unit"):
        build_report("match", {}, [{"name": "native", "value": 1.0}])


@pytest.mark.parametrize("document", ["not json", json.dumps({"benchmark": "match"}),
                                      json.dumps({"schema": SCHEMA, "benchmark": "x",
                                                  "rows": [{"name": "n"}]})])
def test_read_report_refuses_what_is_not_a_report(tmp_path, document):
    path = tmp_path / "bad.json"
    path.write_text(document)
    with pytest.raises(ValueError, match="bad.json"):
        read_report(path)


def test_match_report(tmp_path, monkeypatch):
    monkeypatch.setattr(match, "SHAPES", ["exact", "a.*.c.d", "#.c.d"])
    report = _run_json(tmp_path, "match", "--bindings", "300", "--queries", "3")
    rows = _check_rows(report, "match", "µs/query")
    assert report["parameters"] == {"bindings": [300], "queries": 3, "scan_limit": 100_000}
    assert {r["baseline"] for r in rows} >= {"python dict trie", "reference.py",
                                             "naive regex scan"}
    assert {r["shape"] for r in rows} == {"exact", "a.*.c.d", "#.c.d"}
    assert {r["unit"] for r in report["rows"]} == {"µs/query", "bytes/binding", "ops/s"}


def test_selector_report(tmp_path):
    report = _run_json(tmp_path, "selector", "--evaluations", "300")
    rows = _check_rows(report, "selector", "evaluations/s")
    assert len(rows) == len(selector.CASES) and rows[0]["baseline"] == "AST interpreter"


def test_confirms_report(tmp_path, monkeypatch, broker_uri):
    monkeypatch.setattr(confirms, "run", functools.partial(confirms.run, slow_count=30,
                                                           fast_count=300))
    report = _run_json(tmp_path, "confirms", "--uri", broker_uri)
    rows = _check_rows(report, "confirms", "msg/s")
    assert [r["baseline"] for r in rows] == ["transaction per message",
                                            "synchronous confirm per message"]
    assert report["machine"]["broker"]  # the version the broker announced


def test_sidecar_report(tmp_path, broker_uri, management_uri):
    report = _run_json(tmp_path, "sidecar", "--uri", broker_uri, "--management-uri",
                       management_uri, "--repeat", "1", "--scenario", "1-queue",
                       "--scenario", "10-queues", "-n", "300")
    rows = _check_rows(report, "sidecar", "msg/s")
    assert [(r["queues_per_message"], r["extra_bindings"]) for r in rows] == [(1, 0), (10, 0)]
    assert report["parameters"] == {"prefetch": 1000, "repeat": 1,
                                    "scenarios": ["1 queue/msg", "10 queues/msg"]}


def test_divert_report(tmp_path, monkeypatch, broker_uri, management_uri):
    scenarios = [divert.Scenario("1 divert, none", ["region = 'us'"], messages=300),
                 divert.Scenario("1 divert, copy", ["region = 'eu'"], copies=True,
                                 messages=300)]
    monkeypatch.setattr(divert, "run", functools.partial(divert.run, scenarios=scenarios))
    report = _run_json(tmp_path, "divert", "--uri", broker_uri, "--management-uri",
                       management_uri)
    rows = _check_rows(report, "divert", "msg/s")
    assert [(r["diverts"], r["copies"]) for r in rows] == [(1, False), (1, True)]


def test_shovel_report(tmp_path, monkeypatch, broker_uri, mgmt):
    from rtroute.amqp import ManagementError

    try:
        mgmt.request("GET", "shovels")
    except ManagementError:
        pytest.skip("the broker has no rabbitmq_shovel_management")
    monkeypatch.setattr(shovel, "run", functools.partial(shovel.run, modes=("on_confirm",),
                                                         repeat=1))
    report = _run_json(tmp_path, "shovel", "-n", "300", "--uri", broker_uri)
    (row,) = _check_rows(report, "shovel", "msg/s")
    assert row["ack_mode"] == "on_confirm" and row["baseline"] == "RabbitMQ shovel plugin"


def test_publish_report(tmp_path, monkeypatch, broker_uri, management_uri, broker_version):
    from rtroute.bench import publish, traffic

    monkeypatch.setattr(publish, "SHAPES", [publish.SHAPES[3], publish.SHAPES[4]])
    # varied traffic, small: 20 keys w{i}.* in turn over 3 bindings each, a header per message
    monkeypatch.setattr(publish, "VARIED_SHAPES", [publish.Shape(
        "20 keys in turn", 1, 30_000, "", "", name="varied-star",
        traffic=traffic.varied_star(20, 3), vary_header=True)])
    report = _run_json(tmp_path, "publish", "--uri", broker_uri, "--management-uri",
                       management_uri, "--repeat", "1", "--scale", "0.01", "--bindings", "200")
    rows = _check_rows(report, "publish", "msg/s")
    # a row per publisher-side path (BCC, matched key, matched key without its header), per
    # shape
    names = ["publisher-side", "publisher-side, matched key",
             "publisher-side, matched key, no header"]
    assert [(r["name"], r["queues_per_message"]) for r in rows] == [
        *((name, 1) for name in names), *((name, 10) for name in names),
        *((name, 1) for name in names)]
    assert rows[-1]["header_per_message"] and rows[-1]["rtopic_key"] == "20 keys in turn"
    assert rows[-1]["messages"] == 300 and rows[-1]["bindings"] == 200
    assert all(r["sidecar_msgs_per_s"] > 0 and r["publisher_key_msgs_per_s"] > 0
               and r["publisher_bare_msgs_per_s"] > 0 for r in rows)
    assert report["parameters"]["bindings"] == 200
    # --bindings-type auto: what rtroute declares on this broker, the sidecar beside it
    # 3.x: topic (a direct exchange scans every binding per BCC entry); 4.x: direct (indexed)
    expected = "direct" if broker_version >= (4,) else "topic"
    assert report["parameters"]["bindings_type"] == expected
    assert {r["bindings_type"] for r in rows} == {expected}
