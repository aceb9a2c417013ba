"""Draining messages pika cannot decode: a double stays 10.7, a millisecond timestamp and a
deep table are archived like any other message, and the headers come back byte for byte."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rtroute.amqp.content_header import headers_span, table_entries
from rtroute.amqp.field_table import FieldTable, Float32, Timestamp, encode_value
from rtroute.spark import drain
from rtroute.spark.header_json import headers_from_json

from ..conftest import publish_frames

pytestmark = pytest.mark.broker

MS = 1_700_000_000_123  # Date.now() of a Node.js client, sent as an AMQP timestamp


def deep(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


def entries_by_name(header: bytes) -> dict:
    return {name: header[s:e] for name, s, e in table_entries(header, headers_span(header))}


def test_a_drain_keeps_doubles_floats_timestamps_and_deep_tables(broker_uri, queue, tmp_path):
    headers = FieldTable({"price": 10.7, "ratio": Float32(1.5), "sent": Timestamp(MS),
                          "deep": deep(1000), "CC": ["a.b"]})
    published = publish_frames(broker_uri, queue, b"lossless", {
        "headers": headers, "message_id": "m-1", "timestamp": MS, "delivery_mode": 2})
    publish_frames(broker_uri, queue, b"plain", {"message_id": "m-2"})
    stats = drain(broker_uri, queue, tmp_path, idle_timeout=0.5)
    assert stats.messages == 2
    table = pq.read_table(tmp_path)
    rows = {r["message_id"]: r for r in table.drop(["timestamp"]).to_pylist()}
    row = rows["m-1"]
    assert row["body"] == b"lossless" and row["routing_key"] == queue
    got = headers_from_json(row["headers"])
    assert got["price"] == 10.7 and type(got["ratio"]) is Float32
    assert got["sent"] == MS and got["CC"] == ["a.b"]
    for name, encoded in entries_by_name(published).items():
        assert encode_value(got[name]) == encoded[encoded[0] + 1:], name  # byte for byte
    seconds = table.column("timestamp").cast(pa.int64()).to_pylist()
    assert sorted(s for s in seconds if s is not None) == [MS * 1000]  # ms, as Parquet has it
    assert rows["m-2"]["headers"] is None
