"""Draining a real queue into Parquet: every message once, acked only once its file is on disk."""
from __future__ import annotations

import datetime
import json
import uuid

import pika
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from rtroute import RTopicExchange
from rtroute.amqp import connect_blocking
from rtroute.spark import archive, drain, route
from rtroute.spark.archive import DrainError, headers_json
from rtroute.spark.commands import spark as spark_group

from ..conftest import wait_for
from .conftest import plugin_bindings

pytestmark = pytest.mark.broker


def _publish(uri: str, queue: str, count: int) -> list[dict]:
    """``count`` messages through the default exchange, every third with a CC header."""
    sent = []
    connection = connect_blocking(uri)
    channel = connection.channel()
    for i in range(count):
        headers = {"CC": ["server2.app1.mod1.info"], "n": i, "raw": b"\x00\x01"} if i % 3 == 0 \
            else None
        channel.basic_publish("", queue, f"body {i}".encode(), pika.BasicProperties(
            headers=headers, message_id=f"m{i}", delivery_mode=2, timestamp=1_700_000_000 + i))
        sent.append({"message_id": f"m{i}", "headers": headers})
    connection.close()
    return sent


def _ready(uri: str, queue: str) -> int:
    connection = connect_blocking(uri)
    try:
        return connection.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        connection.close()


def test_drain_writes_every_message_once_and_empties_the_queue(broker_uri, queue, tmp_path):
    sent = _publish(broker_uri, queue, 2500)
    progress: list[str] = []
    stats = drain(broker_uri, queue, tmp_path, batch_size=1000, idle_timeout=0.5,
                  echo=progress.append)
    assert stats.messages == 2500 and len(stats.files) == 3 and len(progress) == 3
    assert [pq.read_metadata(f).num_rows for f in stats.files] == [1000, 1000, 500]
    assert not list(tmp_path.glob(".*"))  # no temporary file left
    table = pq.read_table(tmp_path).to_pylist()
    assert sorted(r["message_id"] for r in table) == sorted(m["message_id"] for m in sent)
    first = next(r for r in table if r["message_id"] == "m0")
    assert first["routing_key"] == queue and first["body"] == b"body 0"
    assert json.loads(first["headers"]) == {"CC": ["server2.app1.mod1.info"], "n": 0,
                                            "raw": {"$binary": "AAE="}}
    assert first["timestamp"] == datetime.datetime.fromtimestamp(1_700_000_000,
                                                                 datetime.timezone.utc)
    assert wait_for(lambda: _ready(broker_uri, queue) == 0)


def test_a_failed_write_leaves_its_messages_in_the_queue(broker_uri, queue, tmp_path,
                                                         monkeypatch):
    _publish(broker_uri, queue, 2500)
    real_write = archive.write_part
    calls = []

    def write_then_fail(rows, directory, name, *mode):
        calls.append(len(rows))
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_write(rows, directory, name, *mode)

    monkeypatch.setattr(archive, "write_part", write_then_fail)
    with pytest.raises(OSError, match="No space left"):
        drain(broker_uri, queue, tmp_path, batch_size=1000, idle_timeout=0.5)
    assert calls == [1000, 1000]
    assert len(list(tmp_path.glob("*.parquet"))) == 1
    # only the first file's messages were acked; the rest come back when the connection closes
    assert wait_for(lambda: _ready(broker_uri, queue) == 1500)


def test_max_messages_stops_early_and_requeues_the_prefetched_rest(broker_uri, queue, tmp_path):
    _publish(broker_uri, queue, 300)
    stats = drain(broker_uri, queue, tmp_path, batch_size=100, idle_timeout=0.5,
                  max_messages=150)
    assert stats.messages == 150 and [pq.read_metadata(f).num_rows for f in stats.files] == [
        100, 50]
    assert wait_for(lambda: _ready(broker_uri, queue) == 150)


def test_drained_archive_routes_like_the_exchange(spark, broker_uri, queue, tmp_path):
    from pyspark.sql import functions as F

    sent = _publish(broker_uri, queue, 30)
    result = CliRunner().invoke(spark_group, ["drain", "--uri", broker_uri, "--queue", queue,
                                              "--out", str(tmp_path), "--idle-timeout", "0.5"])
    assert result.exit_code == 0, result.output
    assert "| messages   |    30 |" in result.output
    # The default exchange routed by queue name: route the archive as if published with key
    # "a.b" (bound by nothing), so only the CC header (every third message) reaches F.
    frame = spark.read.parquet(str(tmp_path)).withColumn("routing_key", F.lit("a.b"))
    exchange = RTopicExchange()
    for destination, key in plugin_bindings():
        exchange.bind(destination, key)
    routed = {r["message_id"]: r for r in route(frame, plugin_bindings()).collect()}
    for message in sent:
        headers = json.loads(headers_json(message["headers"])) if message["headers"] else None
        got = routed[message["message_id"]]
        assert got["destinations"] == sorted(exchange.route("a.b", headers).destinations)
    assert routed["m0"]["destinations"] == ["F"] and routed["m1"]["destinations"] == []


def test_draining_a_missing_queue_is_a_clear_error(broker_uri, tmp_path):
    with pytest.raises(DrainError, match="404"):
        drain(broker_uri, f"rtroute-test.missing.{uuid.uuid4().hex[:8]}", tmp_path,
              idle_timeout=0.2)
