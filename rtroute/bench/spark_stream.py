"""`rtroute bench spark --stream-uri URI`: the streaming route beside the batch route and
beside a plain stream consumer, on the same messages.

The messages are those of the batch bench's archive (:func:`rtroute.bench.spark.
generate_archive`: its key and header mix, 100-byte bodies), published in id order with
windowed publisher confirms (:class:`rtroute.amqp.ConfirmWindow`) through a fanout exchange
into a fresh stream ``rtroute.bench.stream.<hex>`` (so each keeps its routing key, and offset
``i`` is the message of id ``i``). Exchange and stream are deleted at the end, whatever
happened. Each run reads all ``messages`` of it, best of ``repeats``, wall time from opening the
connection (or starting the query) to the last row:

1. ``plain stream consumer``: what a user writes without Spark: pika's ``basic_consume``
   from ``first`` (prefetch 1000, one ``multiple`` ack per 500 deliveries), counting the
   messages pika decoded and nothing more.
2. ``rtroute stream consumer``: :func:`rtroute.spark.stream_consumer.read_range` over
   ``[0, messages)``, the AMQP 0-9-1 reader (frames decoded without pika, into Arrow rows): the
   source's fallback where the stream protocol is off; no Spark.
2b. ``rtroute stream-protocol reader``: :func:`rtroute.spark.stream_protocol_reader.read_range`
   over ``[0, messages)`` on the broker's stream port (``stream_protocol_uri``), the reader each
   partition of the Spark source runs where the stream protocol answers; no Spark. Absent when
   no stream port answers for the broker.
3. ``spark stream (available-now)``: :func:`rtroute.spark.stream_job.run_stream`, the function
   ``rtroute spark stream --available-now`` calls, run in this process's Spark session (a
   subprocess would add the JVM's start to the wall time, which the batch row does not pay),
   with the bench's bindings written to a file as the CLI reads them, a fresh checkpoint and
   output each run, and the source's default options but ``streamUri`` (the stream-protocol
   reader's URI, or ``off`` when there is none). Its row count (the query's and the one
   read back from the output) must be ``messages``, else :class:`ResultMismatch`.
4. ``spark route (batch)``: :func:`rtroute.spark.route` over the generated archive the
   messages were published from (the same rows, read from Parquet, written as Parquet).

Before timing, one batch route over 2,000 rows and one streaming query over the stream's last
2,000 messages warm the JVM and the Python workers. The stream does not keep every header
(``BCC`` is stripped, as by any queue; RabbitMQ 3.10 also drops every array, ``CC`` included),
so rows 3 and 4 route the same messages, not the same headers: only the counts are compared.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rtroute.bench.spark import ResultMismatch, benchmark_bindings, generate_archive

__all__ = ["BATCH", "PLAIN", "PROTOCOL", "READER", "STREAMING", "StreamBenchError", "StreamMeasurement",
           "format_table", "json_rows", "run", "temporary_stream"]

PLAIN = "plain stream consumer"
READER = "rtroute stream consumer"
PROTOCOL = "rtroute stream-protocol reader"
STREAMING = "spark stream (available-now)"
BATCH = "spark route (batch)"
WHAT = {PLAIN: "pika basic_consume, counts", READER: "read_range: frames -> Arrow rows",
        PROTOCOL: "stream protocol: chunks -> Arrow rows",
        STREAMING: "stream source + route + Parquet", BATCH: "Parquet + route + Parquet"}
PLAIN_PREFETCH = 1000
WARM_UP_ROWS = 2_000


class StreamBenchError(RuntimeError):
    """The stream could not be filled or read as the bench needs (a nack, a stall)."""


@dataclass
class StreamMeasurement:
    """One reader's best run over the stream's messages."""

    name: str
    rows: int
    seconds: float

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


def archive_messages(directory: Path) -> list[tuple[str, dict[str, Any] | None, bytes]]:
    """The generated archive's rows in id order as ``(routing_key, headers, body)``."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(directory)
    table = table.take(pc.sort_indices(table, [("id", "ascending")]))
    return [(key, None if headers is None else json.loads(headers), body)
            for key, headers, body in zip(table.column("routing_key").to_pylist(),
                                          table.column("headers").to_pylist(),
                                          table.column("body").to_pylist())]


def bench_stream(uri: str) -> contextlib.AbstractContextManager[str]:
    """A new durable stream for one bench run (see :func:`temporary_stream`)."""
    return temporary_stream(uri, f"rtroute.bench.stream.{uuid.uuid4().hex[:12]}")


@contextlib.contextmanager
def temporary_stream(uri: str, name: str) -> Iterator[str]:
    """A new durable stream ``name`` and a fanout exchange of the same name bound to it, so
    that messages keep the routing keys they were published with; both deleted on exit (on a
    connection of their own: one left idle through a long run misses its heartbeats)."""
    from rtroute.amqp import connect_blocking

    connection = connect_blocking(uri, connection_name="rtroute-temporary-stream")
    try:
        channel = connection.channel()
        channel.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        channel.exchange_declare(name, "fanout", durable=False, auto_delete=False)
        channel.queue_bind(name, name)
    finally:
        connection.close()
    try:
        yield name
    finally:
        connection = connect_blocking(uri, connection_name="rtroute-temporary-stream")
        try:
            channel = connection.channel()
            channel.exchange_delete(name)
            channel.queue_delete(name)
        finally:
            connection.close()


def publish_messages(uri: str, exchange: str,
                     messages: list[tuple[str, dict[str, Any] | None, bytes]],
                     window: int = 1000) -> float:
    """Publishes ``messages`` in order with up to ``window`` unconfirmed; returns the seconds
    until the last confirm.

    Raises:
        StreamBenchError: a message was not acked.
    """
    import pika

    from rtroute.amqp import ConfirmWindow, connect_blocking

    start = time.perf_counter()
    connection = connect_blocking(uri, connection_name="rtroute-bench-stream-publish")
    try:
        confirms = ConfirmWindow(connection.channel(), window=window)
        confirms.start()
        for key, headers, body in messages:
            confirms.publish(exchange, key, body, pika.BasicProperties(headers=headers))
        confirms.wait_for_confirms()
        if confirms.acked != len(messages):
            raise StreamBenchError(f"{confirms.acked:,} of {len(messages):,} messages acked "
                                   f"({confirms.nacked:,} nacked, {confirms.failed:,} failed)")
    finally:
        connection.close()
    return time.perf_counter() - start


def read_plain(uri: str, stream: str, count: int, prefetch: int = PLAIN_PREFETCH,
               stall: float = 60.0) -> float:
    """Seconds a plain pika consumer takes to receive ``count`` messages of ``stream`` from
    ``first``, acking every ``prefetch // 2`` deliveries at once.

    Raises:
        StreamBenchError: no delivery came for ``stall`` seconds.
    """
    from rtroute.amqp import connect_blocking

    ack_every = max(1, prefetch // 2)
    received = 0

    def on_message(channel: Any, method: Any, _properties: Any, _body: bytes) -> None:
        nonlocal received
        received += 1
        if received % ack_every == 0 or received == count:
            channel.basic_ack(method.delivery_tag, multiple=True)

    start = time.perf_counter()
    connection = connect_blocking(uri, connection_name="rtroute-bench-plain-consumer")
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=prefetch)
        channel.basic_consume(stream, on_message, arguments={"x-stream-offset": "first"})
        last, seen = time.perf_counter(), 0
        while received < count:
            connection.process_data_events(0.1)
            now = time.perf_counter()
            if received != seen:
                last, seen = now, received
            elif now - last > stall:
                raise StreamBenchError(f"plain consumer: {received:,} of {count:,} messages, "
                                       f"then none for {stall:.0f} s")
        seconds = time.perf_counter() - start
    finally:
        connection.close()
    return seconds


def read_with_rtroute(uri: str, stream: str, count: int) -> float:
    """Seconds :func:`~rtroute.spark.stream_consumer.read_range` (AMQP 0-9-1 at ``uri``) takes
    to read offsets ``[0, count)`` of ``stream`` as Arrow rows.

    Raises:
        StreamBenchError: it read another number of rows.
    """
    from rtroute.spark.stream_consumer import read_range

    return _timed_read(read_range, uri, stream, count)


def read_with_stream_protocol(stream_uri: str, stream: str, count: int) -> float:
    """Seconds :func:`~rtroute.spark.stream_protocol_reader.read_range` (the stream protocol
    at ``stream_uri``) takes to read offsets ``[0, count)`` of ``stream`` as Arrow rows.

    Raises:
        StreamBenchError: it read another number of rows.
    """
    from rtroute.spark.stream_protocol_reader import read_range

    return _timed_read(read_range, stream_uri, stream, count)


def _timed_read(read_range: Callable[..., Iterator[Any]], uri: str, stream: str,
                count: int) -> float:
    start = time.perf_counter()
    rows = sum(batch.num_rows for batch in read_range(uri, stream, 0, count))
    seconds = time.perf_counter() - start
    if rows != count:
        raise StreamBenchError(f"{read_range.__module__}.read_range gave {rows:,} rows of "
                               f"offsets 0-{count - 1}")
    return seconds


def count_chunks(stream_uri: str, stream: str, count: int, timeout: float = 60.0) -> int:
    """How many chunks hold offsets ``[0, count)`` of ``stream`` (the publisher's pace makes
    them: a chunk is what the stream's writer had at once).

    Raises:
        StreamBenchError: no chunk came for ``timeout`` seconds.
    """
    from rtroute.amqp.stream_protocol import StreamProtocolConnection

    connection = StreamProtocolConnection(stream_uri, "rtroute-bench-stream-chunks")
    try:
        connection.subscribe(stream, 0, 256)
        chunks = end = 0
        while end < count:
            chunk = connection.next_chunk(timeout)
            if chunk is None:
                raise StreamBenchError(f"stream {stream}: no chunk for {timeout:g} s after "
                                       f"offset {end:,}")
            chunks += 1
            end = chunk.first_offset + chunk.records
            connection.credit(1)
        return chunks
    finally:
        connection.close()


def protocol_uri(uri: str, given: str | None) -> str | None:
    """The stream-protocol URI to measure: ``given``, or with ``None``/``auto`` the one the
    stream source would choose for ``uri`` (port 5552 of its host, if it names the same
    cluster); ``off``: None."""
    from rtroute.spark.stream_source import RabbitMQStreamReader, StreamOptions

    if given == "off":
        return None
    reader = RabbitMQStreamReader(StreamOptions({"uri": uri, "stream": "-",
                                                 "streamUri": given or "auto"}))
    try:
        return reader.reader_uri()
    finally:
        reader.stop()


def _rows_written(out: Path) -> int:
    import pyarrow.dataset as ds

    return ds.dataset(str(out), format="parquet", partitioning="hive").count_rows()


def route_stream(spark: Any, uri: str, stream: str, bindings_path: Path, root: Path,
                 expected: int, starting_offset: str = "first",
                 stream_protocol_uri: str | None = None) -> float:
    """Seconds of one ``rtroute spark stream --available-now`` run (fresh checkpoint and output
    under ``root``) from ``starting_offset``.

    Raises:
        ResultMismatch: the query or its output holds another number of rows than
            ``expected``.
    """
    from rtroute.spark.stream_job import run_stream

    shutil.rmtree(root, ignore_errors=True)
    start = time.perf_counter()
    result = run_stream(spark, uri=uri, streams=[stream], bindings=str(bindings_path),
                        out=str(root / "out"), checkpoint=str(root / "checkpoint"),
                        available_now=True, starting_offset=starting_offset,
                        options={"streamUri": stream_protocol_uri or "off"})
    seconds = time.perf_counter() - start
    written = _rows_written(root / "out")
    if result.messages != expected or written != expected:
        raise ResultMismatch(f"{STREAMING} routed {result.messages:,} messages and wrote "
                             f"{written:,} rows, not {expected:,}: its rate is not reported")
    return seconds


def route_batch(spark: Any, archive: Path, pairs: list[tuple[str, str]], sink: Path,
                limit: int | None = None) -> float:
    """Seconds of :func:`rtroute.spark.route` over the archive (its first ``limit`` rows),
    written as Parquet."""
    from rtroute.spark import route

    frame = spark.read.parquet(str(archive))
    if limit is not None:
        frame = frame.limit(limit)
    start = time.perf_counter()
    route(frame, pairs).write.mode("overwrite").parquet(str(sink))
    return time.perf_counter() - start


def run(uri: str, messages: int = 100_000, bindings: int = 10_000, master: str = "local[2]",
        repeats: int = 3, echo: Callable[[str], None] = print,
        workdir: str | None = None, stream_protocol_uri: str | None = None) -> dict[str, Any]:
    """Fills a stream, measures the four readers on it (see the module docstring), deletes it;
    prints progress and a table; returns the measurements.

    Args:
        uri: the broker (RabbitMQ 3.9 or later: streams).
        messages: messages in the stream (and rows in the archive).
        bindings: binding keys (five per destination), as the batch bench.
        master: Spark master; the batch bench's session is reused when it is running.
        repeats: runs of each reader; the best counts.
        workdir: where the archive and outputs go (a temporary directory by default).
        stream_protocol_uri: the broker's stream-protocol URI, ``auto`` (the default: as the
            stream source chooses) or ``off`` (the AMQP 0-9-1 reader only).

    Raises:
        ResultMismatch: the streaming route wrote another number of rows than ``messages``.
        StreamBenchError: the stream could not be filled or read.
        rtroute.spark.stream_consumer.StreamReadError: the broker refused a stream read.
    """
    from rtroute.spark.commands.session import spark_session
    from rtroute.spark.stream_consumer import StreamConnection, tails

    root = Path(workdir or tempfile.mkdtemp(prefix="rtroute-bench-spark-stream-"))
    chunks: int | None = None
    best: dict[str, StreamMeasurement] = {}

    def keep(name: str, seconds: float, attempt: int) -> None:
        echo(f"  {name} (run {attempt + 1}/{repeats}): {messages:,} rows in {seconds:.2f} s "
             f"= {messages / seconds:,.0f} rows/s")
        if name not in best or seconds < best[name].seconds:
            best[name] = StreamMeasurement(name, messages, seconds)

    try:
        pairs = benchmark_bindings(bindings)
        by_destination: dict[str, list[str]] = {}
        for destination, key in pairs:
            by_destination.setdefault(destination, []).append(key)
        bindings_path = root / "bindings.json"
        root.mkdir(parents=True, exist_ok=True)
        bindings_path.write_text(json.dumps(by_destination))
        archive = root / "archive"
        mix = generate_archive(archive, messages, pairs)
        batch = archive_messages(archive)
        spark = spark_session(master, "rtroute bench spark", {"spark.ui.enabled": "false"})
        protocol = protocol_uri(uri, stream_protocol_uri)
        echo(f"stream source reader: {'stream protocol' if protocol else 'AMQP 0-9-1'}")
        with bench_stream(uri) as stream:
            echo(f"publishing {messages:,} messages to stream {stream} (confirmed) ...")
            seconds = publish_messages(uri, stream, batch)
            echo(f"  done in {seconds:.1f} s = {messages / seconds:,.0f} msg/s")
            del batch
            probe = StreamConnection(uri, "rtroute-bench-stream-tail")
            try:
                tail = tails(probe, [stream], 0.25).get(stream, 0)
            finally:
                probe.close()
            if tail != messages:
                raise StreamBenchError(f"stream {stream} ends at offset {tail:,}, not "
                                       f"{messages:,}")
            if protocol:
                chunks = count_chunks(protocol, stream, messages)
                echo(f"  the stream holds {chunks:,} chunks, {messages / chunks:,.1f} messages "
                     "each (a stream reader's cost at the broker is per chunk)")
            echo("warm-up (JVM, Python workers, the stream source) ...")
            route_batch(spark, archive, pairs, root / "batch", limit=WARM_UP_ROWS)
            warm = min(WARM_UP_ROWS, messages)
            route_stream(spark, uri, stream, bindings_path, root / "stream", warm,
                         starting_offset=str(messages - warm), stream_protocol_uri=protocol)
            for attempt in range(repeats):
                keep(PLAIN, read_plain(uri, stream, messages), attempt)
                keep(READER, read_with_rtroute(uri, stream, messages), attempt)
                if protocol:
                    keep(PROTOCOL, read_with_stream_protocol(protocol, stream, messages),
                         attempt)
                keep(STREAMING, route_stream(spark, uri, stream, bindings_path,
                                             root / "stream", messages,
                                             stream_protocol_uri=protocol), attempt)
                keep(BATCH, route_batch(spark, archive, pairs, root / "batch"), attempt)
        spark_version = spark.version
    finally:
        if workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    results = [best[name] for name in (PLAIN, READER, PROTOCOL, STREAMING, BATCH)
               if name in best]
    echo("")
    echo(format_table(results))
    echo(f"({master}, {messages:,} messages, {len(pairs):,} bindings, best of {repeats}; "
         f"{BATCH} reads the archive the stream was filled from)")
    return {"results": results, "mix": mix, "master": master, "messages": messages,
            "bindings": len(pairs), "repeats": repeats, "spark_version": spark_version,
            "stream_protocol_uri": protocol, "chunks": chunks}


def format_table(results: list[StreamMeasurement]) -> str:
    """A markdown table: each reader's rows/s and its ratio to the plain consumer's."""
    plain = next(m for m in results if m.name == PLAIN)
    lines = ["| reader | what it does | rows | seconds | rows/s | vs plain consumer |",
             "|---|---|---:|---:|---:|---:|"]
    for m in results:
        lines.append(f"| {m.name} | {WHAT[m.name]} | {m.rows:,} | {m.seconds:,.2f} | "
                     f"{m.rows_per_s:,.0f} | {m.rows_per_s / plain.rows_per_s:,.2f}x |")
    return "\n".join(lines)


def json_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The report rows of a run: each reader's rows/s and its ratio to the plain consumer's.

    The plain consumer's rate is under ``plain_consumer_value``, not ``baseline_value``: the
    Spark chart draws every row with a ``baseline_value`` as a pipeline against the native
    core, which these rows are not."""
    results: list[StreamMeasurement] = result["results"]
    plain = next(m for m in results if m.name == PLAIN)
    return [{"name": m.name, "value": m.rows_per_s, "unit": "rows/s",
             "compared_with": PLAIN, "plain_consumer_value": plain.rows_per_s,
             "ratio": m.rows_per_s / plain.rows_per_s, "ratio_means": "rows/s / plain consumer's",
             "rows_measured": m.rows, "seconds": m.seconds, "what": WHAT[m.name],
             "role": "stream"} for m in results]
