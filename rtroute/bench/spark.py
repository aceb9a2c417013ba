"""`rtroute bench spark`: the Spark job with the native core against fair Python baselines.

Every pipeline reads the same generated archive (Parquet) in the same Spark session and writes
Parquet; each runs after a warm-up job, best of ``repeats``:

1. ``arrow + native core``: :func:`rtroute.spark.route` (``mapInArrow``, one core call per
   batch, each distinct query once).
2. The fair baselines: what a user would write with a good pure-Python matcher,
   :class:`rtroute.bench.pytrie.DictTrie` (a dict-of-dicts trie with a reversed twin for
   suffix queries; marisa-trie is no better here: it has no wildcard search, and prefix search
   plus a filter is 700x slower than the dict trie on ``a.*.c.d`` and 500x on ``#.c.d``, see
   `rtroute bench match`), built once per executor Python worker, in three shapes:

   - ``mapInArrow + dict trie``: rtroute's own batch pipeline with the dict trie as the matcher
     (everything but the matching is the same work: this isolates the matcher);
   - ``pandas UDF + dict trie``: a vectorised UDF over (routing_key, headers), one Python loop
     per Arrow batch, each distinct query matched once per batch;
   - ``row UDF + dict trie``: a row-at-a-time Python UDF (pickled rows), one match per query.

3. ``arrow + no-op matcher``: pipeline 1 with a matcher that finds nothing: everything else is
   the same, so this is Spark's own ceiling on this machine.

Every baseline's output is checked against the native one (same rows, destinations, delivered
headers and errors); a difference raises :class:`ResultMismatch`, it is not a figure.

Footnotes, on samples of ``reference_sample`` and ``native_row_sample`` rows (rates
extrapolated): a row UDF over ``reference.py``, the deliberately simple pure twin that scans
every binding (the test oracle, not what a user would write), and a row UDF over the native
core (what Arrow batching alone is worth).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rtroute.bench.match import generate_bindings

KEYS_PER_DESTINATION = 5
BODY_BYTES = 100
# The archive's mix of routing keys and headers.
KEY_MIX = {"exact": 0.65, "a.*.c.d": 0.10, "a.b.#": 0.05, "#.c.d": 0.05, "unroutable": 0.15}
HEADER_MIX = {"none": 0.88, "CC": 0.08, "BCC": 0.02, "CC+BCC+other": 0.02}


@dataclass
class Measurement:
    """One pipeline's figures: wall time, and the CPU time of the JVM and its Python workers
    (None off Linux), which a busy shared machine disturbs less than wall time."""

    name: str
    rows: int  # rows actually routed
    seconds: float
    cpu_seconds: float | None = None
    extrapolated: bool = False
    shape: str = ""  # mapInArrow, pandas UDF, row UDF
    matcher: str = ""  # native core, dict trie, reference.py, no-op

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds

    @property
    def cpu_us_per_row(self) -> float | None:
        return None if self.cpu_seconds is None else self.cpu_seconds / self.rows * 1e6


def tree_cpu_seconds(root: int) -> float | None:
    """CPU seconds (user + system, reaped children included) of process ``root`` and all its
    descendants, from /proc; None where there is no /proc."""
    if not os.path.isdir(f"/proc/{root}"):
        return None
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # exited meanwhile
        fields = stat[stat.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        ticks[int(entry)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += ticks.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total / os.sysconf("SC_CLK_TCK")


def benchmark_bindings(count: int, seed: int = 1) -> list[tuple[str, str]]:
    """``count`` bindings: distinct 4-6 word keys, five per destination."""
    keys = generate_bindings(count, seed)
    destinations = max(1, count // KEYS_PER_DESTINATION)
    return [(f"q{i % destinations:05d}", key) for i, key in enumerate(keys)]


def generate_archive(directory: Path, messages: int, bindings: list[tuple[str, str]],
                     files: int = 8, seed: int = 2) -> dict[str, Any]:
    """Writes ``messages`` rows (``id``, ``routing_key``, ``headers`` JSON, ``body``) as
    ``files`` Parquet files; returns the mix used. Keys and headers are drawn from pools built
    from the binding keys, so concrete keys, wildcards, CC/BCC and unroutable keys all occur."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    words = [key.split(".") for _, key in bindings]
    pools = {
        "exact": [".".join(w) for w in words],
        "a.*.c.d": [".".join([w[0], "*", *w[2:]]) for w in words],
        "a.b.#": [f"{w[0]}.{w[1]}.#" for w in words],
        "#.c.d": [f"#.{w[-2]}.{w[-1]}" for w in words],
        # seven words: no binding key has more than six
        "unroutable": [".".join(w + ["x", "y", "z"])[:200] for w in words],
    }
    pick = rng.choice(len(KEY_MIX), size=messages, p=list(KEY_MIX.values()))
    index = rng.integers(0, len(words), size=messages)
    keys = np.empty(messages, dtype=object)
    for n, (shape, pool) in enumerate(pools.items()):
        chosen = pick == n
        keys[chosen] = np.asarray(pool, dtype=object)[index[chosen]]
    header_pools = {
        "none": [None],
        "CC": [json.dumps({"CC": [k]}) for k in pools["exact"]],
        "BCC": [json.dumps({"BCC": [k]}) for k in pools["a.b.#"]],
        "CC+BCC+other": [json.dumps({"CC": [a], "BCC": [b], "x-trace": f"t{i}"})
                         for i, (a, b) in enumerate(zip(pools["#.c.d"], pools["exact"][::-1]))],
    }
    pick = rng.choice(len(HEADER_MIX), size=messages, p=list(HEADER_MIX.values()))
    headers = np.empty(messages, dtype=object)
    for n, pool in enumerate(header_pools.values()):
        chosen = pick == n
        headers[chosen] = np.asarray(pool, dtype=object)[index[chosen] % len(pool)]
    bodies = pa.array([rng.bytes(BODY_BYTES) for _ in range(1000)], pa.binary())
    directory.mkdir(parents=True, exist_ok=True)
    per_file = -(-messages // files)
    for f, start in enumerate(range(0, messages, per_file)):
        stop = min(messages, start + per_file)
        table = pa.table({
            "id": pa.array(np.arange(start, stop, dtype=np.int64)),
            "routing_key": pa.array(keys[start:stop], pa.string()),
            "headers": pa.array(headers[start:stop], pa.string()),
            "body": bodies.take(pa.array(rng.integers(0, len(bodies), stop - start))),
        })
        pq.write_table(table, directory / f"part-{f:03d}.parquet")
    return {"keys": KEY_MIX, "headers": HEADER_MIX}


NATIVE = "arrow + native core"
NOOP = "arrow + no-op matcher"
# The fair baselines: (name, shape); all use the dict trie.
BASELINES = (("mapInArrow + dict trie", "mapInArrow"), ("pandas UDF + dict trie", "pandas UDF"),
             ("row UDF + dict trie", "row UDF"))
# The footnotes, on samples: (name, matcher implementation, sample name).
SAMPLED = (("row UDF + reference matcher", "reference", "reference"),
           ("row UDF + native core", "native", "native-row"))


class ResultMismatch(RuntimeError):
    """A baseline routed the archive differently from the native core: its rate means nothing."""


_WORKER_MATCHERS: dict[tuple[str, str], Any] = {}


def worker_matcher(bindings: Any, fingerprint: str, implementation: str
                   ) -> tuple[Any, dict[str, list[str]]]:
    """The executor worker's matcher for a binding set and the destinations of each binding
    key, built on first use (cached by fingerprint and implementation).

    Args:
        bindings: the pairs, or a Spark broadcast of them.
        implementation: ``native`` (the core), ``dict trie`` or ``reference`` (the twin).
    """
    cache_key = (fingerprint, implementation)
    if cache_key not in _WORKER_MATCHERS:
        if implementation == "reference":
            from rtroute.core.reference import ReverseMatcher as matcher_type
        elif implementation == "native":
            from rtroute.core import ReverseMatcher as matcher_type
        elif implementation == "dict trie":
            from rtroute.bench.pytrie import DictTrie as matcher_type
        else:
            raise ValueError(f"unknown matcher implementation {implementation!r}")
        pairs = bindings.value if hasattr(bindings, "value") else bindings
        matcher = matcher_type()
        by_key: dict[str, set] = {}
        for destination, key in pairs:
            if key not in by_key:
                matcher.add(key)
            by_key.setdefault(key, set()).add(destination)
        _WORKER_MATCHERS[cache_key] = (matcher, {k: sorted(v) for k, v in by_key.items()})
    return _WORKER_MATCHERS[cache_key]


def route_row(match: Callable[[str], list[str]], by_key: dict[str, list[str]],
              routing_key: str | None, headers: str | None,
              memo: dict[str, list[str]] | None = None) -> tuple:
    """One message routed as the Spark job routes it: ``(destinations, delivered_headers,
    error)``, with the same checks. ``memo`` (query -> destinations) lets a batch match each
    distinct query once."""
    from rtroute.core import MAX_BINDING_BYTES
    from rtroute.core.keys import decode_key
    from rtroute.routing import PreconditionFailed, extra_routing_keys
    from rtroute.spark.batches import header_text
    from rtroute.spark.header_json import HeaderJsonError, headers_from_json

    try:
        if routing_key is None:
            raise ValueError("routing key is null")
        decode_key(routing_key, MAX_BINDING_BYTES, "routing key")
        table = headers_from_json(headers) if headers is not None else {}
        if not isinstance(table, dict):
            return None, None, f"headers must be a JSON object, not {type(table).__name__}"
        cc, bcc = extra_routing_keys(table)
    except HeaderJsonError as exc:
        return None, None, str(exc)
    except PreconditionFailed as exc:
        return None, None, f"406 PRECONDITION_FAILED - {exc}"
    except ValueError as exc:
        return None, None, str(exc)
    found: set[str] = set()
    for query in [routing_key, *cc, *bcc]:
        if memo is None:
            for key in match(query):
                found.update(by_key[key])
            continue
        destinations = memo.get(query)
        if destinations is None:
            destinations = memo[query] = sorted(
                {d for key in match(query) for d in by_key[key]})
        found.update(destinations)
    delivered = {k: header_text(v) for k, v in table.items() if k != "BCC"}
    return sorted(found), delivered, None


class RowRouter:
    """The row-at-a-time UDF: one Python call per row, the matcher called once per key.

    Same checks and output as the batch path (``destinations``, ``delivered_headers``,
    ``error``). The matcher is built once per worker process (cached by fingerprint).
    """

    def __init__(self, bindings: Any, fingerprint: str, implementation: str) -> None:
        self.bindings = bindings  # a Spark broadcast of the pairs
        self.fingerprint = fingerprint
        self.implementation = implementation  # "reference", "native" or "dict trie"
        self.__name__ = f"route_row_{implementation.replace(' ', '_')}"

    def __call__(self, routing_key: str | None, headers: str | None) -> tuple:
        matcher, by_key = worker_matcher(self.bindings, self.fingerprint, self.implementation)
        return route_row(matcher.match, by_key, routing_key, headers)


def pandas_router(bindings: Any, fingerprint: str, implementation: str = "dict trie"
                  ) -> Callable:
    """The function of a scalar pandas UDF over (routing_key, headers) returning the struct
    (destinations, delivered_headers, error): one Python loop per Arrow batch, each distinct
    query matched once per batch, the matcher built once per worker."""
    import pandas as pd

    def route_pandas(keys, headers):
        matcher, by_key = worker_matcher(bindings, fingerprint, implementation)
        memo: dict[str, list[str]] = {}
        match = matcher.match
        rows = [route_row(match, by_key, k if isinstance(k, str) else None,
                          h if isinstance(h, str) else None, memo)
                for k, h in zip(keys.tolist(), headers.tolist())]
        return pd.DataFrame(rows, columns=["destinations", "delivered_headers", "error"])

    # pyspark reads the UDF's kind from its type hints
    route_pandas.__annotations__ = {"keys": pd.Series, "headers": pd.Series,
                                    "return": pd.DataFrame}
    return route_pandas


def route_batches_with(batches: Iterator[Any], plan: Any, implementation: str
                       ) -> Iterator[Any]:
    """The ``mapInArrow`` function of the batch baseline: rtroute's own batch pipeline
    (:class:`~rtroute.spark.batches.BatchRouter`) with another matcher (bind ``plan`` and
    ``implementation`` first)."""
    from rtroute.spark.batches import BatchRouter

    cache_key = (plan.fingerprint, f"router {implementation}")
    router = _WORKER_MATCHERS.get(cache_key)
    if router is None:
        matcher, _ = worker_matcher(plan.bindings, plan.fingerprint, implementation)
        pairs = plan.bindings.value if hasattr(plan.bindings, "value") else plan.bindings
        router = BatchRouter(plan.kind, pairs, matcher=matcher)
        _WORKER_MATCHERS[cache_key] = router
    for batch in batches:
        yield router.route_batch(batch, plan.key_column, plan.headers_column)


def _route_digest_column() -> Any:
    from pyspark.sql import functions as F

    return F.xxhash64(F.col("id"), F.to_json(F.col("destinations")), F.col("error"),
                      F.to_json(F.array_sort(F.map_entries(F.col("delivered_headers")))))


def check_same_routes(spark: Any, expected: Path, actual: Path, name: str) -> None:
    """Raises :class:`ResultMismatch` unless the routed Parquet at ``actual`` has the same
    rows (by ``id``), destinations, delivered headers and errors as ``expected``."""
    from pyspark.sql import functions as F

    def digest(path: Path) -> tuple:
        row = spark.read.parquet(str(path)).agg(
            F.count(F.lit(1)).alias("n"), F.bit_xor(_route_digest_column()).alias("x")).first()
        return row["n"], row["x"]

    if digest(expected) == digest(actual):
        return
    left = spark.read.parquet(str(expected)).select("id", _route_digest_column().alias("h"))
    right = spark.read.parquet(str(actual)).select("id", _route_digest_column().alias("h2"))
    differ = left.join(right, "id", "full_outer").where(~F.col("h").eqNullSafe(F.col("h2")))
    count = differ.count()
    ids = [r["id"] for r in differ.select("id").orderBy("id").limit(5).collect()]
    raise ResultMismatch(f"{name} routed {count:,} rows differently from the native core "
                         f"(ids {ids}): its rate is not reported")


def _time_write(frame: Any, sink: Path, jvm_pid: int | None) -> tuple[float, float | None]:
    """Wall seconds and CPU seconds (JVM + Python workers) of writing ``frame`` as Parquet."""
    cpu = tree_cpu_seconds(jvm_pid) if jvm_pid else None
    start = time.perf_counter()
    frame.write.mode("overwrite").parquet(str(sink))
    wall = time.perf_counter() - start
    if cpu is not None:
        after = tree_cpu_seconds(jvm_pid)
        cpu = None if after is None else after - cpu
    return wall, cpu


def run(messages: int = 2_000_000, bindings: int = 10_000, master: str = "local[2]",
        echo: Callable[[str], None] = print, reference_sample: int = 2_000,
        native_row_sample: int = 200_000, repeats: int = 3,
        workdir: str | None = None, baselines: bool = True) -> dict:
    """Runs the benchmark; prints progress and a table; returns the measurements and ratios.

    Args:
        messages: rows in the generated archive (the issue asks for at least 2M).
        bindings: binding keys (five per destination).
        master: Spark master (``local[2]`` on the 2-core reference machine).
        reference_sample: rows routed by the row-at-a-time reference UDF (0 to skip).
        native_row_sample: rows routed by the row-at-a-time native UDF (0 to skip).
        repeats: runs of each full-archive pipeline; the best counts.
        workdir: where the archive and outputs go (a temporary directory by default).
        baselines: run the three dict-trie baselines on the full archive.

    Raises:
        ResultMismatch: a baseline's routes differ from the native core's.
    """
    import functools

    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from rtroute.spark import RouteStats, route
    from rtroute.spark.batches import RoutePlan, fingerprint
    from rtroute.spark.commands.session import spark_session

    root = Path(workdir or tempfile.mkdtemp(prefix="rtroute-bench-spark-"))
    results: dict[str, Measurement] = {}
    try:
        pairs = benchmark_bindings(bindings)
        echo(f"generating {messages:,} messages over {len(pairs):,} bindings in {root} ...")
        t0 = time.perf_counter()
        mix = generate_archive(root / "archive", messages, pairs)
        samples = {}
        for name, size in (("reference", reference_sample), ("native-row", native_row_sample)):
            if size:
                samples[name] = min(size, messages)
                generate_archive(root / f"sample-{name}", samples[name], pairs, files=4)
        echo(f"  done in {time.perf_counter() - t0:.1f} s")

        t0 = time.perf_counter()
        spark = spark_session(master, "rtroute bench spark", {
            "spark.ui.enabled": "false",
            # the row-at-a-time baseline must really be row-at-a-time (pickled rows, no Arrow)
            "spark.sql.execution.pythonUDF.arrow.enabled": "false",
        })
        spark_version = spark.version
        echo(f"spark {spark_version} on {master}: session in {time.perf_counter() - t0:.1f} s")
        archive = spark.read.parquet(str(root / "archive"))
        gateway = getattr(spark.sparkContext, "_gateway", None)
        jvm_pid = getattr(getattr(gateway, "proc", None), "pid", None)

        out_type = T.StructType([
            T.StructField("destinations", T.ArrayType(T.StringType())),
            T.StructField("delivered_headers", T.MapType(T.StringType(), T.StringType())),
            T.StructField("error", T.StringType()),
        ])
        shared = spark.sparkContext.broadcast(pairs)
        digest = fingerprint("rtopic", pairs)
        plan = RoutePlan(kind="rtopic", fingerprint=digest, bindings=shared)
        with warnings.catch_warnings():  # pyspark looks for pandas type hints in __call__
            warnings.simplefilter("ignore", UserWarning)
            row_udfs = {impl: F.udf(RowRouter(shared, digest, impl), out_type)
                        for impl in ("dict trie", "reference", "native")}
        pandas_udf = F.pandas_udf(pandas_router(shared, digest), out_type)

        def pipeline(name: str, frame: Any, stats: Any = None) -> Any:
            """The routed DataFrame of pipeline ``name`` over ``frame``."""
            if name in (NATIVE, NOOP):
                return route(frame, pairs, stats=stats, noop=name == NOOP)
            if name == "mapInArrow + dict trie":
                return frame.mapInArrow(
                    functools.partial(route_batches_with, plan=plan, implementation="dict trie"),
                    route(frame, pairs).schema)
            udf = pandas_udf if name == "pandas UDF + dict trie" else row_udfs["dict trie"]
            routed = frame.withColumn("routed", udf("routing_key", "headers"))
            return routed.select(*frame.columns, "routed.*")

        full = [NATIVE, NOOP] + ([name for name, _ in BASELINES] if baselines else [])
        shapes = {NATIVE: ("mapInArrow", "native core"), NOOP: ("mapInArrow", "no-op"),
                  **{name: (shape, "dict trie") for name, shape in BASELINES}}
        sinks = {name: root / "out" / name.replace(" ", "-").replace("+", "") for name in full}
        echo("warm-up (JVM classes and JIT, Python workers, every pipeline) ...")
        for name in full:
            _time_write(pipeline(name, archive.limit(20_000)), sinks[name], jvm_pid)

        cpu: dict[str, list[float]] = {}
        for attempt in range(repeats):
            for name in full:
                stats = RouteStats(spark) if name in (NATIVE, NOOP) else None
                seconds, cpu_seconds = _time_write(pipeline(name, archive, stats), sinks[name],
                                                   jvm_pid)
                cpu_note = "" if cpu_seconds is None else f", {cpu_seconds:.1f} CPU s"
                builds = ("" if stats is None else
                          f"; {stats.matcher_builds.value} matcher build(s) in "
                          f"{len(stats.workers.value)} worker(s)")
                echo(f"  {name} (run {attempt + 1}/{repeats}): {messages:,} rows in "
                     f"{seconds:.1f} s{cpu_note} = {messages / seconds:,.0f} rows/s{builds}")
                if cpu_seconds is not None:
                    cpu.setdefault(name, []).append(cpu_seconds)
                best = results.get(name)
                if best is None or seconds < best.seconds:
                    results[name] = Measurement(name, messages, seconds, shape=shapes[name][0],
                                                matcher=shapes[name][1])
        for name, spent in cpu.items():  # the least CPU of the runs, like the best wall time
            results[name].cpu_seconds = min(spent)
        for name in full:
            if name not in (NATIVE, NOOP):
                check_same_routes(spark, sinks[NATIVE], sinks[name], name)
        if len(full) > 2:
            echo(f"  checked: every baseline routed the {messages:,} rows as the native core")

        for name, impl, sample_name in SAMPLED:
            if sample_name not in samples:
                continue
            rows = samples[sample_name]
            echo(f"  {name}: {rows:,} sample rows ...")
            frame = spark.read.parquet(str(root / f"sample-{sample_name}"))
            sink = root / "out" / f"sample-{impl}"
            routed = frame.withColumn("routed", row_udfs[impl]("routing_key", "headers"))
            seconds, cpu_seconds = _time_write(routed.select(*frame.columns, "routed.*"), sink,
                                               jvm_pid)
            echo(f"    {seconds:.1f} s = {rows / seconds:,.0f} rows/s")
            expected = root / "out" / f"sample-{impl}-native"
            _time_write(route(frame, pairs), expected, None)
            check_same_routes(spark, expected, sink, name)
            results[name] = Measurement(name, rows, seconds, cpu_seconds,
                                        extrapolated=rows < messages, shape="row UDF",
                                        matcher="reference.py" if impl == "reference"
                                        else "native core")
    finally:
        if workdir is None:
            shutil.rmtree(root, ignore_errors=True)

    native = results[NATIVE]
    noop = results[NOOP]
    ratios: dict[str, float | None] = {
        "native / no-op ceiling": native.rows_per_s / noop.rows_per_s,
        "native / no-op ceiling (by CPU time)": (
            noop.cpu_seconds / native.cpu_seconds if native.cpu_seconds and noop.cpu_seconds
            else None),
    }
    for name in [n for n, _ in BASELINES] + [n for n, _, _ in SAMPLED]:
        ratios[f"native / {name}"] = (native.rows_per_s / results[name].rows_per_s
                                      if name in results else None)
    echo("")
    echo(format_table(list(results.values()), native, messages))
    echo("")
    for label, value in ratios.items():
        if value is not None:
            echo(f"{label}: {value:,.2f}" + ("x" if "ceiling" not in label
                                            else f" ({value:.0%})"))
    echo(f"({master}, {messages:,} messages, {len(pairs):,} bindings; the row UDFs over "
         "reference.py and the native core are footnotes, on samples)")
    return {"results": results, "ratios": ratios, "mix": mix, "master": master,
            "messages": messages, "bindings": len(pairs), "repeats": repeats,
            "spark_version": spark_version}


def format_table(results: list[Measurement], native: Measurement, messages: int) -> str:
    """A markdown table: rows/s, the time for the whole archive, CPU per row (JVM and Python
    workers) and native's speed-up (by wall time)."""
    header = ("| pipeline | rows measured | rows/s | time for the archive | CPU µs/row "
              "| native speed-up |")
    lines = [header, "|---|---:|---:|---:|---:|---:|"]
    for m in results:
        whole = messages / m.rows_per_s
        note = " (extrapolated)" if m.extrapolated else ""
        cpu = "-" if m.cpu_us_per_row is None else f"{m.cpu_us_per_row:,.1f}"
        lines.append(f"| {m.name} | {m.rows:,} | {m.rows_per_s:,.0f} | {whole:,.1f} s{note} | "
                     f"{cpu} | {native.rows_per_s / m.rows_per_s:,.2f}x |")
    return "\n".join(lines)


def json_rows(result: dict) -> list[dict[str, Any]]:
    """The report rows of a run: the native pipeline against each other pipeline (rows/s)."""
    results: dict[str, Measurement] = result["results"]
    native = results[NATIVE]
    rows = []
    for m in results.values():
        rows.append({
            "name": NATIVE, "value": native.rows_per_s, "unit": "rows/s",
            "baseline": m.name, "baseline_value": m.rows_per_s,
            "ratio": native.rows_per_s / m.rows_per_s, "ratio_means": "native speed-up",
            "shape": m.shape, "matcher": m.matcher, "rows_measured": m.rows,
            "seconds": m.seconds, "cpu_us_per_row": m.cpu_us_per_row,
            "extrapolated": m.extrapolated,
            "role": ("rtroute" if m.name == NATIVE else "ceiling" if m.name == NOOP
                     else "footnote" if m.extrapolated or m.matcher != "dict trie"
                     else "baseline"),
        })
    return rows
