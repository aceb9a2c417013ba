"""The driver side of the Spark job: route a message archive, report on it, diff binding sets.

Library functions take DataFrames (and so an existing SparkSession); they never choose a master.
The binding set is broadcast once per job and the matcher built once per executor Python worker
(see :mod:`rtroute.spark.batches`).
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Union

from rtroute.config.bindings_file import load_bindings, parse_bindings
from rtroute.spark.batches import (
    DELIVERED_HEADERS,
    DESTINATIONS,
    ERROR,
    OUTPUT_COLUMNS,
    RoutePlan,
    SetUnion,
    check_bindings,
    fingerprint,
    route_batches,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# a binding file, a mapping of destination to key(s), an exchange, or (destination, key) pairs
BindingsArg = Union[str, os.PathLike, Mapping[str, Any], Iterable[tuple[str, str]]]

KEY_COLUMN = "routing_key"
HEADERS_COLUMN = "headers"


def binding_pairs(bindings: BindingsArg) -> list[tuple[str, str]]:
    """Normalises ``bindings`` to sorted, distinct ``(destination, binding_key)`` pairs.

    Accepts a binding file path (TOML/JSON, as ``rtroute route --bindings``), a mapping of
    destination to key(s) (the file's shape), an exchange (anything with ``.bindings()``) or an
    iterable of pairs.

    Raises:
        rtroute.config.bindings_file.BindingsFileError: an unreadable or malformed file or mapping.
        TypeError: pairs that are not two strings.
    """
    if isinstance(bindings, (str, os.PathLike)):
        pairs: Iterable = load_bindings(bindings)
    elif isinstance(bindings, Mapping):
        pairs = parse_bindings(dict(bindings))
    elif hasattr(bindings, "bindings") and callable(bindings.bindings):
        pairs = bindings.bindings()
    else:
        pairs = bindings
    out = set()
    for pair in pairs:
        if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                or not all(isinstance(x, str) for x in pair)):
            raise TypeError(f"a binding must be a (destination, binding_key) pair, not {pair!r}")
        out.add((pair[0], pair[1]))
    return sorted(out)


class RouteStats:
    """Counters filled in by the executors (Spark accumulators), read on the driver.

    Attributes:
        matcher_builds: matchers built (one per executor Python worker and binding set).
        rows: rows routed (a retried task counts twice).
        workers: the ``host:pid`` of every Python worker that routed a partition.
        cores: the core each of them routed with and its module file and interpreter
            (:func:`rtroute.spark.batches.core_in_use`): which rtroute the executors really ran.
    """

    def __init__(self, spark: SparkSession) -> None:
        context = spark.sparkContext
        self.matcher_builds = context.accumulator(0)
        self.rows = context.accumulator(0)
        self.workers = context.accumulator(set(), SetUnion())
        self.cores = context.accumulator(set(), SetUnion())


def route(messages: DataFrame, bindings: BindingsArg, kind: str = "rtopic", *,
          key_column: str = KEY_COLUMN, headers_column: str = HEADERS_COLUMN,
          stats: RouteStats | None = None, noop: bool = False) -> DataFrame:
    """Routes every message of ``messages`` as an exchange of ``kind`` with ``bindings`` would.

    Returns every input column plus:

    - ``destinations`` (array<string>): each destination reached once, sorted; empty when the
      message is unroutable; null on an error row.
    - ``delivered_headers`` (map<string,string>): the headers as delivered, ``BCC`` removed; a
      string value as is, any other value (``CC``'s array, numbers, tables) as compact JSON;
      empty without headers; null on an error row.
    - ``error`` (string): why the row cannot be routed (null routing key, key over 255 bytes,
      headers not a JSON object, ``CC``/``BCC`` not an array: RabbitMQ's 406), else null.

    Args:
        messages: rows with a string (or binary) ``key_column`` and optionally ``headers_column``
            as a JSON object string, a struct or a map (see ``batches.decode_headers``).
        bindings: see :func:`binding_pairs`.
        kind: rtopic, topic, direct or fanout.
        stats: accumulators to count matcher builds and routed rows.
        noop: match nothing, with all the other work unchanged (the benchmark's ceiling).

    Raises:
        ValueError: an unknown kind, a missing key column, output columns already present, or
            a binding key the core refuses.
        TypeError: key or headers columns of an unsupported type; malformed bindings.
    """
    from pyspark.sql import types as T

    pairs = binding_pairs(bindings)
    check_bindings(kind, pairs)  # fail on the driver, not in every task
    schema = messages.schema
    names = schema.fieldNames()
    if key_column not in names:
        raise ValueError(f"messages have no {key_column!r} column (columns: {', '.join(names)})")
    if not isinstance(schema[key_column].dataType, (T.StringType, T.BinaryType)):
        raise TypeError(f"{key_column!r} must be a string column, not "
                        f"{schema[key_column].dataType.simpleString()}")
    if headers_column in names:
        if not isinstance(schema[headers_column].dataType,
                          (T.StringType, T.BinaryType, T.StructType, T.MapType)):
            raise TypeError(f"{headers_column!r} must be a JSON string, a struct or a map, not "
                            f"{schema[headers_column].dataType.simpleString()}")
        headers: str | None = headers_column
    else:
        headers = None
    clash = [c for c in OUTPUT_COLUMNS if c in names]
    if clash:
        raise ValueError(f"messages already have the output column(s) {', '.join(clash)}; "
                         "rename or drop them first")
    context = messages.sparkSession.sparkContext
    plan = route_plan(pairs, kind, stats, bindings=context.broadcast(pairs),
                      key_column=key_column, headers_column=headers, noop=noop)
    return messages.mapInArrow(functools.partial(route_batches, plan=plan),
                               routed_schema(schema))


def route_plan(pairs: list[tuple[str, str]], kind: str, stats: RouteStats | None = None,
               bindings: Any = None, **fields: Any) -> RoutePlan:
    """What a task needs to route ``pairs`` (already checked): ``bindings`` is what carries
    them to the executors (a broadcast; by default the pairs themselves), ``stats`` the
    accumulators, ``fields`` any other :class:`RoutePlan` field."""
    return RoutePlan(kind=kind, fingerprint=fingerprint(kind, pairs),
                     bindings=pairs if bindings is None else bindings,
                     builds=stats.matcher_builds if stats else None,
                     rows=stats.rows if stats else None,
                     workers=stats.workers if stats else None,
                     cores=stats.cores if stats else None, **fields)


def routed_schema(schema: Any) -> Any:
    """``schema`` (a Spark ``StructType``) with the three columns :func:`route` adds."""
    from pyspark.sql import types as T

    return T.StructType(list(schema.fields) + [
        T.StructField(DESTINATIONS, T.ArrayType(T.StringType(), containsNull=False)),
        T.StructField(DELIVERED_HEADERS,
                      T.MapType(T.StringType(), T.StringType(), valueContainsNull=False)),
        T.StructField(ERROR, T.StringType()),
    ])


def destination_counts(routed: DataFrame) -> DataFrame:
    """Messages per destination (``destination``, ``messages``), most first."""
    from pyspark.sql import functions as F

    return (routed.where(F.col(ERROR).isNull())
            .select(F.explode(DESTINATIONS).alias("destination"))
            .groupBy("destination").agg(F.count("*").alias("messages"))
            .orderBy(F.desc("messages"), "destination"))


def unroutable_count(routed: DataFrame) -> int:
    """Messages that reached no destination (error rows not included)."""
    from pyspark.sql import functions as F

    return routed.where(F.col(ERROR).isNull() & (F.size(DESTINATIONS) == 0)).count()


def error_counts(routed: DataFrame) -> DataFrame:
    """Error rows per reason (``error``, ``messages``), most first."""
    from pyspark.sql import functions as F

    return (routed.where(F.col(ERROR).isNotNull()).groupBy(ERROR)
            .agg(F.count("*").alias("messages")).orderBy(F.desc("messages"), ERROR))


@dataclass
class RouteSummary:
    """Totals of a routed archive.

    Attributes:
        messages: rows in.
        routed: rows that reached at least one destination.
        unroutable: rows that reached none.
        errors: rows with an error (neither routed nor unroutable).
        deliveries: copies delivered (the sum of each row's destination count).
        destinations: ``(destination, messages)``, most first.
        error_reasons: ``(reason, messages)``, most first.
    """

    messages: int
    routed: int
    unroutable: int
    errors: int
    deliveries: int
    destinations: list[tuple[str, int]] = field(default_factory=list)
    error_reasons: list[tuple[str, int]] = field(default_factory=list)


def summarize(routed: DataFrame) -> RouteSummary:
    """The totals, per-destination counts and error reasons of a routed DataFrame.

    Runs three small jobs over ``routed``: pass a persisted or written-and-reread DataFrame so
    the routing is not done three times.
    """
    from pyspark.sql import functions as F

    ok = F.col(ERROR).isNull()
    size = F.size(DESTINATIONS)
    totals = routed.agg(
        F.count("*").alias("messages"),
        F.sum(F.when(ok & (size > 0), 1).otherwise(0)).alias("routed"),
        F.sum(F.when(ok & (size == 0), 1).otherwise(0)).alias("unroutable"),
        F.sum(F.when(ok, 0).otherwise(1)).alias("errors"),
        F.sum(F.when(ok, size).otherwise(0)).alias("deliveries"),
    ).first()
    return RouteSummary(
        messages=totals["messages"], routed=totals["routed"] or 0,
        unroutable=totals["unroutable"] or 0, errors=totals["errors"] or 0,
        deliveries=totals["deliveries"] or 0,
        destinations=[(r["destination"], r["messages"])
                      for r in destination_counts(routed).collect()],
        error_reasons=[(r[ERROR], r["messages"]) for r in error_counts(routed).collect()],
    )


BEFORE = "destinations_before"
AFTER = "destinations_after"
ADDED = "destinations_added"
REMOVED = "destinations_removed"


def diff(messages: DataFrame, before: BindingsArg, after: BindingsArg, kind: str = "rtopic",
         *, key_column: str = KEY_COLUMN, headers_column: str = HEADERS_COLUMN,
         stats: RouteStats | None = None) -> DataFrame:
    """Routes ``messages`` under two binding sets: what changes if ``after`` replaces ``before``.

    Returns every input column plus ``destinations_before``, ``destinations_after``,
    ``destinations_added`` (after but not before), ``destinations_removed`` and ``error`` (as in
    :func:`route`; errors do not depend on the bindings).

    Raises:
        as :func:`route`.
    """
    from pyspark.sql import functions as F

    first = (route(messages, before, kind, key_column=key_column,
                   headers_column=headers_column, stats=stats)
             .drop(DELIVERED_HEADERS, ERROR).withColumnRenamed(DESTINATIONS, BEFORE))
    second = (route(first, after, kind, key_column=key_column, headers_column=headers_column,
                    stats=stats)
              .drop(DELIVERED_HEADERS).withColumnRenamed(DESTINATIONS, AFTER))
    return (second
            .withColumn(ADDED, F.array_except(AFTER, BEFORE))
            .withColumn(REMOVED, F.array_except(BEFORE, AFTER))
            .select(*[c for c in second.columns if c != ERROR], ADDED, REMOVED, ERROR))


@dataclass
class DiffSummary:
    """Totals of a diff.

    Attributes:
        messages: rows in.
        changed: rows whose destination set differs.
        unroutable_before / unroutable_after: rows reaching no destination under each set.
        errors: error rows (the same under both sets).
        destinations: ``(destination, before, after, gained, lost)`` for each destination whose
            traffic changes, largest change first; ``gained`` counts messages it receives only
            after, ``lost`` those it receives only before.
    """

    messages: int
    changed: int
    unroutable_before: int
    unroutable_after: int
    errors: int
    destinations: list[tuple[str, int, int, int, int]] = field(default_factory=list)


def summarize_diff(diffed: DataFrame) -> DiffSummary:
    """Totals and per-destination changes of a :func:`diff` result (two small jobs)."""
    from pyspark.sql import functions as F

    ok = F.col(ERROR).isNull()
    changed = (F.size(ADDED) > 0) | (F.size(REMOVED) > 0)
    totals = diffed.agg(
        F.count("*").alias("messages"),
        F.sum(F.when(ok & changed, 1).otherwise(0)).alias("changed"),
        F.sum(F.when(ok & (F.size(BEFORE) == 0), 1).otherwise(0)).alias("unroutable_before"),
        F.sum(F.when(ok & (F.size(AFTER) == 0), 1).otherwise(0)).alias("unroutable_after"),
        F.sum(F.when(ok, 0).otherwise(1)).alias("errors"),
    ).first()

    def tally(column: str, name: str) -> DataFrame:
        return (diffed.where(ok).select(F.explode(column).alias("destination"))
                .groupBy("destination").agg(F.count("*").alias(name)))

    per_destination = (tally(BEFORE, "before")
                       .join(tally(AFTER, "after"), "destination", "full_outer")
                       .join(tally(ADDED, "gained"), "destination", "full_outer")
                       .join(tally(REMOVED, "lost"), "destination", "full_outer")
                       .na.fill(0)
                       .where((F.col("gained") > 0) | (F.col("lost") > 0))
                       .orderBy(F.desc(F.col("gained") + F.col("lost")), "destination"))
    return DiffSummary(
        messages=totals["messages"], changed=totals["changed"] or 0,
        unroutable_before=totals["unroutable_before"] or 0,
        unroutable_after=totals["unroutable_after"] or 0, errors=totals["errors"] or 0,
        destinations=[(r["destination"], r["before"], r["after"], r["gained"], r["lost"])
                      for r in per_destination.collect()],
    )


_JSON_SUFFIXES = (".json", ".jsonl", ".ndjson")


def message_format(path: str | Path) -> str:
    """``parquet`` or ``json`` (JSON lines) from a file's suffix, or from a local directory's
    files (a remote URI is judged by its own name).

    Raises:
        ValueError: the format cannot be told; name it explicitly.
    """
    if "://" in str(path) and not str(path).startswith("file://"):
        candidates = [Path(str(path).split("://", 1)[1])]  # remote: judge by the name only
    else:
        path = Path(str(path).removeprefix("file://"))
        candidates = [path] if not path.is_dir() else sorted(
            p for p in path.rglob("*") if p.is_file() and not p.name.startswith(("_", ".")))
    for candidate in candidates:
        suffixes = "".join(candidate.suffixes[-2:]).lower()
        if ".parquet" in suffixes:
            return "parquet"
        if any(s in suffixes for s in _JSON_SUFFIXES):
            return "json"
    raise ValueError(f"{path}: cannot tell Parquet from JSON lines by the file names; "
                     "give the format explicitly")


def read_messages(spark: SparkSession, path: str | Path, fmt: str | None = None,
                  headers_column: str = HEADERS_COLUMN) -> DataFrame:
    """Reads a message archive: Parquet, or JSON lines (one message object per line).

    In JSON lines the headers column is read as its raw JSON text whatever it holds, so that
    each row keeps its own value types (schema inference would merge a row's string ``CC`` with
    another row's array into one type).

    Raises:
        ValueError: an unknown format or one that cannot be told from the path.
    """
    from pyspark.sql import types as T

    fmt = fmt or message_format(path)
    if fmt == "parquet":
        return spark.read.parquet(str(path))
    if fmt != "json":
        raise ValueError(f"unknown message format {fmt!r}; expected parquet or json")
    inferred = spark.read.json(str(path)).schema
    schema = T.StructType([
        T.StructField(f.name, T.StringType(), True) if f.name == headers_column else f
        for f in inferred.fields
    ])
    return spark.read.schema(schema).json(str(path))


def progress_line(spark: SparkSession, stats: RouteStats | None = None) -> str:
    """The running stages' task counts and the rows routed so far ("" when no stage runs).

    The row count comes from an accumulator, which Spark merges when a task finishes.
    """
    tracker = spark.sparkContext.statusTracker()
    parts = []
    for stage_id in sorted(tracker.getActiveStageIds()):
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            running = f" ({info.numActiveTasks} running)" if info.numActiveTasks else ""
            parts.append(f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks"
                         + running)
    if parts and stats is not None:
        parts.append(f"{stats.rows.value:,} rows routed by finished tasks")
    return "; ".join(parts)


@contextlib.contextmanager
def spark_progress(spark: SparkSession, echo: Callable[[str], None],
                   stats: RouteStats | None = None, interval: float = 2.0) -> Iterator[None]:
    """Reports :func:`progress_line` every ``interval`` seconds while the block runs (only when
    it changed), from a daemon thread."""
    stop = threading.Event()
    start = time.monotonic()

    def report() -> None:
        last = ""
        while not stop.wait(interval):
            try:
                line = progress_line(spark, stats)
            except Exception:  # noqa: BLE001 - the context may be stopping; progress is optional
                return
            if line and line != last:
                echo(f"[{time.monotonic() - start:6.1f} s] {line}")
                last = line

    thread = threading.Thread(target=report, name="rtroute-spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
