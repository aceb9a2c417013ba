"""`rtroute bench spark --stream-uri`: the streaming route, the batch route, a plain stream
consumer and rtroute's stream readers (AMQP 0-9-1, stream protocol) each read every message of a fresh stream, which is
deleted after; the table and the --json rows rate each against the plain consumer."""
from __future__ import annotations

import os
import re

import pytest
from click.testing import CliRunner

pytest.importorskip("pyarrow")
pytest.importorskip("pandas")
pytest.importorskip("numpy")

from rtroute.bench.report import read_report
from rtroute.bench.spark_stream import BATCH, PLAIN, PROTOCOL, READER, STREAMING
from rtroute.cli import main

from ..conftest import stream_uri_for_test

pytestmark = [pytest.mark.broker, pytest.mark.slow]

MESSAGES = 300


def test_stream_rows_read_every_message_and_the_stream_is_deleted(broker_uri, mgmt, tmp_path):
    if os.environ.get("RTROUTE_REQUIRE_SPARK") != "1":
        pytest.importorskip("pyspark", reason="pip install 'rtroute[spark]'")
        pytest.importorskip("rtroute.spark.stream_source", reason="needs pyspark 4.2 or later")
    path = tmp_path / "spark.json"
    result = CliRunner().invoke(main, [
        "bench", "spark", "--stream-only", "--stream-uri", broker_uri,
        "--stream-messages", str(MESSAGES), "--bindings", "200", "--master", "local[1]",
        "--repeats", "1", "--json", str(path),
        "--stream-protocol-uri", stream_uri_for_test(broker_uri) or "off"],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output

    table = {cells[0]: cells for cells in
             ([c.strip() for c in line.strip("|").split("|")] for line in
              result.output.splitlines() if line.startswith("| "))}
    names = {PLAIN, READER, STREAMING, BATCH} | ({PROTOCOL} if stream_uri_for_test(broker_uri)
                                                  else set())
    for name in names:
        assert table[name][2] == f"{MESSAGES:,}"
    assert table[PLAIN][5] == "1.00x"

    report = read_report(path)
    rows = {r["name"]: r for r in report["rows"]}
    assert set(rows) == names
    for row in rows.values():
        assert row["unit"] == "rows/s" and row["value"] > 0 and row["role"] == "stream"
        assert row["rows_measured"] == MESSAGES
        assert row["ratio"] == pytest.approx(row["value"] / rows[PLAIN]["value"])
        assert "baseline_value" not in row  # the Spark chart's pipelines are other rows
    assert report["parameters"]["stream_messages"] == MESSAGES
    chunks = report["parameters"]["stream_chunks"]
    if stream_uri_for_test(broker_uri):  # counted over the stream protocol
        assert 1 <= chunks <= MESSAGES
        assert f"the stream holds {chunks:,} chunks" in result.output
    else:
        assert chunks is None
    stream = re.search(r"to stream (rtroute\.bench\.stream\.[0-9a-f]+) ", result.output)[1]
    assert stream not in {q["name"] for q in mgmt.queues(columns=("name",))}


def test_stream_only_needs_a_stream_uri():
    result = CliRunner().invoke(main, ["bench", "spark", "--stream-only"])
    assert result.exit_code == 2 and "--stream-only needs --stream-uri" in result.output
