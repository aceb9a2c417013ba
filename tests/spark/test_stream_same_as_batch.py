"""`rtroute spark stream --available-now` gives the rows `rtroute spark route` gives over the
same messages: the stream read by the source (over the stream protocol where it answers, as the
suite runs it) and routed micro-batch by micro-batch, against the same stream read by the
AMQP 0-9-1 reader (the broker's own conversion of each message), written as an archive and
routed as a batch. Every column is compared, offset by offset, but the times each reader
received the messages."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from rtroute.bench.spark_stream import publish_messages
from rtroute.spark.commands import spark as spark_group
from rtroute.spark.stream_consumer import read_range

from .stream_support import bindings_file, messages, publish, rabbit_stream

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.every_broker]

COUNT = 3000


def _invoke(*args: str) -> None:
    result = CliRunner().invoke(spark_group, [*args, "--master", "local[2]"])
    assert result.exit_code == 0, result.output


def _rows(path, ignore: tuple[str, ...]) -> list[dict]:
    table = ds.dataset(str(path), format="parquet", partitioning="hive").to_table()
    table = table.drop_columns([c for c in ignore if c in table.column_names])
    rows = table.to_pylist()
    for row in rows:
        row["delivered_headers"] = sorted(row["delivered_headers"] or []) \
            if row["delivered_headers"] is not None else None
    return sorted(rows, key=lambda r: r["offset"])


def test_the_streaming_route_gives_the_rows_of_the_batch_route(spark, broker_uri, tmp_path):
    bindings = bindings_file(tmp_path)
    with rabbit_stream(broker_uri, "same-as-batch") as stream:
        # with properties (the reader's full decoder), then without (its common shape, in C)
        publish(broker_uri, stream, messages(COUNT // 2, seed=46))
        publish_messages(broker_uri, stream, [
            (m["routing_key"], m["headers"], m["body"])
            for m in messages(COUNT - COUNT // 2, seed=47, first_id=COUNT // 2)])
        _invoke("stream", "--uri", broker_uri, "--stream", stream, "--bindings", bindings,
                "--out", str(tmp_path / "streamed"), "--checkpoint", str(tmp_path / "ckpt"),
                "--available-now", "--max-records-per-trigger", "1200")
        archive = pa.Table.from_batches(list(read_range(broker_uri, stream, 0, COUNT)))
    pq.write_table(archive, tmp_path / "archive.parquet")
    _invoke("route", "--messages", str(tmp_path / "archive.parquet"), "--bindings", bindings,
            "--out", str(tmp_path / "routed"))
    streamed = _rows(tmp_path / "streamed", ("drained_at", "batch"))
    routed = _rows(tmp_path / "routed", ("drained_at",))
    assert [r["offset"] for r in streamed] == list(range(COUNT))
    assert streamed == routed
    assert any(r["destinations"] for r in routed) and any(r["headers"] for r in routed)
    assert any(r["message_id"] is None and r["headers"] is None for r in routed)
