"""`rtroute spark stream --batch-directories` on a real stream, in this process (the tests'
SparkSession; Spark's own sink: test_stream_sinks.py): 5,000
messages routed as the library routes them, 5,000 more from the checkpoint (10,000 rows, each
once), a batch Spark runs again after its commit was lost is not written twice, and reading
takes nothing from another consumer of the stream."""
from __future__ import annotations

import json
import re

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from rtroute.spark.commands import spark as spark_group
from rtroute.spark.stream_job import MARKER

from .stream_support import (
    PlainConsumer,
    bindings_file,
    expected_routing,
    messages,
    publish,
    rabbit_stream,
    read_back,
    stored_headers,
)

pytestmark = [pytest.mark.broker, pytest.mark.slow,
              pytest.mark.every_broker]  # loss: each message exactly once


def _run(uri: str, stream: str, tmp_path, *extra: str):
    result = CliRunner().invoke(spark_group, [
        "stream", "--uri", uri, "--stream", stream, "--bindings", bindings_file(tmp_path),
        "--out", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "checkpoint"),
        "--available-now", "--master", "local[1]", "--batch-directories", *extra])
    assert result.exit_code == 0, result.output
    return result


def _rows(out) -> list[dict]:
    """Every row under OUT, read with pyarrow (not Spark: no metadata log to rely on)."""
    return ds.dataset(str(out), format="parquet", partitioning="hive").to_table().to_pylist()


def _table(output: str) -> dict[str, str]:
    return {cells[0]: cells[1] for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in output.splitlines()
             if line.startswith("| "))}


def test_stream_command_routes_like_the_library_then_goes_on_from_its_checkpoint(
        spark, broker_uri, broker_version, tmp_path):
    first, second = messages(5000, seed=3), messages(5000, seed=4, first_id=5000)
    with rabbit_stream(broker_uri) as stream:
        publish(broker_uri, stream, first)
        other = PlainConsumer(broker_uri, stream, 5000)  # reads beside the command
        other.start()
        other.consuming.wait(30)
        result = _run(broker_uri, stream, tmp_path, "--max-records-per-trigger", "2000")
        seen_by_other = other.wait()
        assert sorted(seen_by_other) == list(range(5000))  # the command took none of them

        rows = _rows(tmp_path / "out")
        assert sorted(r["offset"] for r in rows) == list(range(5000))
        lines = [line for line in result.output.splitlines() if line.startswith("batch ")]
        assert len(lines) == 3 and "5,000" in _table(result.output)["messages"]
        assert re.match(r"batch 0: 2,000 messages \(\S+ 0-1999\); .* wrote .*batch=00000000",
                        lines[0]), lines
        expected = expected_routing(seen_by_other)
        published = {m["id"]: m for m in first}
        for row in rows:
            offset = row["offset"]
            key, headers, body, message_id = seen_by_other[offset]
            sent = published[message_id]
            assert (row["stream"], row["routing_key"], row["exchange"], row["body"]) == (
                stream, key, stream, body)
            assert (key, body) == (sent["routing_key"], sent["body"])
            assert row["timestamp"].timestamp() == sent["timestamp"]
            # the same message as the other consumer got, and as published less what a stream
            # drops (BCC always; array and table headers, but CC from 4.0)
            stored = json.loads(row["headers"]) if row["headers"] else None
            assert stored == headers == stored_headers(sent["headers"], broker_version)
            assert row["error"] is None
            assert (row["destinations"], dict(row["delivered_headers"])) == expected[offset]
        assert any(d for d, _ in expected.values()) and any(not d for d, _ in expected.values())
        if broker_version >= (4,):  # CC survives in the stream: some messages reach more
            assert any(json.loads(r["headers"] or "{}").get("CC") for r in rows)

        publish(broker_uri, stream, second)
        again = _run(broker_uri, stream, tmp_path, "--max-records-per-trigger", "2000")
        assert _table(again.output)["messages"] == "5,000"
        rows = _rows(tmp_path / "out")
        assert sorted(r["offset"] for r in rows) == list(range(10_000))  # each exactly once
        assert sorted(r["message_id"] for r in rows) == sorted(
            m["id"] for m in first + second)
        everything = read_back(broker_uri, stream, 10_000)
        assert sorted(everything) == list(range(10_000))  # the stream still holds them all
        expected = expected_routing(everything)
        assert all(r["destinations"] == expected[r["offset"]][0] for r in rows)

        # The last batch's commit is lost (a crash after its directory was renamed into
        # place): Spark runs it again, and it finds its directory there.
        commits = sorted((tmp_path / "checkpoint" / "commits").iterdir(),
                         key=lambda p: int(p.name) if p.name.isdigit() else -1)
        last = commits[-1]
        last.unlink()
        (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
        replay = _run(broker_uri, stream, tmp_path)
        assert f"batch {last.name}: offsets" in replay.output
        assert "already written" in replay.output
        assert _table(replay.output)["batches already written"] == "1"
        assert sorted(r["offset"] for r in _rows(tmp_path / "out")) == list(range(10_000))


def test_an_output_of_another_query_is_refused(spark, broker_uri, tmp_path):
    with rabbit_stream(broker_uri) as stream:
        publish(broker_uri, stream, messages(10, seed=1))
        _run(broker_uri, stream, tmp_path)
        assert json.loads((tmp_path / "out" / MARKER).read_text())["query"]
        result = CliRunner().invoke(spark_group, [
            "stream", "--uri", broker_uri, "--stream", stream, "--bindings",
            bindings_file(tmp_path), "--out", str(tmp_path / "out"), "--checkpoint",
            str(tmp_path / "new-checkpoint"), "--available-now", "--master", "local[1]"])
        assert result.exit_code == 1
        assert "holds the batches of query" in result.output
        assert not (tmp_path / "new-checkpoint").exists()


@pytest.mark.parametrize("sink", [(), ("--batch-directories",)])
def test_a_missing_stream_fails_the_command_with_the_brokers_reason(spark, broker_uri, tmp_path,
                                                                    sink):
    result = CliRunner().invoke(spark_group, [
        "stream", "--uri", broker_uri, "--stream", "rtroute-test.no-such-stream", "--bindings",
        bindings_file(tmp_path), "--out", str(tmp_path / "out"), "--checkpoint",
        str(tmp_path / "checkpoint"), "--available-now", "--master", "local[1]", *sink])
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        "Error: the streaming query failed: rtroute.spark.stream_consumer.StreamReadError: "
        "stream 'rtroute-test.no-such-stream': 404 NOT_FOUND - no queue "
        "'rtroute-test.no-such-stream' in vhost '/'")
    if sink:
        assert not (tmp_path / "out").exists()
    else:  # Spark's file sink made its (empty) log at the start: no batch, no data file
        assert {p.name for p in (tmp_path / "out").iterdir()} <= {
            "_spark_metadata", MARKER, f".{MARKER}.crc"}
        assert not [p for p in (tmp_path / "out" / "_spark_metadata").iterdir()
                    if p.name[:1].isdigit()]
