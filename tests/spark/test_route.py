"""rtroute.spark.route on a local[1] session: the exchange's answers, row for row."""
from __future__ import annotations

import json
import uuid

import pytest

from rtroute import RTopicExchange
from rtroute.spark import (
    RouteStats,
    destination_counts,
    diff,
    error_counts,
    route,
    summarize,
    summarize_diff,
    unroutable_count,
)
from rtroute.spark.batches import header_text

from .conftest import plugin_bindings, random_messages

SCHEMA = "id long, routing_key string, headers string"


def _exchange(bindings) -> RTopicExchange:
    exchange = RTopicExchange()
    for destination, key in bindings:
        exchange.bind(destination, key)
    return exchange


@pytest.fixture(scope="module")
def messages(spark):
    rows = random_messages(3000)
    return rows, spark.createDataFrame([tuple(r.values()) for r in rows], SCHEMA).repartition(3)


def test_results_equal_rtopic_exchange_route_row_for_row(spark, messages):
    rows, frame = messages
    exchange = _exchange(plugin_bindings())
    routed = {r["id"]: r for r in route(frame, plugin_bindings()).collect()}
    assert len(routed) == len(rows)
    unroutable = 0
    for message in rows:
        headers = json.loads(message["headers"]) if message["headers"] else None
        expected = exchange.route(message["routing_key"], headers)
        got = routed[message["id"]]
        assert got["error"] is None
        assert got["routing_key"] == message["routing_key"]
        assert got["headers"] == message["headers"]
        assert got["destinations"] == sorted(expected.destinations), message
        assert got["delivered_headers"] == {k: header_text(v) for k, v in expected.headers.items()}
        unroutable += not expected.destinations
    assert 0 < unroutable < len(rows)  # the data has both kinds


def test_matcher_is_built_once_per_worker_not_per_partition_or_batch(spark):
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        rows = random_messages(2000, seed=11)
        frame = spark.createDataFrame([tuple(r.values()) for r in rows], SCHEMA).repartition(6)
        bindings = plugin_bindings() + [(f"fresh-{uuid.uuid4().hex}", "server1.app1.mod1.info")]
        stats = RouteStats(spark)
        assert route(frame, bindings, stats=stats).count() == 2000
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert stats.rows.value == 2000  # 6 partitions, at least 20 batches ...
    # ... and one matcher per Python worker process: local[1] runs one task at a time, and a
    # worker goes back to the pool between tasks (an earlier chained job may have left two)
    workers = stats.workers.value
    assert 1 <= stats.matcher_builds.value == len(workers) <= 2


def test_bad_rows_land_in_the_error_column_not_a_failed_job(spark):
    frame = spark.createDataFrame([
        (1, None, None),
        (2, "x" * 300, None),
        (3, "server1.app1.mod1.info", json.dumps({"CC": "server2.app1.mod1.info"})),
        (4, "server1.app1.mod1.info", json.dumps({"BCC": {"k": 1}})),
        (5, "server1.app1.mod1.info", "[1, 2]"),
        (6, "server1.app1.mod1.info", json.dumps({"CC": ["server2.app1.mod1.info"]})),
    ], SCHEMA)
    out = {r["id"]: r for r in route(frame, plugin_bindings()).collect()}
    assert out[1]["error"] == "routing key is null"
    assert "300 bytes" in out[2]["error"]
    assert '"CC",longstr' in out[3]["error"]
    assert '"BCC",table' in out[4]["error"]
    assert "JSON object" in out[5]["error"]
    assert all(out[i]["destinations"] is None for i in range(1, 6))
    assert out[6]["error"] is None and out[6]["destinations"] == ["A", "F"]


def test_struct_headers_and_extra_columns_are_kept(spark):
    frame = spark.createDataFrame(
        [("server1.app1.mod1.info", {"CC": ["server2.#"], "BCC": ["#.error"]}, b"body", 1.5)],
        "routing_key string, headers struct<CC: array<string>, BCC: array<string>>, "
        "body binary, price double")
    [row] = route(frame, plugin_bindings()).collect()
    assert row["body"] == bytearray(b"body") and row["price"] == 1.5
    assert row["headers"]["BCC"] == ["#.error"]  # the input column is untouched
    assert row["destinations"] == ["A", "B", "D", "F", "G"]
    assert row["delivered_headers"] == {"CC": '["server2.#"]'}


def test_route_refuses_a_frame_it_cannot_route(spark):
    frame = spark.createDataFrame([(1, "a")], "id long, key string")
    with pytest.raises(ValueError, match="no 'routing_key' column"):
        route(frame, plugin_bindings())
    assert route(frame, plugin_bindings(), key_column="key").count() == 1
    clash = spark.createDataFrame([("a", "b")], "routing_key string, error string")
    with pytest.raises(ValueError, match="output column"):
        route(clash, plugin_bindings())
    wrong = spark.createDataFrame([(1,)], "routing_key long")
    with pytest.raises(TypeError, match="string column"):
        route(wrong, plugin_bindings())
    with pytest.raises(ValueError, match="unknown exchange kind"):
        route(frame, plugin_bindings(), kind="headers", key_column="key")


def test_reports_count_destinations_unroutable_and_errors(spark, messages):
    rows, frame = messages
    bad = spark.createDataFrame([(-1, None, None), (-2, "a", '{"CC": "b"}')], SCHEMA)
    routed = route(frame.unionByName(bad), plugin_bindings()).persist()
    exchange = _exchange(plugin_bindings())
    expected: dict[str, int] = {}
    unroutable = deliveries = 0
    for message in rows:
        headers = json.loads(message["headers"]) if message["headers"] else None
        found = exchange.route(message["routing_key"], headers).destinations
        unroutable += not found
        deliveries += len(found)
        for destination in found:
            expected[destination] = expected.get(destination, 0) + 1
    counts = {r["destination"]: r["messages"] for r in destination_counts(routed).collect()}
    assert counts == expected
    assert unroutable_count(routed) == unroutable
    assert {r["error"][:19]: r["messages"] for r in error_counts(routed).collect()} == {
        "routing key is null": 1, "406 PRECONDITION_FA": 1}
    summary = summarize(routed)
    assert (summary.messages, summary.unroutable, summary.errors, summary.deliveries) == (
        len(rows) + 2, unroutable, 2, deliveries)
    assert summary.routed == len(rows) - unroutable
    assert dict(summary.destinations) == expected
    routed.unpersist()


def test_diff_reports_what_changes_between_binding_sets(spark):
    frame = spark.createDataFrame([
        (1, "server1.app1.mod1.info", None),   # A -> A, H
        (2, "server2.app1.mod1.info", None),   # F -> nothing
        (3, "server1.app2.mod1.info", None),   # C -> C
        (4, "nowhere", None),                  # unroutable under both
        (5, None, None),                       # error under both
    ], SCHEMA)
    before = [("A", "server1.app1.mod1.info"), ("C", "server1.app2.mod1.info"),
              ("F", "server2.app1.mod1.info")]
    after = [("A", "server1.app1.mod1.info"), ("C", "server1.app2.mod1.info"),
             ("H", "server1.app1.mod1.info")]
    diffed = diff(frame, before, after)
    out = {r["id"]: r for r in diffed.collect()}
    assert (out[1]["destinations_before"], out[1]["destinations_after"]) == (["A"], ["A", "H"])
    assert (out[1]["destinations_added"], out[1]["destinations_removed"]) == (["H"], [])
    assert out[2]["destinations_removed"] == ["F"] and out[2]["destinations_after"] == []
    assert out[5]["error"] == "routing key is null"
    summary = summarize_diff(diffed)
    assert (summary.messages, summary.changed, summary.unroutable_before,
            summary.unroutable_after, summary.errors) == (5, 2, 1, 2, 1)
    assert sorted(summary.destinations) == [("F", 1, 0, 0, 1), ("H", 0, 1, 1, 0)]
