"""`rtroute bench spark`: the Spark job three ways on the same generated archive, in one run.

1. ``arrow + native``: :func:`rtroute.spark.route` (``mapInArrow``, one core call per batch).
2. ``row UDF + reference``: a row-at-a-time Python UDF calling the pure reference matcher. It
   scans every binding per key (~10 ms a key at 10k bindings), so it runs on a sample of the
   archive and its rate is extrapolated to the full archive (the table says so).
3. ``arrow + no-op matcher``: pipeline 1 with a matcher that finds nothing: everything else
   (reading, Arrow transfer, row checks, header decoding, building the output columns, writing)
   is the same, so this is Spark's own ceiling on this machine.

Also, for the breakdown, a row-at-a-time UDF calling the *native* core (on a larger sample):
what Arrow batching alone is worth. Every pipeline reads the archive's Parquet files and writes
Parquet; each is run after a warm-up job, best of ``repeats``.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import warnings
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


_ROW_ROUTERS: dict[tuple[str, str], Any] = {}


class RowRouter:
    """The row-at-a-time UDF: one Python call per row, the matcher called once per key.

    Same checks and output as the batch path (``destinations``, ``delivered_headers``,
    ``error``). The matcher is built once per worker process (cached by fingerprint).
    """

    def __init__(self, bindings: Any, fingerprint: str, implementation: str) -> None:
        self.bindings = bindings  # a Spark broadcast of the pairs
        self.fingerprint = fingerprint
        self.implementation = implementation  # "reference" or "native"
        self.__name__ = f"route_row_{implementation}"

    def _router(self) -> tuple[Any, dict[str, list[str]]]:
        cache_key = (self.fingerprint, self.implementation)
        if cache_key not in _ROW_ROUTERS:
            if self.implementation == "reference":
                from rtroute.core.reference import ReverseMatcher
            else:
                from rtroute.core import ReverseMatcher
            matcher = ReverseMatcher()
            by_key: dict[str, set] = {}
            for destination, key in self.bindings.value:
                matcher.add(key)
                by_key.setdefault(key, set()).add(destination)
            _ROW_ROUTERS[cache_key] = (matcher, {k: sorted(v) for k, v in by_key.items()})
        return _ROW_ROUTERS[cache_key]

    def __call__(self, routing_key: str | None, headers: str | None) -> tuple:
        from rtroute.core import MAX_BINDING_BYTES
        from rtroute.core.keys import decode_key
        from rtroute.routing import PreconditionFailed, extra_routing_keys
        from rtroute.spark.batches import header_text

        matcher, by_key = self._router()
        try:
            if routing_key is None:
                raise ValueError("routing key is null")
            decode_key(routing_key, MAX_BINDING_BYTES, "routing key")
            table = json.loads(headers) if headers is not None else {}
            if not isinstance(table, dict):
                return None, None, "headers must be a JSON object"
            cc, bcc = extra_routing_keys(table)
        except PreconditionFailed as exc:
            return None, None, f"406 PRECONDITION_FAILED - {exc}"
        except ValueError as exc:
            return None, None, str(exc)
        found: set[str] = set()
        for query in [routing_key, *cc, *bcc]:
            for key in matcher.match(query):
                found.update(by_key[key])
        delivered = {k: header_text(v) for k, v in table.items() if k != "BCC"}
        return sorted(found), delivered, None


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
        workdir: str | None = None) -> dict:
    """Runs the benchmark; prints progress and a table; returns the measurements and ratios.

    Args:
        messages: rows in the generated archive (the issue asks for at least 2M).
        bindings: binding keys (five per destination).
        master: Spark master (``local[2]`` on the 2-core reference machine).
        reference_sample: rows routed by the row-at-a-time reference UDF (extrapolated).
        native_row_sample: rows routed by the row-at-a-time native UDF (0 to skip).
        repeats: runs of each Arrow pipeline; the best counts.
        workdir: where the archive and outputs go (a temporary directory by default).
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from rtroute.spark import RouteStats, route
    from rtroute.spark.batches import fingerprint
    from rtroute.spark.commands import spark_session

    root = Path(workdir or tempfile.mkdtemp(prefix="rtroute-bench-spark-"))
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
        echo(f"spark {spark.version} on {master}: session in {time.perf_counter() - t0:.1f} s")
        archive = spark.read.parquet(str(root / "archive"))
        sink = root / "out"
        gateway = getattr(spark.sparkContext, "_gateway", None)
        jvm_pid = getattr(getattr(gateway, "proc", None), "pid", None)

        echo("warm-up (JVM classes and JIT, Python workers, both pipelines) ...")
        for noop in (False, True):
            _time_write(route(archive.limit(100_000), pairs, noop=noop), sink, jvm_pid)

        results: dict[str, Measurement] = {}
        cpu: dict[str, list[float]] = {}
        for attempt in range(repeats):
            for name, noop in (("arrow + native core", False), ("arrow + no-op matcher", True)):
                stats = RouteStats(spark)
                seconds, cpu_seconds = _time_write(
                    route(archive, pairs, stats=stats, noop=noop), sink, jvm_pid)
                cpu_note = "" if cpu_seconds is None else f", {cpu_seconds:.1f} CPU s"
                echo(f"  {name} (run {attempt + 1}/{repeats}): {messages:,} rows in "
                     f"{seconds:.1f} s{cpu_note} = {messages / seconds:,.0f} rows/s; "
                     f"{stats.matcher_builds.value} matcher build(s) in "
                     f"{len(stats.workers.value)} worker(s)")
                if cpu_seconds is not None:
                    cpu.setdefault(name, []).append(cpu_seconds)
                best = results.get(name)
                if best is None or seconds < best.seconds:
                    results[name] = Measurement(name, messages, seconds)
        for name, spent in cpu.items():  # the least CPU of the runs, like the best wall time
            results[name].cpu_seconds = min(spent)

        out_type = T.StructType([
            T.StructField("destinations", T.ArrayType(T.StringType())),
            T.StructField("delivered_headers", T.MapType(T.StringType(), T.StringType())),
            T.StructField("error", T.StringType()),
        ])
        shared = spark.sparkContext.broadcast(pairs)
        for name, impl in (("row UDF + reference matcher", "reference"),
                           ("row UDF + native core", "native")):
            sample_name = "reference" if impl == "reference" else "native-row"
            if sample_name not in samples:
                continue
            rows = samples[sample_name]
            echo(f"  {name}: {rows:,} sample rows ...")
            with warnings.catch_warnings():  # pyspark looks for pandas type hints in __call__
                warnings.simplefilter("ignore", UserWarning)
                udf = F.udf(RowRouter(shared, fingerprint("rtopic", pairs), impl), out_type)
            frame = spark.read.parquet(str(root / f"sample-{sample_name}"))
            seconds, cpu_seconds = _time_write(
                frame.withColumn("routed", udf("routing_key", "headers")), sink, jvm_pid)
            echo(f"    {seconds:.1f} s = {rows / seconds:,.0f} rows/s")
            results[name] = Measurement(name, rows, seconds, cpu_seconds,
                                        extrapolated=rows < messages)
    finally:
        if workdir is None:
            shutil.rmtree(root, ignore_errors=True)

    native = results["arrow + native core"]
    noop = results["arrow + no-op matcher"]
    ratios = {
        "native / no-op ceiling": native.rows_per_s / noop.rows_per_s,
        "native / no-op ceiling (by CPU time)": (
            noop.cpu_seconds / native.cpu_seconds if native.cpu_seconds and noop.cpu_seconds
            else None),
        "native / row reference": (native.rows_per_s
                                   / results["row UDF + reference matcher"].rows_per_s
                                   if "row UDF + reference matcher" in results else None),
        "native / row native": (native.rows_per_s / results["row UDF + native core"].rows_per_s
                                if "row UDF + native core" in results else None),
    }
    echo("")
    echo(format_table(list(results.values()), native, messages))
    echo("")
    for label, value in ratios.items():
        if value is not None:
            echo(f"{label}: {value:,.2f}" + ("x" if "ceiling" not in label
                                            else f" ({value:.0%})"))
    echo(f"goals: >= 5x the row-at-a-time reference path; >= 70% of the no-op ceiling "
         f"({master}, {messages:,} messages, {len(pairs):,} bindings)")
    return {"results": results, "ratios": ratios, "mix": mix, "master": master,
            "messages": messages, "bindings": len(pairs)}


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
