"""`rtroute spark stream --format FORMAT`: Spark's own file sink, exactly once by its metadata
log (OUT/_spark_metadata) and the checkpoint: the same rows in parquet, json and csv as the
library routes them, each once across two runs and a batch Spark runs again after its commit
was lost; an unknown format is refused before the query starts, and an OUT of the other sink
(batch directories) is refused."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rtroute.spark.commands import spark as spark_group
from rtroute.spark.stream_job import MARKER, SPARK_METADATA

from .stream_support import (
    bindings_file,
    expected_routing,
    messages,
    publish,
    rabbit_stream,
    read_back,
)

pytestmark = [pytest.mark.broker, pytest.mark.slow,
              pytest.mark.every_broker]  # loss: each message exactly once

FORMATS = ("parquet", "json", "csv")


def _invoke(uri: str, stream: str, tmp_path, out: str, *extra: str):
    return CliRunner().invoke(spark_group, [
        "stream", "--uri", uri, "--stream", stream, "--bindings", bindings_file(tmp_path),
        "--out", str(tmp_path / out), "--checkpoint", str(tmp_path / f"{out}.checkpoint"),
        "--available-now", "--master", "local[1]", "--max-records-per-trigger", "1500",
        *extra])


def _run(*args, **kwargs):
    result = _invoke(*args, **kwargs)
    assert result.exit_code == 0, result.output
    return result


def read_rows(spark, out, fmt: str) -> list[dict]:
    """OUT as Spark reads it (through the sink's log): offset, destinations, error per row."""
    from pyspark.sql import functions as F

    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", True)
    frame = reader.load(str(out))
    if "error" not in frame.columns:   # json leaves null fields out: no row had one
        frame = frame.withColumn("error", F.lit(None).cast("string"))
    rows = []
    for row in frame.select("offset", "destinations", "error").collect():
        destinations = row["destinations"]
        if isinstance(destinations, str):   # csv: the array as JSON text
            destinations = json.loads(destinations)
        rows.append({"offset": int(row["offset"]), "destinations": list(destinations),
                     "error": row["error"] or None})
    return sorted(rows, key=lambda r: r["offset"])


def test_each_format_holds_the_same_rows_exactly_once_across_runs(spark, broker_uri, tmp_path):
    with rabbit_stream(broker_uri) as stream:
        publish(broker_uri, stream, messages(3000, seed=21))
        for fmt in FORMATS:
            result = _run(broker_uri, stream, tmp_path, fmt, "--format", fmt)
            assert f"wrote {tmp_path / fmt} ({fmt})" in result.output
            assert (tmp_path / fmt / SPARK_METADATA).is_dir()
            assert json.loads((tmp_path / fmt / MARKER).read_text())["query"]
        publish(broker_uri, stream, messages(2000, seed=22, first_id=3000))
        expected = expected_routing(read_back(broker_uri, stream, 5000))
        want = [{"offset": o, "destinations": expected[o][0], "error": None}
                for o in range(5000)]
        for fmt in FORMATS:
            again = _run(broker_uri, stream, tmp_path, fmt, "--format", fmt)
            assert "| messages " in again.output
            assert read_rows(spark, tmp_path / fmt, fmt) == want, fmt  # each exactly once

        # the last batch's commit is lost (a crash after the sink logged it): Spark runs it
        # again, and the file sink, finding it in its log, does not write it twice
        checkpoint = tmp_path / "parquet.checkpoint"
        commits = sorted((p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()),
                         key=lambda p: int(p.name))
        last = commits[-1]
        last.unlink()
        (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
        replay = _run(broker_uri, stream, tmp_path, "parquet")   # parquet: the default
        assert f"batch {last.name}: offsets" in replay.output, replay.output
        assert "already written" in replay.output
        assert read_rows(spark, tmp_path / "parquet", "parquet") == want


def test_an_unknown_format_is_refused_before_the_query_starts(spark, broker_uri, tmp_path):
    with rabbit_stream(broker_uri) as stream:
        publish(broker_uri, stream, messages(10, seed=1))
        result = _invoke(broker_uri, stream, tmp_path, "out", "--format", "parqet")
        assert result.exit_code == 1
        assert "Error: unknown output format 'parqet': " in result.output
        assert "parqet" in result.output.splitlines()[-1]
        assert not (tmp_path / "out").exists() and not (tmp_path / "out.checkpoint").exists()
        text = _invoke(broker_uri, stream, tmp_path, "out", "--format", "text")
        assert text.exit_code == 1 and "one string column" in text.output


def test_an_out_of_the_other_sink_is_refused(spark, broker_uri, tmp_path):
    with rabbit_stream(broker_uri) as stream:
        publish(broker_uri, stream, messages(10, seed=2))
        _run(broker_uri, stream, tmp_path, "out")
        other = _invoke(broker_uri, stream, tmp_path, "out", "--batch-directories")
        assert other.exit_code == 1
        assert "not batch directories: leave out --batch-directories" in other.output
        _run(broker_uri, stream, tmp_path, "dirs", "--batch-directories", "--format", "json")
        assert [p.name for p in (tmp_path / "dirs").iterdir() if p.name.startswith("batch=")]
        back = _invoke(broker_uri, stream, tmp_path, "dirs")
        assert back.exit_code == 1 and "written with --batch-directories" in back.output
