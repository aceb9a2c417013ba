"""``spark.readStream.format("rtroute-rabbitmq-stream")``: RabbitMQ streams as a Spark source.

::

    from rtroute.spark import register_stream_source
    register_stream_source(spark)
    messages = (spark.readStream.format("rtroute-rabbitmq-stream")
                .option("uri", "amqp://guest:guest@127.0.0.1:5672/%2F")
                .option("stream", "orders")             # or "orders-0,orders-1,orders-2"
                .option("startingOffset", "first")      # last, next (default), 1200, a time
                .option("maxRecordsPerTrigger", 10000)
                .load())

Options (names are case-insensitive):

- ``uri`` (required): ``amqp://`` or ``amqps://`` (TLS keys in its query, as everywhere in
  rtroute).
- ``stream``: one stream or a comma-separated list (the partitions of a super stream, say);
  ``streams`` is the same option.
- ``startingOffset``: ``first``, ``last`` (the start of the last chunk), ``next`` (only what
  is written from now on; the default), an offset, or an ISO 8601 time; or a JSON object giving
  each stream its own. Used only by a new query: a restarted one goes on from its checkpoint.
- ``maxRecordsPerTrigger``: at most this many offsets per micro-batch, shared between the
  streams in proportion to what each has waiting. ``Trigger.AvailableNow`` honours it too
  (several batches, then the query stops).
- ``streamUri``: how the executors read: ``auto`` (the default, or the environment variable
  ``RTROUTE_STREAM_URI`` of the driver when it is set) reads over RabbitMQ's stream
  protocol (the ``rabbitmq_stream`` plugin) at the ``uri``'s host, credentials, virtual host
  and TLS keys on port 5552 (``amqps``: 5551) when that port answers and names the same
  cluster as ``uri``; a ``rabbitmq-stream://`` or ``rabbitmq-stream+tls://`` URI reads there
  (a node of another cluster than ``uri``'s is refused);
  ``off`` reads over AMQP 0-9-1. Where the stream port does not answer (the plugin is off), the
  source reads over AMQP 0-9-1 and says so in the log (logger ``rtroute.spark``).
- ``prefetch`` (default 2000): each reading consumer's ``basic.qos`` (AMQP 0-9-1 reader).
- ``tailWait`` (seconds, default 0.25): how long the tail probe waits: over AMQP 0-9-1 for
  more of the last chunk, over the stream protocol for the first chunk (only an empty stream
  makes it wait that long).
- ``offsetsPerPartition`` (default 50000): a stream's range in one batch is split into
  partitions of this many offsets, read in parallel by the executors.
- ``minPartitions`` (default 1): a batch is split into at least this many partitions (while
  each keeps at least 1,000 offsets), so that a batch smaller than ``offsetsPerPartition``
  still keeps every core busy; ``rtroute spark stream`` gives Spark's default parallelism.
- ``readTimeout`` (seconds, default 60): a partition fails (and Spark retries it) when no
  message came for this long.
- ``readConnections`` (default
  :data:`~rtroute.spark.stream_protocol_reader.DEFAULT_CONNECTIONS`): over the stream
  protocol, each partition reads its range over this many connections side by side (parts of
  at least 5,000 offsets; see :func:`rtroute.spark.stream_protocol_reader.read_range`).

Columns: those of a drained archive (``routing_key``, ``headers`` as lossless JSON, ``body``,
``exchange``, the basic properties, ``redelivered``, ``drained_at``; see
:mod:`rtroute.spark.archive`) plus ``stream`` and ``offset``, so :func:`rtroute.spark.route`
applies unchanged. See :mod:`rtroute.spark.stream_consumer` for what a stream delivery holds.

**How offsets work.** The source's offset is ``{"stream": next offset}``, kept by Spark in the
query's checkpoint. For each micro-batch the driver probes each stream's tail and takes as the
batch's end the tail, or less under ``maxRecordsPerTrigger``: where the executors read over the
stream protocol, the driver subscribes to each stream from ``last`` with one credit, and the
chunk delivered, the last one, ends at the tail
(:func:`rtroute.spark.stream_protocol_reader.tails`: no idle wait); else it consumes the last
chunk from ``last`` over AMQP 0-9-1 until no delivery came for ``tailWait``
(:func:`rtroute.spark.stream_consumer.tails`). The query's start offsets are found the same
way. Spark logs a batch's end in the checkpoint before the batch runs. The executors then read exactly ``[start, end)`` of each stream, each partition with its
own consumer starting at its first offset and stopping at its last: every offset below the end
was seen to exist, so a replay after a crash reads the same messages. A restarted query thus
neither skips nor repeats a message (with a sink that is itself exactly-once: the file sink, or
``rtroute spark stream``'s per-batch directories).

**Throughput.** The messages are read by the executors, one reader per partition, in
parallel: over the stream protocol (:mod:`rtroute.spark.stream_protocol_reader`: whole chunks,
the common shape of a message read in C by :mod:`rtroute.core.amqp10`, 2-3 us per message in
all) where the stream port answers, else an AMQP 0-9-1 consumer decoding every message without
pika (:func:`rtroute.spark.stream_consumer.read_range`); see docs/spark.md for the figures.
Partitions scale until the broker is the limit. The driver costs each trigger one tail probe
(over the stream protocol a subscription per stream and one chunk; over AMQP 0-9-1 at least
``tailWait`` seconds) plus Spark's own micro-batch overhead (about a second on two busy cores),
so small micro-batches are dominated by that fixed cost: give them thousands of messages or
more. Rejected: a ``SimpleDataSourceStreamReader``, which reads every message on
the driver (one Python process for all streams, at most one consumer's rate) and needs an idle
wait to end each batch; and the management API's ``messages``, which is a count refreshed every
few seconds, not an offset.

It needs pyspark 4.2 or later (read limits and ``Trigger.AvailableNow`` for Python sources);
importing this module with an older one raises ImportError saying so. The reader pickles to
the executors by reference: they import rtroute (as routing needs anyway; ``rtroute spark
pack`` ships it).
"""
from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyspark
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # before 4.2, Python sources had neither read limits nor AvailableNow
    raise ImportError(f"the rtroute-rabbitmq-stream source needs pyspark 4.2 or later, not "
                      f"{pyspark.__version__}: pip install 'pyspark>=4.2'") from None

from rtroute.spark import stream_protocol_reader
from rtroute.spark.stream_consumer import (
    ARROW_SCHEMA,
    DEFAULT_PREFETCH,
    StreamConnection,
    StreamReadError,
    parse_starts,
    read_range,
    resolve_starts,
    tails,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from rtroute.spark.batches import RoutePlan
    from rtroute.spark.job import BindingsArg, RouteStats

__all__ = ["NAME", "RabbitMQStreamDataSource", "RabbitMQStreamReader", "StreamOptions",
           "StreamPartition", "partition_ranges", "register_routed_stream_source",
           "register_stream_source", "share_limit", "spark_schema"]

NAME = "rtroute-rabbitmq-stream"
MIN_PARTITION_OFFSETS = 1_000  # minPartitions splits no partition below this
# the routed source's rows as Arrow: what spark's check of a Python source's batches wants for
# routed_schema(spark_schema()) (mapInArrow takes the router's batches as they are; this
# check does not: its lists and maps hold no nulls)
ROUTED_ARROW_SCHEMA = pa.schema(list(ARROW_SCHEMA) + [
    pa.field("destinations", pa.list_(pa.field("item", pa.string(), nullable=False))),
    pa.field("delivered_headers",
             pa.map_(pa.string(), pa.field("value", pa.string(), nullable=False))),
    pa.field("error", pa.string())])
_log = logging.getLogger("rtroute.spark")


def spark_schema() -> StructType:
    """The source's columns as a Spark schema (:data:`ARROW_SCHEMA` in Spark's types)."""
    from pyspark.sql import types as T

    def spark_type(kind: pa.DataType) -> T.DataType:
        if pa.types.is_timestamp(kind):
            return T.TimestampType()
        return {pa.string(): T.StringType(), pa.binary(): T.BinaryType(),
                pa.bool_(): T.BooleanType(), pa.int32(): T.IntegerType(),
                pa.int64(): T.LongType()}[kind]

    return T.StructType([T.StructField(f.name, spark_type(f.type)) for f in ARROW_SCHEMA])


_KNOWN = {name.lower(): name for name in (
    "uri", "stream", "streams", "startingOffset", "maxRecordsPerTrigger", "prefetch", "tailWait",
    "offsetsPerPartition", "minPartitions", "readTimeout", "streamUri", "readConnections")}


class StreamOptions:
    """The source's options, checked (see the module docstring).

    Raises:
        ValueError: a missing ``uri`` or ``stream``, an unknown option, or a malformed value.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        from rtroute.amqp import parse_uri

        options = {k.lower(): v for k, v in options.items()}
        unknown = sorted(set(options) - set(_KNOWN))
        if unknown:
            close = difflib.get_close_matches(unknown[0], _KNOWN.keys(), 1)
            hint = f" (did you mean {_KNOWN[close[0]]}?)" if close else ""
            raise ValueError(f"{NAME}: unknown option {unknown[0]!r}{hint}; the options are "
                             + ", ".join(sorted(set(_KNOWN.values()))))
        self.uri = options.get("uri") or ""
        if not self.uri:
            raise ValueError(f"{NAME}: the 'uri' option is required (amqp://... or amqps://...)")
        parse_uri(self.uri)
        text = options.get("stream") or options.get("streams") or ""
        self.streams = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
        if not self.streams:
            raise ValueError(f"{NAME}: the 'stream' option is required (one stream or a "
                             "comma-separated list)")
        self.starts = parse_starts(options.get("startingoffset"), self.streams)
        self.max_records = _number(options, "maxrecordspertrigger", None, int, 1)
        self.prefetch = _number(options, "prefetch", DEFAULT_PREFETCH, int, 1, 65535)
        self.tail_wait = _number(options, "tailwait", 0.25, float, 0.01)
        self.partition_offsets = _number(options, "offsetsperpartition", 50_000, int, 1)
        self.min_partitions = _number(options, "minpartitions", 1, int, 1)
        self.read_timeout = _number(options, "readtimeout", 60.0, float, 0.1)
        self.read_connections = _number(options, "readconnections",
                                        stream_protocol_reader.DEFAULT_CONNECTIONS, int, 1, 64)
        self.stream_uri = (options.get("streamuri") or os.environ.get("RTROUTE_STREAM_URI")
                           or "auto").strip()
        if self.stream_uri.lower() in ("auto", "off"):
            self.stream_uri = self.stream_uri.lower()
        else:
            from rtroute.amqp.stream_protocol import parse_stream_uri

            try:
                parse_stream_uri(self.stream_uri)
            except ValueError as exc:
                raise ValueError(f"{NAME}: option streamUri must be auto, off or a "
                                 f"rabbitmq-stream:// URI: {exc}") from None


def _number(options: Mapping[str, str], name: str, default: Any, kind: type,
            low: float, high: float | None = None) -> Any:
    text = options.get(name)
    if text is None or str(text).strip() == "":
        return default
    try:
        value = kind(str(text).strip())
    except ValueError:
        raise ValueError(f"{NAME}: option {name} must be a number, not {text!r}") from None
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise ValueError(f"{NAME}: option {name} must be {bound}, not {text!r}")
    return value


class StreamPartition(InputPartition):
    """Offsets ``[low, high)`` of one stream: one executor task, one consumer; over the stream
    protocol at ``stream_uri``, or over AMQP 0-9-1 when it is None."""

    def __init__(self, stream: str, low: int, high: int, stream_uri: str | None = None) -> None:
        super().__init__((stream, low, high))
        self.stream, self.low, self.high = stream, low, high
        self.stream_uri = stream_uri


def share_limit(backlog: Mapping[str, int], limit: int) -> dict[str, int]:
    """How many offsets each stream may take when ``limit`` is less than the whole backlog:
    shares proportional to each backlog, the remainder to the largest backlogs first, never
    more than a stream has, in all exactly ``min(limit, total)``."""
    total = sum(backlog.values())
    if total <= limit:
        return dict(backlog)
    shares = {s: n * limit // total for s, n in backlog.items()}
    left = limit - sum(shares.values())
    for stream in sorted(backlog, key=lambda s: (shares[s] - backlog[s], s)):
        if left <= 0:
            break
        if shares[stream] < backlog[stream]:
            shares[stream] += 1
            left -= 1
    return shares


def partition_ranges(start: Mapping[str, int], end: Mapping[str, int], size: int,
                     minimum: int = 1) -> list[tuple[str, int, int]]:
    """``(stream, low, high)`` ranges covering each stream's ``[start, end)``: none over
    ``size`` offsets, and at least ``minimum`` in all while each keeps at least
    :data:`MIN_PARTITION_OFFSETS` (shared between the streams in proportion to their ranges)."""
    total = sum(max(0, end[s] - start[s]) for s in start)
    ranges = []
    for stream in start:
        count = end[stream] - start[stream]
        if count <= 0:
            continue
        wanted = min(-(-minimum * count // total), count // MIN_PARTITION_OFFSETS)
        step = -(-count // wanted) if wanted > -(-count // size) else size
        ranges += [(stream, low, min(low + step, end[stream]))
                   for low in range(start[stream], end[stream], step)]
    return ranges


class RabbitMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The source's micro-batch reader (see the module docstring).

    Its offsets, initial and latest, are found on the driver; :meth:`read` runs on the
    executors. The driver's connection is opened on first use and never pickled.
    """

    def __init__(self, options: StreamOptions, plan: RoutePlan | None = None) -> None:
        self.options = options
        self.plan = plan  # route each batch read with it (register_routed_stream_source)
        self._connection: StreamConnection | None = None
        self._stream: Any = None  # the driver's stream-protocol connection, when reading so
        self._target: dict[str, int] | None = None
        self._latest: dict[str, int] | None = None
        self._reader_uri: str | None | bool = False  # False: not chosen yet

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "plan": self.plan, "_connection": None,
                "_stream": None, "_target": None, "_latest": None, "_reader_uri": False}

    def reader_uri(self) -> str | None:
        """The stream URI the executors read at, or None for AMQP 0-9-1; chosen on the driver
        once (see the ``streamUri`` option) and logged."""
        if self._reader_uri is not False:
            return self._reader_uri  # type: ignore[return-value]
        from rtroute.amqp import mask_uri
        from rtroute.amqp.stream_protocol import stream_uri_for

        wanted = self.options.stream_uri
        chosen: str | None = None
        if wanted == "off":
            _log.info("%s: reading over AMQP 0-9-1 (streamUri=off)", NAME)
        else:
            candidate = stream_uri_for(self.options.uri) if wanted == "auto" else wanted
            peer = stream_protocol_reader.answers(candidate)
            amqp_name = self._driver_call(lambda c: c.cluster_name)
            if peer is None:
                _log.warning("%s: the stream protocol does not answer at %s (is the "
                             "rabbitmq_stream plugin enabled?): reading over AMQP 0-9-1", NAME,
                             mask_uri(candidate))
            elif peer.get("cluster_name") != amqp_name:
                # another broker's stream of the same name would be read as this one's
                if wanted != "auto":
                    raise ValueError(
                        f"{NAME}: streamUri {mask_uri(candidate)} is a node of cluster "
                        f"{peer.get('cluster_name')!r}, the uri of cluster {amqp_name!r}: "
                        "give the stream port of the uri's broker")
                _log.warning("%s: the stream port at %s belongs to cluster %r, not %r of the "
                             "uri: reading over AMQP 0-9-1 (set streamUri)", NAME,
                             mask_uri(candidate), peer.get("cluster_name"), amqp_name)
            else:
                chosen = candidate
                _log.info("%s: reading over the stream protocol at %s", NAME,
                          mask_uri(candidate))
        self._reader_uri = chosen
        return chosen

    def _driver_call(self, call: Any) -> Any:
        """``call(connection)`` on the driver's connection, reconnecting once if it was lost
        (it idles between triggers and may have missed its heartbeats)."""
        for attempt in (1, 2):
            if self._connection is None or not self._connection.is_open:
                self._connection = StreamConnection(self.options.uri, "rtroute-stream-source")
            try:
                return call(self._connection)
            except StreamReadError:
                if attempt == 2 or self._connection.is_open:
                    raise
                self._connection = None
        raise AssertionError("unreachable")

    def _offsets_call(self, over_stream_protocol: Any, over_amqp: Any) -> Any:
        """Finds offsets on the driver: ``over_stream_protocol(connection)`` where the
        executors read over the stream protocol (one subscription per stream, the first chunk
        is the answer: no idle wait), else ``over_amqp(connection)`` (consumers by offset,
        until idle for ``tailWait``). A stream the stream protocol says does not exist is
        asked over AMQP 0-9-1, for the broker's own reason."""
        from rtroute.amqp.stream_protocol import StreamProtocolConnection, StreamProtocolError

        uri = self.reader_uri()
        if uri is None:
            return self._driver_call(over_amqp)
        for attempt in (1, 2):
            try:
                if self._stream is None:
                    self._stream = StreamProtocolConnection(uri, "rtroute-stream-source")
                return over_stream_protocol(self._stream)
            except StreamProtocolError as exc:
                if exc.code == 2:  # stream does not exist
                    return self._driver_call(over_amqp)
                self._close_stream()
                if attempt == 2 or exc.code is not None:
                    raise StreamReadError(f"{', '.join(self.options.streams)}: {exc}") from None
        raise AssertionError("unreachable")

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _tails(self) -> dict[str, int]:
        streams, wait = self.options.streams, self.options.tail_wait
        found = self._offsets_call(
            lambda c: stream_protocol_reader.tails(c, streams, wait),
            lambda c: tails(c, streams, wait))
        self._latest = found
        return found

    def initialOffset(self) -> dict[str, int]:
        starts, wait = self.options.starts, self.options.tail_wait
        return self._offsets_call(
            lambda c: stream_protocol_reader.resolve_starts(c, starts, wait),
            lambda c: resolve_starts(c, starts, wait))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_records is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._tails()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict[str, int]:
        start = self._checked(start)
        found = self._target if self._target is not None else self._tails()
        ends = {s: max(offset, found.get(s, offset)) for s, offset in start.items()}
        if isinstance(limit, ReadMaxRows):
            shares = share_limit({s: ends[s] - start[s] for s in start}, limit.max_rows)
            ends = {s: start[s] + shares[s] for s in start}
        return ends

    def reportLatestOffset(self) -> dict[str, int] | None:
        return self._latest

    def _checked(self, offsets: dict) -> dict[str, int]:
        if set(offsets) != set(self.options.streams):
            raise ValueError(
                f"{NAME}: the checkpoint holds offsets of the streams {sorted(offsets)}, the "
                f"query reads {sorted(self.options.streams)}: use a new checkpoint location")
        return {s: int(offsets[s]) for s in self.options.streams}

    def partitions(self, start: dict, end: dict) -> Sequence[StreamPartition]:
        start, end = self._checked(start), self._checked(end)
        reader_uri = self.reader_uri()
        return [StreamPartition(stream, low, high, reader_uri) for stream, low, high in
                partition_ranges(start, end, self.options.partition_offsets,
                                 self.options.min_partitions)]

    def read(self, partition: StreamPartition  # type: ignore[override]
             ) -> Iterator[pa.RecordBatch]:
        """The partition's messages, on an executor (see :func:`read_range`), routed in the
        same Python worker when the source routes (:func:`register_routed_stream_source`)."""
        options = self.options
        if partition.stream_uri is not None:
            batches = stream_protocol_reader.read_range(
                partition.stream_uri, partition.stream, partition.low, partition.high,
                timeout=options.read_timeout, connections=options.read_connections)
        else:
            batches = read_range(options.uri, partition.stream, partition.low, partition.high,
                                 prefetch=options.prefetch, timeout=options.read_timeout)
        if self.plan is None:
            return batches
        # imported here: the driver's source runner, a new Python process for each query,
        # never routes (pyarrow.compute alone takes 0.1-0.2 s to import)
        from rtroute.spark.batches import route_batches

        return (batch.cast(ROUTED_ARROW_SCHEMA) for batch in route_batches(batches, self.plan))

    def commit(self, end: dict) -> None:
        """Nothing to do: a stream keeps its messages whatever its readers did."""

    def stop(self) -> None:
        self._close_stream()
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class RabbitMQStreamDataSource(DataSource):
    """The ``rtroute-rabbitmq-stream`` format (see the module docstring)."""

    plan: RoutePlan | None = None  # set on the classes of register_routed_stream_source

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        if self.plan is None:
            return spark_schema()
        from rtroute.spark.job import routed_schema

        return routed_schema(spark_schema())

    def streamReader(self, schema: StructType) -> RabbitMQStreamReader:
        return RabbitMQStreamReader(StreamOptions(self.options), self.plan)


def register_stream_source(spark: SparkSession) -> None:
    """Makes ``spark.readStream.format("rtroute-rabbitmq-stream")`` available in ``spark``."""
    spark.dataSource.register(RabbitMQStreamDataSource)


def register_routed_stream_source(spark: SparkSession, bindings: BindingsArg,
                                  kind: str = "rtopic", stats: RouteStats | None = None) -> str:
    """Registers in ``spark`` a source that reads as ``rtroute-rabbitmq-stream`` (the same
    options) and routes each batch it reads in the same Python worker, as
    :func:`rtroute.spark.route` would route the source's rows (the same columns added, the same
    values); returns its format name, one of its own for each call.

    ``route(spark.readStream.format(NAME)...load(), bindings)`` does the same work in two Python
    workers per task, with the rows going from Arrow to Spark's rows and back between them;
    this one reads, routes and hands Spark one Arrow batch. The binding pairs travel inside the
    source's class (pickled with it, as a Python source's class is; a source cannot take a
    broadcast), and each worker builds its router once (cached by the pairs' fingerprint).

    Raises:
        ValueError, TypeError: an unknown kind or bad bindings (checked here, on the driver).
    """
    import uuid

    from rtroute.spark.batches import PackedPairs, check_bindings
    from rtroute.spark.job import binding_pairs, route_plan

    pairs = binding_pairs(bindings)
    check_bindings(kind, pairs)  # fail on the driver, not in every task
    name = f"{NAME}-routed-{uuid.uuid4().hex[:12]}"
    # a class made here is pickled by value (cloudpickle), its plan with it
    source = type("RoutedStreamDataSource", (RabbitMQStreamDataSource,), {
        "plan": route_plan(pairs, kind, stats, bindings=PackedPairs(pairs)),
        "name": classmethod(lambda cls: name),
        "__qualname__": "register_routed_stream_source.<locals>.RoutedStreamDataSource"})
    spark.dataSource.register(source)
    return name

