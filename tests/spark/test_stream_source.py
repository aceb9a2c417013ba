"""Reading a real stream: its tail, exact offset ranges, starting offsets, lossless rows, what a
stream keeps of the headers on each broker version, and the Spark source over two streams in
limited batches, exactly once with the file sink across a restart."""
from __future__ import annotations

import datetime
import decimal
import json
import time

import pika
import pytest

from rtroute.amqp.field_table import FieldTable, Float32, Int8, Int64, Timestamp, UInt16
from rtroute.spark.header_json import headers_from_json
from rtroute.spark.stream_consumer import (
    StreamConnection,
    StreamReadError,
    probe,
    read_range,
    resolve_starts,
    tails,
)
from rtroute.spark.stream_source import NAME, register_stream_source

from ..conftest import publish_frames, wait_for
from .stream_support import messages, publish, rabbit_stream, read_back, stored_headers

# version: what the broker does with a stream (its last chunk, chunk-granular times, headers)
pytestmark = [pytest.mark.broker, pytest.mark.every_broker]

MS = 1_700_000_000_123  # Date.now() of a Node.js client, sent as an AMQP timestamp


def _offsets(batches) -> list[int]:
    return [offset for batch in batches for offset in batch.column("offset").to_pylist()]


def _plain(uri: str, stream: str, count: int, first: int = 0) -> None:
    publish(uri, stream, messages(count, seed=first, first_id=first))


@pytest.fixture
def connection(broker_uri):
    opened = StreamConnection(broker_uri)
    yield opened
    opened.close()


def test_the_tail_is_one_past_the_last_message_and_a_range_reads_exactly_itself(
        broker_uri, connection):
    with rabbit_stream(broker_uri) as stream, rabbit_stream(broker_uri) as empty:
        _plain(broker_uri, stream, 700)
        _plain(broker_uri, stream, 300, first=700)  # more chunks
        assert tails(connection, [stream, empty], 0.25) == {stream: 1000}
        assert _offsets(read_range(broker_uri, stream, 0, 1000)) == list(range(1000))
        assert _offsets(read_range(broker_uri, stream, 250, 260)) == list(range(250, 260))
        first = [b.drop_columns(["drained_at"]) for b in read_range(broker_uri, stream, 990,
                                                                        1000, batch_rows=3)]
        again = [b.drop_columns(["drained_at"]) for b in read_range(broker_uri, stream, 990,
                                                                        1000)]
        assert sum(b.num_rows for b in first) == 10 and len(first) > 1
        assert [r for b in first for r in b.to_pylist()] == [r for b in again
                                                             for r in b.to_pylist()]
        assert list(read_range(broker_uri, stream, 5, 5)) == []


def test_starting_offsets_resolve_to_offsets(broker_uri, connection):
    with rabbit_stream(broker_uri) as stream, rabbit_stream(broker_uri) as empty:
        _plain(broker_uri, stream, 500)
        time.sleep(1.1)  # chunk timestamps are in milliseconds; keep the moment between them
        moment = datetime.datetime.now(datetime.timezone.utc)
        time.sleep(1.1)
        _plain(broker_uri, stream, 500, first=500)
        last_chunk = probe(connection, [stream], "last", 0.25)[stream]
        assert last_chunk[1] == 999 and 500 <= last_chunk[0] <= 999
        resolved = resolve_starts(connection, {stream: "first"}, 0.25)
        assert resolved == {stream: 0}
        assert resolve_starts(connection, {stream: "last"}, 0.25) == {stream: last_chunk[0]}
        assert resolve_starts(connection, {stream: "next", empty: "next"}, 0.25) == {
            stream: 1000, empty: 0}
        assert resolve_starts(connection, {stream: 17, empty: "first"}, 0.25) == {
            stream: 17, empty: 0}
        # chunk-granular: never after the first message written after the moment
        at = resolve_starts(connection, {stream: moment}, 0.25)[stream]
        assert 0 <= at <= 500
        later = moment + datetime.timedelta(hours=1)
        assert resolve_starts(connection, {stream: later}, 0.25) == {stream: 1000}


def test_a_missing_stream_is_a_clear_error(broker_uri, connection):
    with pytest.raises(StreamReadError, match="404"):
        tails(connection, ["rtroute-test.no-such-stream"], 0.1)
    with pytest.raises(StreamReadError, match="404"):
        list(read_range(broker_uri, "rtroute-test.no-such-stream", 0, 10))
    assert tails(StreamConnection(broker_uri), [], 0.1) == {}


def test_rows_keep_every_property_the_body_and_typed_headers(broker_uri):
    with rabbit_stream(broker_uri) as stream:
        headers = FieldTable({"price": 10.7, "ratio": Float32(1.5), "sent": Timestamp(MS),
                              "b": Int8(-3), "u": UInt16(300), "l": Int64(5),
                              "x-stream-offset": 77})
        properties = {"headers": headers, "message_id": "m-1", "timestamp": MS,
                      "delivery_mode": 2, "content_type": "a/b", "content_encoding": "gzip",
                      "priority": 4, "correlation_id": "c", "reply_to": "r",
                      "expiration": "60000", "type": "t", "user_id": "guest", "app_id": "app"}
        publish_frames(broker_uri, stream, b"lossless", properties)
        publish_frames(broker_uri, stream, b"plain", {})
        wait_for(lambda: tails(StreamConnection(broker_uri), [stream], 0.1) == {stream: 2})
        [batch] = read_range(broker_uri, stream, 0, 2)
        seconds = batch.column("timestamp").cast("int64").to_pylist()
        assert seconds == [MS * 1_000_000, None]  # microseconds, as Spark reads them
        row, plain = batch.drop_columns(["timestamp"]).to_pylist()
        assert (row["body"], row["routing_key"], row["exchange"], row["offset"]) == (
            b"lossless", stream, "", 0)
        for name, value in properties.items():
            if name not in ("headers", "timestamp"):
                assert row[name] == value, name
        got = headers_from_json(row["headers"])
        # the publisher's x-stream-offset is the broker's on delivery, and left out
        assert "x-stream-offset" not in got and len(got) == len(headers) - 1
        assert got["price"] == 10.7 and type(got["ratio"]) is Float32
        assert type(got["b"]) is Int8 and type(got["u"]) is UInt16 and got["sent"] == MS
        assert plain["headers"] is None and plain["offset"] == 1 and not plain["redelivered"]


def test_what_a_stream_keeps_of_the_headers(broker_uri, broker_version):
    published = {"CC": ["a.b", 7], "BCC": ["c.d"], "list": ["x"], "cc": ["a.b"],
                 "table": {"k": "v"}, "x-list": ["x", 1], "x-table": {"k": "v"},
                 "X-Upper": ["x"], "n": 5, "text": "t", "flag": True, "raw": b"\xff\x00",
                 "none": None}
    with rabbit_stream(broker_uri) as stream:
        publish(broker_uri, stream, [{"id": "h", "routing_key": "k", "headers": published,
                                      "body": b"", "timestamp": 1}])
        # the delivery mode a publisher left unset reads 1 from 4.0
        [batch] = read_range(broker_uri, stream, 0, 1)
        assert batch.column("delivery_mode")[0].as_py() == (
            None if broker_version < (4,) else 1)
        [(_key, headers, _body, _id)] = read_back(broker_uri, stream, 1).values()
        assert headers.pop("raw") == b"\xff\x00"
        expected = stored_headers(published, broker_version)
        expected.pop("raw")
        assert headers == expected
        # a byte array stays one on 3.x; from 4.0 it comes back as a long string
        stored = json.loads(batch.column("headers")[0].as_py())
        assert stored["raw"] == ({"$binary": "/wA="} if broker_version < (4,)
                                 else {"$longstr": "/wA="})
        assert headers_from_json(json.dumps(stored))["raw"] == b"\xff\x00"
        # a decimal header cannot be published to a stream at all: the broker closes the
        # publisher's connection (541 INTERNAL_ERROR on 3.10.8, 4.0.5 and 4.3.6)
        connection = pika.BlockingConnection(pika.URLParameters(broker_uri))
        channel = connection.channel()
        channel.basic_publish("", stream, b"", pika.BasicProperties(
            headers={"price": decimal.Decimal("1.50")}))
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker, match="541"):
            channel.queue_declare(stream, passive=True)
        assert tails(StreamConnection(broker_uri), [stream], 0.25) == {stream: 1}


@pytest.mark.slow  # loss: exactly once across a restart
def test_spark_reads_two_streams_in_limited_batches_exactly_once_across_a_restart(
        spark, broker_uri, tmp_path):
    register_stream_source(spark)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run() -> list[dict]:
        frame = (spark.readStream.format(NAME).option("uri", broker_uri)
                 .option("streams", f"{one},{two}").option("startingOffset", "first")
                 .option("maxRecordsPerTrigger", 500).option("offsetsPerPartition", 300)
                 .load())
        query = (frame.writeStream.format("parquet").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start(out))
        query.awaitTermination(300)
        assert not query.isActive
        return query.recentProgress

    with rabbit_stream(broker_uri, "part-0") as one, rabbit_stream(broker_uri, "part-1") as two:
        _plain(broker_uri, one, 1200)
        _plain(broker_uri, two, 300, first=1200)
        progress = run()
        sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
        assert sum(sizes) == 1500 and max(sizes) == 500 and len(sizes) == 3
        _plain(broker_uri, one, 100, first=1500)
        _plain(broker_uri, two, 100, first=1600)
        assert sum(p["numInputRows"] for p in run()) == 200  # only the new ones
        rows = spark.read.parquet(out).select("stream", "offset", "message_id").collect()
        assert sorted((r["stream"], r["offset"]) for r in rows) == sorted(
            [(one, i) for i in range(1300)] + [(two, i) for i in range(400)])
        assert len({r["message_id"] for r in rows}) == 1700
