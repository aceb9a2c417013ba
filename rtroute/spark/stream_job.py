"""``rtroute spark stream``: route a RabbitMQ stream micro-batch by micro-batch into files.

The stream is read with the ``rtroute-rabbitmq-stream`` source (:mod:`rtroute.spark.stream_source`)
and routed as :func:`rtroute.spark.route` routes (the same columns as ``spark route`` writes)
in the same Python worker that reads it (:func:`~rtroute.spark.stream_source.
register_routed_stream_source`: one Arrow batch per read batch handed to Spark, no second Python
worker), each batch split into at least Spark's default parallelism of partitions
(``minPartitions``), and written by one of two sinks:

- **Spark's own** (the default): ``writeStream.format(FORMAT)`` into ``OUT``, any format Spark
  has on its classpath (parquet, json, csv, orc, or delta when its package is added). File
  formats go through Spark's file sink, exactly once by its metadata log ``OUT/_spark_metadata``:
  a batch is listed there once complete, a batch Spark runs again after a crash whose files
  are listed already is skipped, and Spark's readers of ``OUT`` read only listed files. CSV
  cannot hold arrays, maps or binary: those columns are written as JSON and base64 text.
- **Batch directories** (``batch_directories``): each micro-batch to its own directory
  ``OUT/batch=N`` (N = Spark's batch id, 8 digits), under a hidden temporary name first,
  renamed into place once complete, from a ``foreachBatch``. A batch that Spark runs again
  after a crash (its offsets were logged in the checkpoint, its commit was not) finds its
  directory already there and is not written twice; one that was cut short left only a hidden
  temporary directory, which readers skip and the next run removes. So any reader of ``OUT``
  (Spark, pyarrow, pandas), not only those that honour Spark's metadata log, sees each message
  of the stream exactly once. Spark reads ``batch`` as a partition column.

``OUT/_rtroute_stream`` names the query (its id in the checkpoint, and the checkpoint) whose
output ``OUT`` holds, so that a new checkpoint, whose batch ids start again at 0, is refused
instead of silently finding "its" batches already written (both sinks would skip them).
"""
from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from rtroute.spark.job import BindingsArg, RouteStats

__all__ = ["MARKER", "OutputError", "StreamRunStats", "batch_directory", "check_format",
           "run_stream", "source_options"]

MARKER = "_rtroute_stream"
_BATCH_PREFIX = "batch="
SPARK_METADATA = "_spark_metadata"  # the file sink's log of the batches it committed
DEFAULT_FORMAT = "parquet"


class OutputError(RuntimeError):
    """``OUT`` holds the output of another query, or a batch could not be put in place."""


@dataclass
class StreamRunStats:
    """What one run of :func:`run_stream` did.

    Attributes:
        batches: micro-batches written.
        replayed: micro-batches found already written (run again after a crash).
        messages: messages in the batches written.
        seconds: wall time of the query.
    """

    batches: int = 0
    replayed: int = 0
    messages: int = 0
    seconds: float = 0.0


def batch_directory(batch_id: int) -> str:
    """The name of a micro-batch's directory under ``OUT``."""
    return f"{_BATCH_PREFIX}{batch_id:08d}"


class _Files:
    """Paths on any Hadoop file system (local, hdfs://, s3a://), through the session's JVM."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        jvm = spark._jvm
        self._path = jvm.org.apache.hadoop.fs.Path
        self.root = os.path.abspath(root) if "://" not in root else root
        self._fs = self._path(self.root).getFileSystem(spark._jsc.hadoopConfiguration())
        self._jvm = jvm

    def child(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(self._path(path)))

    def names(self, path: str | None = None) -> list[str]:
        """The names in ``path`` (default: the root); none when it does not exist."""
        path = path or self.root
        if not self.exists(path):
            return []
        return [status.getPath().getName() for status in self._fs.listStatus(self._path(path))]

    def delete(self, path: str) -> None:
        self._fs.delete(self._path(path), True)

    def rename(self, source: str, target: str) -> bool:
        return bool(self._fs.rename(self._path(source), self._path(target)))

    def read_text(self, path: str) -> str | None:
        if not self.exists(path):
            return None
        stream = self._fs.open(self._path(path))
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write_text(self, path: str, text: str) -> None:
        stream = self._fs.create(self._path(path), True)
        try:
            stream.write(bytearray(text.encode()))
        finally:
            stream.close()


def _query_id(files: _Files, checkpoint: str) -> str | None:
    """The id of the query whose checkpoint is ``checkpoint`` (None before its first start)."""
    text = files.read_text(f"{checkpoint.rstrip('/')}/metadata")
    if not text:
        return None
    return json.loads(text.splitlines()[0]).get("id")


def _check_output(out: _Files, checkpoint_files: _Files, batch_directories: bool = True
                  ) -> None:
    """Refuses an ``OUT`` that holds another query's output, or the other sink's; removes the
    temporary directories of batches cut short.

    Raises:
        OutputError: it does.
    """
    names = out.names()
    query = _query_id(checkpoint_files, checkpoint_files.root)
    owner = out.read_text(out.child(MARKER))
    owner = json.loads(owner)["query"] if owner else None
    if owner is not None and owner != query:
        raise OutputError(
            f"{out.root} holds the batches of query {owner}, but the checkpoint "
            f"{checkpoint_files.root} is {'of query ' + query if query else 'new'}: give a new "
            "--out, or the --checkpoint that wrote it")
    directories = any(n.startswith(_BATCH_PREFIX) for n in names)
    if owner is None and directories:
        raise OutputError(f"{out.root} holds batch directories of an unknown query: give a new "
                          "--out")
    if owner is None and _sink_batches(out):
        raise OutputError(f"{out.root} holds the output of an unknown query (Spark's file sink "
                          f"log {SPARK_METADATA} lists batches): give a new --out")
    if batch_directories and SPARK_METADATA in names:
        raise OutputError(f"{out.root} holds the output of Spark's file sink ({SPARK_METADATA}), "
                          "not batch directories: leave out --batch-directories, or give a new "
                          "--out")
    if not batch_directories and directories:
        raise OutputError(f"{out.root} holds batch directories (written with "
                          "--batch-directories): add it, or give a new --out")
    for name in names:
        if name.startswith(f".{_BATCH_PREFIX}") and name.endswith(".partial"):
            out.delete(out.child(name))


def _sink_batches(out: _Files) -> list[int]:
    """The batch ids that Spark's file sink logged in ``OUT/_spark_metadata`` (its files are
    named by batch id, ``N`` or ``N.compact``)."""
    return [int(name.split(".")[0]) for name in out.names(out.child(SPARK_METADATA))
            if name[:1].isdigit()]


def check_format(spark: SparkSession, name: str) -> str:
    """``name`` if Spark has a data source of that name on its classpath that can take the
    routed rows, checked on the driver before any query starts.

    Raises:
        OutputError: it has none (the reason Spark gave), or ``text`` (one string column).
    """
    from py4j.protocol import Py4JJavaError

    fmt = name.strip().lower()
    if fmt == "text":
        raise OutputError("--format text writes one string column, and routed rows have many: "
                          "use json or csv")
    jvm = spark._jvm
    try:
        jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            fmt, spark._jsparkSession.sessionState().conf())
    except Py4JJavaError as exc:
        reason = str(exc.java_exception.getMessage() or exc.java_exception.toString())
        raise OutputError(f"unknown output format {name!r}: {reason.splitlines()[0]} (built "
                          "in: parquet, json, csv, orc; others need their package, e.g. "
                          "--conf spark.jars.packages=...)") from None
    except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException: a module not deployed
        raise OutputError(f"unknown output format {name!r}: {str(exc).splitlines()[0]}"
                          ) from None
    return fmt


def _for_format(frame: DataFrame, fmt: str) -> DataFrame:
    """``frame`` as ``fmt`` can hold it: CSV takes no arrays, maps, structs or binary, so those
    columns become JSON and base64 text; any other format takes the rows as they are."""
    if fmt != "csv":
        return frame
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    columns = []
    for field in frame.schema.fields:
        column = F.col(f"`{field.name}`")
        if isinstance(field.dataType, (T.ArrayType, T.MapType, T.StructType)):
            column = F.to_json(column)
        elif isinstance(field.dataType, T.BinaryType):
            column = F.base64(column)
        columns.append(column.alias(field.name))
    return frame.select(*columns)


def _offsets(value: Any) -> dict[str, int]:
    """A source offset of a progress report (JSON text or already decoded)."""
    if isinstance(value, str):
        value = json.loads(value)
    return {str(k): int(v) for k, v in (value or {}).items()}


def _progress_line(progress: dict[str, Any], target: str, already: bool) -> str:
    """One micro-batch: its messages, each stream's offsets, time and rate, and where it is."""
    source = progress["sources"][0] if progress.get("sources") else {}
    start, end = _offsets(source.get("startOffset")), _offsets(source.get("endOffset"))
    ranges = ", ".join(f"{s} {start.get(s, 0)}-{offset - 1}" for s, offset in end.items()
                       if offset > start.get(s, 0))
    seconds = progress.get("durationMs", {}).get("triggerExecution", 0) / 1000
    if already:
        return f"batch {progress['batchId']}: offsets {ranges} already written to {target} " \
               "before a restart; not again"
    rows = progress.get("numInputRows", 0)
    rate = f", {rows / seconds:,.0f} msg/s" if seconds else ""
    return f"batch {progress['batchId']}: {rows:,} messages ({ranges}); {seconds:.1f} s" \
           f"{rate}; wrote {target}"


def source_options(uri: str, streams: list[str], starting_offset: str = "first",
                   max_records: int | None = None,
                   options: dict[str, str] | None = None) -> dict[str, str]:
    """The options of the ``rtroute-rabbitmq-stream`` source for :func:`run_stream`, checked.

    Raises:
        ValueError: an unknown option or a malformed value.
    """
    from rtroute.spark.stream_source import StreamOptions

    source = {"uri": uri, "stream": ",".join(streams), "startingOffset": starting_offset,
              **({"maxRecordsPerTrigger": str(max_records)} if max_records else {}),
              **(options or {})}
    StreamOptions(source)  # bad options fail here, not in the query's thread
    return source


def run_stream(spark: SparkSession, *, uri: str, streams: list[str], bindings: BindingsArg,
               out: str, checkpoint: str, kind: str = "rtopic", available_now: bool = False,
               trigger_interval: float | None = None, starting_offset: str = "first",
               max_records: int | None = None, options: dict[str, str] | None = None,
               stats: RouteStats | None = None, echo: Callable[[str], None] | None = None,
               should_stop: Callable[[], bool] | None = None,
               output_format: str = DEFAULT_FORMAT,
               batch_directories: bool = False) -> StreamRunStats:
    """Routes ``streams`` into ``out`` until stopped (``available_now``: until what the
    streams held at the start is written).

    Args:
        spark: the session.
        uri: the broker's AMQP URI.
        streams: the streams to read.
        bindings: see :func:`rtroute.spark.binding_pairs`.
        out: the output directory (``batch=N`` directories, see the module docstring).
        checkpoint: Spark's checkpoint location for the query.
        kind: rtopic, topic, direct or fanout.
        available_now: ``Trigger.AvailableNow``: process what is there, then stop.
        trigger_interval: seconds between micro-batches (None: each starts when the previous
            ended).
        starting_offset: where a new query starts (see :func:`~rtroute.spark.stream_consumer.
            parse_start`); ignored when the checkpoint exists.
        max_records: offsets per micro-batch at most.
        options: more options of the source (``prefetch``, ``tailWait``, ...).
        stats: accumulators of the routing.
        echo: progress lines, one per micro-batch.
        should_stop: polled twice a second; a true value stops the query at once (a batch
            cut short is done again, from the same offsets, by the next run).
        output_format: a data source of Spark's (see :func:`check_format`).
        batch_directories: one directory per micro-batch, from a ``foreachBatch`` (see the
            module docstring); else Spark's own sink.

    Raises:
        OutputError: ``out`` holds another query's output or the other sink's, a rename
            failed, or Spark has no such ``output_format``.
        ValueError, TypeError: bad options or bindings.
        pyspark.errors.StreamingQueryException: the query failed.
    """
    from rtroute.spark.stream_source import register_routed_stream_source

    echo = echo or (lambda _line: None)
    fmt = check_format(spark, output_format)
    files = _Files(spark, out)
    checkpoint_files = _Files(spark, checkpoint)
    _check_output(files, checkpoint_files, batch_directories)
    # batches Spark's file sink committed already: run again after a crash, it skips them
    committed = max(_sink_batches(files), default=-1)
    source = source_options(uri, streams, starting_offset, max_records, options)
    if not any(key.lower() == "minpartitions" for key in source):
        # a batch below offsetsPerPartition is still read and routed by every core
        source["minPartitions"] = str(spark.sparkContext.defaultParallelism)
    # read and routed in one Python worker per task (see register_routed_stream_source)
    routed = spark.readStream.format(register_routed_stream_source(
        spark, bindings, kind, stats)).options(**source).load()
    result = StreamRunStats()
    written: dict[int, tuple[str, bool]] = {}  # batch id -> (its directory, already there)

    def write_batch(frame: DataFrame, batch_id: int) -> None:
        target = files.child(batch_directory(batch_id))
        if files.exists(target):
            written[batch_id] = (target, True)
            return
        if not files.exists(files.child(MARKER)):
            files.write_text(files.child(MARKER), json.dumps(
                {"query": _query_id(checkpoint_files, checkpoint_files.root),
                 "checkpoint": checkpoint_files.root}) + "\n")
        partial = files.child(f".{batch_directory(batch_id)}.{uuid.uuid4().hex[:12]}.partial")
        try:
            _for_format(frame, fmt).write.format(fmt).options(
                **({"header": "true"} if fmt == "csv" else {})).save(partial)
            if not files.rename(partial, target):
                raise OutputError(f"could not rename {partial} to {target}")
        finally:
            if files.exists(partial):
                files.delete(partial)
        written[batch_id] = (target, False)

    reported = -1

    def report() -> None:
        """Prints the batches whose progress Spark reported since the last call."""
        nonlocal reported
        for progress in query.recentProgress:
            batch_id = progress["batchId"]
            if batch_id <= reported:
                continue
            if not batch_directories:  # Spark's sink: every batch with rows wrote to OUT
                already = batch_id <= committed  # skipped by the sink, its rows not read
                if not already and not progress.get("numInputRows"):
                    continue
                written[batch_id] = (f"{files.root} ({fmt})", already)
            if batch_id not in written:
                continue
            reported = batch_id
            target, already = written[batch_id]
            if already:
                result.replayed += 1
            else:
                result.batches += 1
                result.messages += progress.get("numInputRows", 0)
            echo(_progress_line(progress, target, already))

    if batch_directories:
        writer = routed.writeStream.foreachBatch(write_batch)
    else:
        writer = _for_format(routed, fmt).writeStream.format(fmt).option("path", files.root)
        if fmt == "csv":
            writer = writer.option("header", "true")  # each file names its columns
    writer = writer.option("checkpointLocation", checkpoint_files.root)
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger_interval is not None:
        writer = writer.trigger(processingTime=f"{trigger_interval} seconds")
    started = time.monotonic()
    query = writer.start()
    if not batch_directories and not files.exists(files.child(MARKER)):
        # OUT is this query's (its first batch takes longer than this to commit)
        files.write_text(files.child(MARKER), json.dumps(
            {"query": str(query.id), "checkpoint": checkpoint_files.root}) + "\n")
    try:
        polled = time.monotonic()
        # the end is seen within 50 ms (an --available-now run is over that much sooner);
        # progress and should_stop are looked at twice a second
        while not query.awaitTermination(0.05):
            if time.monotonic() - polled < 0.5:
                continue
            polled = time.monotonic()
            report()
            if should_stop is not None and should_stop():
                break
    finally:
        if query.isActive:
            query.stop()
        result.seconds = time.monotonic() - started
    report()
    return result
