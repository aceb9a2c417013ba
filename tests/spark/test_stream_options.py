"""The stream source's options, offsets and batch planning, without a broker or a session."""
from __future__ import annotations

import datetime
import pickle
import random

import pyarrow as pa
import pytest
from click.testing import CliRunner

from rtroute.spark.commands import spark as spark_group
from rtroute.spark.stream_consumer import ARROW_SCHEMA, format_start, parse_start, parse_starts
from rtroute.spark.stream_job import _progress_line, batch_directory
from rtroute.spark.stream_source import (
    MIN_PARTITION_OFFSETS,
    ROUTED_ARROW_SCHEMA,
    RabbitMQStreamReader,
    StreamOptions,
    partition_ranges,
    share_limit,
    spark_schema,
)

URI = "amqp://guest:guest@127.0.0.1:5672/%2F"
UTC = datetime.timezone.utc


def _options(**more: str) -> StreamOptions:
    return StreamOptions({"uri": URI, "stream": "s-0, s-1", **more})


def test_starting_offsets_are_words_offsets_or_times():
    assert [parse_start(t) for t in ("first", "LAST", " next ", "0", "1200")] == [
        "first", "last", "next", 0, 1200]
    assert parse_start("2024-05-01T12:00:00Z") == datetime.datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert parse_start("2024-05-01") == datetime.datetime(2024, 5, 1, tzinfo=UTC)  # UTC
    assert parse_start(format_start(parse_start("2024-05-01T14:00:00+02:00"))) == \
        datetime.datetime(2024, 5, 1, 12, tzinfo=UTC)
    for bad in ("-1", "newest", "12a"):
        with pytest.raises(ValueError, match="first, last, next, an offset|0 or more"):
            parse_start(bad)


def test_each_stream_may_start_elsewhere_but_every_stream_must_be_named():
    assert parse_starts(None, ["a", "b"]) == {"a": "next", "b": "next"}
    assert parse_starts("first", ["a", "b"]) == {"a": "first", "b": "first"}
    assert parse_starts('{"a": 12, "b": "last"}', ["a", "b"]) == {"a": 12, "b": "last"}
    with pytest.raises(ValueError, match="exactly the streams"):
        parse_starts('{"a": 12}', ["a", "b"])
    with pytest.raises(ValueError, match="not a JSON object"):
        parse_starts("{a: 12}", ["a"])


def test_options_are_checked_and_named_in_the_error():
    options = _options(maxRecordsPerTrigger="500", STARTINGOFFSET="first")  # any case
    assert options.streams == ("s-0", "s-1") and options.max_records == 500
    assert options.starts == {"s-0": "first", "s-1": "first"}
    assert (options.prefetch, options.tail_wait, options.partition_offsets) == (
        2000, 0.25, 50_000)
    with pytest.raises(ValueError, match="'uri' option is required"):
        StreamOptions({"stream": "s"})
    with pytest.raises(ValueError, match="'stream' option is required"):
        StreamOptions({"uri": URI, "stream": " , "})
    with pytest.raises(ValueError, match="maxrecordspertrigger must be at least 1"):
        _options(maxRecordsPerTrigger="0")
    with pytest.raises(ValueError, match="prefetch must be from 1 to 65535"):
        _options(prefetch="70000")
    with pytest.raises(ValueError, match="must be a number"):
        _options(tailWait="soon")
    with pytest.raises(ValueError, match="did you mean maxRecordsPerTrigger"):
        _options(maxRecordPerTrigger="10")
    with pytest.raises(ValueError, match="amqp"):
        StreamOptions({"uri": "http://host/", "stream": "s"})


def test_a_limit_is_shared_in_proportion_and_never_exceeded():
    assert share_limit({"a": 300, "b": 100}, 1000) == {"a": 300, "b": 100}
    assert share_limit({"a": 300, "b": 100}, 200) == {"a": 150, "b": 50}
    assert share_limit({"a": 1, "b": 1, "c": 1}, 2) == {"a": 1, "b": 1, "c": 0}
    rnd = random.Random(5)
    for _ in range(500):
        backlog = {f"s{i}": rnd.choice([0, 1, 7, 1000, rnd.randrange(10**6)])
                   for i in range(rnd.randint(1, 6))}
        limit = rnd.randint(1, 10**5)
        shares = share_limit(backlog, limit)
        assert sum(shares.values()) == min(limit, sum(backlog.values()))
        assert all(0 <= shares[s] <= backlog[s] for s in backlog)


class _Reader(RabbitMQStreamReader):
    """The reader with the broker replaced by fixed tails."""

    def __init__(self, options: StreamOptions, found: dict[str, int]) -> None:
        super().__init__(options)
        self.found = found
        self.probes = 0

    def _tails(self) -> dict[str, int]:
        self.probes += 1
        return dict(self.found)


def test_a_batch_ends_at_the_tail_or_the_limit_and_available_now_at_its_target():
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    reader = _Reader(_options(), {"s-0": 1000, "s-1": 40})
    start = {"s-0": 100, "s-1": 40}
    assert reader.latestOffset(start, ReadAllAvailable()) == {"s-0": 1000, "s-1": 40}
    assert reader.latestOffset(start, ReadMaxRows(300)) == {"s-0": 400, "s-1": 40}
    reader.found = {"s-0": 1000}  # s-1 empty, or the probe saw nothing of it
    assert reader.latestOffset(start, ReadAllAvailable()) == {"s-0": 1000, "s-1": 40}
    reader.prepareForTriggerAvailableNow()
    reader.found = {"s-0": 5000, "s-1": 90}  # written after the query started: not read
    probes = reader.probes
    assert reader.latestOffset(start, ReadAllAvailable()) == {"s-0": 1000, "s-1": 40}
    assert reader.latestOffset({"s-0": 1000, "s-1": 40}, ReadAllAvailable()) == {
        "s-0": 1000, "s-1": 40}  # = start: the query is done
    assert reader.probes == probes
    with pytest.raises(ValueError, match="use a new checkpoint location"):
        reader.latestOffset({"s-0": 1}, ReadAllAvailable())


def test_a_batch_is_split_into_partitions_of_offsets():
    reader = RabbitMQStreamReader(_options(offsetsPerPartition="1000"))
    parts = reader.partitions({"s-0": 0, "s-1": 500}, {"s-0": 2500, "s-1": 900})
    assert [(p.stream, p.low, p.high) for p in parts] == [
        ("s-0", 0, 1000), ("s-0", 1000, 2000), ("s-0", 2000, 2500), ("s-1", 500, 900)]
    assert reader.partitions({"s-0": 7, "s-1": 9}, {"s-0": 7, "s-1": 9}) == []
    copy = pickle.loads(pickle.dumps(parts[1]))
    assert (copy.stream, copy.low, copy.high) == ("s-0", 1000, 2000)


def test_min_partitions_splits_a_small_batch_for_every_core_but_not_below_a_floor():
    assert _options().min_partitions == 1
    reader = RabbitMQStreamReader(_options(minPartitions="2"))
    parts = reader.partitions({"s-0": 0, "s-1": 100}, {"s-0": 50_000, "s-1": 10_100})
    assert [(p.stream, p.low, p.high) for p in parts] == [  # shared in proportion
        ("s-0", 0, 25_000), ("s-0", 25_000, 50_000), ("s-1", 100, 10_100)]
    assert partition_ranges({"s": 0}, {"s": 10_000}, 3_000, 2) == [  # size still the most
        ("s", 0, 3_000), ("s", 3_000, 6_000), ("s", 6_000, 9_000), ("s", 9_000, 10_000)]
    assert partition_ranges({"s": 0}, {"s": 10_000}, 50_000, 3) == [
        ("s", 0, 3_334), ("s", 3_334, 6_668), ("s", 6_668, 10_000)]
    small = 2 * MIN_PARTITION_OFFSETS - 1  # two would each hold less than the floor
    assert partition_ranges({"s": 5}, {"s": 5 + small}, 50_000, 8) == [("s", 5, 5 + small)]
    for minimum in (1, 2, 5, 64):  # every offset exactly once, in order
        ranges = partition_ranges({"a": 3, "b": 0}, {"a": 77_777, "b": 4_321}, 20_000, minimum)
        for stream, (low, high) in (("a", (3, 77_777)), ("b", (0, 4_321))):
            mine = [(lo, hi) for s, lo, hi in ranges if s == stream]
            assert mine[0][0] == low and mine[-1][1] == high
            assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))
            assert all(0 < hi - lo <= 20_000 for lo, hi in mine)
    with pytest.raises(ValueError, match="minpartitions must be at least 1"):
        _options(minPartitions="0")


def test_a_routed_reader_routes_each_batch_it_reads_as_route_would(monkeypatch):
    """The routed source's reader yields the batches the reader read, routed by the plan's
    bindings as :class:`BatchRouter` routes them, in the Arrow types Spark's check of a Python
    source wants for ``routed_schema(spark_schema())``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from rtroute.spark import stream_protocol_reader
    from rtroute.spark.batches import BatchRouter
    from rtroute.spark.job import route_plan, routed_schema
    from rtroute.spark.stream_source import StreamPartition

    assert to_arrow_schema(routed_schema(spark_schema()), timezone="UTC").equals(
        ROUTED_ARROW_SCHEMA)
    rows = [{"routing_key": "a.b", "headers": None}, {"routing_key": "x.y", "headers": None},
            {"routing_key": "c", "headers": '{"CC": ["a.b"]}'}, {"routing_key": None}]
    read = pa.RecordBatch.from_pylist(rows, schema=ARROW_SCHEMA)
    monkeypatch.setattr(stream_protocol_reader, "read_range", lambda *a, **k: iter([read]))
    pairs = [("q1", "a.*"), ("q2", "#.b"), ("q3", "x.#")]
    reader = RabbitMQStreamReader(_options(), route_plan(pairs, "topic"))
    reader = pickle.loads(pickle.dumps(reader))  # as an executor gets it
    [routed] = list(reader.read(StreamPartition("s-0", 0, 4, "rabbitmq-stream://h:5552/%2F")))
    assert routed.schema.equals(ROUTED_ARROW_SCHEMA)
    expected = BatchRouter("topic", pairs).route_batch(read)
    assert routed.to_pylist() == expected.to_pylist()
    assert routed.column("destinations").to_pylist() == [["q1", "q2"], ["q3"], ["q1", "q2"],
                                                         None]
    plain = RabbitMQStreamReader(_options())  # no plan: the rows as read
    assert list(plain.read(StreamPartition("s-0", 0, 4, "rabbitmq-stream://h:5552/%2F"))) == [
        read]


def test_the_reader_pickles_without_its_driver_connection():
    reader = RabbitMQStreamReader(_options())
    reader._connection = object()  # unpicklable, as a live connection is
    reader._target = {"s-0": 1}
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._connection is None and copy._target is None
    assert copy.options.streams == ("s-0", "s-1")


def test_the_spark_schema_is_the_arrow_schema_the_reader_yields():
    from pyspark.sql.pandas.types import to_arrow_schema

    assert to_arrow_schema(spark_schema(), timezone="UTC").equals(ARROW_SCHEMA)
    assert ARROW_SCHEMA.names[-2:] == ["stream", "offset"]


def test_progress_lines_name_each_stream_range():
    progress = {"batchId": 3, "numInputRows": 1500, "durationMs": {"triggerExecution": 1500},
                "sources": [{"startOffset": '{"s-0": 1000, "s-1": 7}',
                             "endOffset": {"s-0": 2500, "s-1": 7}}]}
    assert _progress_line(progress, "out/batch=00000003", False) == (
        "batch 3: 1,500 messages (s-0 1000-2499); 1.5 s, 1,000 msg/s; wrote out/batch=00000003")
    assert "already written to out/batch=00000003" in _progress_line(progress,
                                                                      "out/batch=00000003", True)
    assert batch_directory(12) == "batch=00000012"


def test_stream_command_refuses_a_bad_starting_offset_before_starting_spark(tmp_path):
    result = CliRunner().invoke(spark_group, [
        "stream", "--stream", "s", "--bindings", "b.toml", "--out", str(tmp_path / "o"),
        "--checkpoint", str(tmp_path / "c"), "--starting-offset", "yesterday"])
    assert result.exit_code == 2 and "--starting-offset" in result.output
    assert not (tmp_path / "o").exists()


def test_stream_command_refuses_a_bad_source_option_before_starting_spark(tmp_path):
    args = ["stream", "--stream", "s", "--bindings", "b.toml", "--out", str(tmp_path / "o"),
            "--checkpoint", str(tmp_path / "c")]
    result = CliRunner().invoke(spark_group, [*args, "--source-option", "prefetch=lots"])
    assert result.exit_code == 1 and "option prefetch must be a number" in result.output
    result = CliRunner().invoke(spark_group, [*args, "--source-option", "tailwait"])
    assert result.exit_code == 2 and "expected KEY=VALUE" in result.output


def test_with_an_env_archive_the_driver_finds_the_executors_python_path_as_its_own():
    import os
    import subprocess
    import sys

    from rtroute.spark.commands.stream import _driver_runs_env_python
    from rtroute.spark.executors import ENV_PYTHON

    here = os.getcwd()
    with _driver_runs_env_python(True):
        inside = os.getcwd()
        ran = subprocess.run([ENV_PYTHON, "-c", "import rtroute, sys; print(sys.prefix)"],
                             capture_output=True, text=True, check=True)
    assert os.getcwd() == here != inside
    assert ran.stdout.strip() == sys.prefix  # this interpreter, with its packages
    with _driver_runs_env_python(False):
        assert os.getcwd() == here


def test_stream_uri_is_auto_off_or_a_stream_uri(monkeypatch):
    monkeypatch.delenv("RTROUTE_STREAM_URI", raising=False)
    assert _options().stream_uri == "auto"
    assert _options(streamUri="OFF").stream_uri == "off"
    given = "rabbitmq-stream://guest:guest@127.0.0.1:5554/%2F"
    assert _options(streamUri=given).stream_uri == given
    monkeypatch.setenv("RTROUTE_STREAM_URI", given)
    assert _options().stream_uri == given
    assert _options(streamUri="auto").stream_uri == "auto"
    with pytest.raises(ValueError, match="streamUri must be auto, off or a rabbitmq-stream"):
        _options(streamUri="amqp://h/")
