"""`rtroute bench match`: the native core against its baselines, in one run.

Baselines: ``reference.py`` (the pure twin, a scan), a pure-Python dict trie with a reversed
twin, marisa-trie (immutable C++ trie: prefix search, then a regex filter) and a naive scan that
tests every binding with a compiled regex. Bindings have 4-6 words drawn from 30 words per level.
"""
from __future__ import annotations

import gc
import random
import re
import time
from dataclasses import dataclass
from typing import Callable

from rtroute.bench.pytrie import DictTrie
from rtroute.core import reference

VOCABULARY = 30
SLOW_QUERIES = 3  # the scans answer only the first few queries of each shape
SHAPES = ["exact", "a.*.c.d", "a.b.c.#", "a.#", "#.c.d", "c.d.# (mirror)", "a.#.d", "#"]


@dataclass
class Row:
    """One measurement: an implementation answering one query shape at one size."""

    bindings: int
    shape: str
    impl: str
    us_per_query: float
    results: float

    @property
    def ns_per_result(self) -> float | None:
        return self.us_per_query * 1000 / self.results if self.results else None


def generate_bindings(n: int, seed: int = 1) -> list[str]:
    """``n`` distinct keys of 4-6 words, each word one of 30 per level."""
    rnd = random.Random(seed)
    keys: dict[str, None] = {}
    while len(keys) < n:
        length = rnd.randint(4, 6)
        keys[".".join(f"w{rnd.randrange(VOCABULARY)}" for _ in range(length))] = None
    return list(keys)


def queries_for(shape: str, keys: list[str], count: int, seed: int = 2) -> list[str]:
    """``count`` queries of ``shape`` built from existing keys (so they have results)."""
    rnd = random.Random(seed)
    out = []
    for _ in range(count):
        w = rnd.choice(keys).split(".")
        out.append({
            "exact": ".".join(w),
            "a.*.c.d": f"{w[0]}.*.{w[2]}.{w[3]}",
            "a.b.c.#": f"{w[0]}.{w[1]}.{w[2]}.#",
            "a.#": f"{w[0]}.#",
            "#.c.d": f"#.{w[-2]}.{w[-1]}",
            "c.d.# (mirror)": f"{w[-1]}.{w[-2]}.#",
            "a.#.d": f"{w[0]}.#.{w[-1]}",
            "#": "#",
        }[shape])
    return out


def pattern_regex(query: str) -> re.Pattern:
    """The regex a naive implementation would compile for a reverse-topic query.

    It is matched against the key with a dot before every word ("a.b" -> ".a.b"), so that each
    query word maps to one regex piece.
    """
    pieces = {"#": r"(?:\.[^.]*)*", "*": r"\.[^.]*"}
    words = query.split(".") if query else []
    return re.compile("".join(pieces.get(w) or re.escape("." + w) for w in words))


def dotted(key: str) -> str:
    """The form :func:`pattern_regex` matches: a dot before every word."""
    return "." + key if key else ""


class NaiveScan:
    """Tests every binding against the query's compiled regex."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = [(dotted(k), k) for k in keys]

    def match(self, query: str) -> list[str]:
        full = pattern_regex(query).fullmatch
        return [k for d, k in self.keys if full(d)]


class MarisaPrefix:
    """marisa-trie: prefix search on the query's literal lead, then a regex filter."""

    def __init__(self, keys: list[str]) -> None:
        import marisa_trie

        self.trie = marisa_trie.Trie(keys)

    def match(self, query: str) -> list[str]:
        words = query.split(".")
        lead = []
        for w in words:
            if w in ("*", "#"):
                break
            lead.append(w)
        if len(lead) == len(words):
            return [query] if query in self.trie else []
        prefix = ".".join(lead) + "." if lead else ""
        full = pattern_regex(query).fullmatch
        return [k for k in self.trie.keys(prefix) if full(dotted(k))]


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


# CPU time of this process, not wall time: other load on a shared machine does not inflate it.
clock = time.process_time


def _time_queries(match: Callable, queries: list[str], budget_s: float) -> tuple[float, float]:
    """Mean µs per query and mean result count. The clock is read around whole passes over
    ``queries`` (repeated while within the budget): reading a CPU clock is a system call that
    would otherwise dominate sub-microsecond queries."""
    results = sum(len(match(q)) for q in queries)  # also warms the caches
    passes = 0
    t0 = clock()
    while True:
        for q in queries:
            match(q)
        passes += 1
        elapsed = clock() - t0
        if elapsed > budget_s or passes >= 50:
            break
    return elapsed / (passes * len(queries)) * 1e6, results / len(queries)


def _time_exact_batch(matcher, queries: list[str]) -> tuple[float, float]:
    t0 = clock()
    found = matcher.match_many(queries)
    elapsed = clock() - t0
    return elapsed / len(queries) * 1e6, sum(map(len, found)) / len(queries)


def run(sizes=(1_000, 100_000, 1_000_000), scan_limit: int = 100_000, queries: int = 20,
        echo: Callable[[str], None] = print) -> dict:
    """Runs the benchmark; prints progress and the tables; returns rows and memory figures."""
    from rtroute.core import _native  # the benchmark is about the native core

    rows: list[Row] = []
    memory: list[tuple[int, str, float]] = []
    mutation: list[tuple[int, float]] = []
    for n in sizes:
        echo(f"[{n:,} bindings] generating keys ...")
        keys = generate_bindings(n)
        impls: dict[str, Callable] = {}

        gc.collect()
        before = _rss()
        native = _native.ReverseMatcher()
        t0 = clock()
        for k in keys:
            native.add(k)
        build = clock() - t0
        native.compact()
        memory.append((n, "native (rt_memory)", native.memory() / n))
        memory.append((n, "native (process RSS)", (_rss() - before) / n))
        echo(f"[{n:,} bindings] native built in {build:.2f} s ({n / build:,.0f} adds/s)")
        impls["native"] = native.match

        sample = keys[: min(n, 100_000)]
        t0 = clock()
        for k in sample:
            native.remove(k)
        for k in sample:
            native.add(k)
        mutation.append((n, 2 * len(sample) / (clock() - t0)))

        gc.collect()
        before = _rss()
        trie = DictTrie()
        for k in keys:
            trie.add(k)
        memory.append((n, "python dict trie (RSS)", (_rss() - before) / n))
        impls["python dict trie"] = trie.match
        echo(f"[{n:,} bindings] python dict trie built")

        try:
            gc.collect()
            before = _rss()
            marisa = MarisaPrefix(keys)
            memory.append((n, "marisa-trie (RSS)", (_rss() - before) / n))
            impls["marisa-trie"] = marisa.match
        except ImportError:
            echo("marisa-trie not installed (pip install 'rtroute[bench]'): skipped")

        impls["naive regex scan"] = NaiveScan(keys).match
        if n <= scan_limit:
            ref = reference.ReverseMatcher()
            for k in keys:
                ref.add(k)
            impls["reference.py"] = ref.match

        for shape in SHAPES:
            qs = queries_for(shape, keys, queries)
            for name, match in impls.items():
                slow = name in ("naive regex scan", "reference.py")
                budget = 0.2 if slow else 0.5
                if name == "native" and shape == "exact":
                    batch = queries_for(shape, keys, 100_000)
                    us, res = _time_exact_batch(native, batch)
                else:
                    us, res = _time_queries(match, qs[:SLOW_QUERIES] if slow else qs, budget)
                rows.append(Row(n, shape, name, us, res))
            echo(f"[{n:,} bindings] {shape}: done")
        del impls, trie, native
        gc.collect()

    echo("")
    echo(f"(CPU µs per query; the scans answer only the first {SLOW_QUERIES} queries of a shape, "
         f"the others up to {queries}: result counts differ slightly)")
    echo(format_table(rows))
    echo("")
    echo("memory per binding (bytes):")
    for n, name, b in memory:
        echo(f"  {n:>9,}  {name:<24} {b:8.0f}")
    echo("native bind/unbind rate (ops/s):")
    for n, rate in mutation:
        echo(f"  {n:>9,}  {rate:12,.0f}")
    return {"rows": rows, "memory": memory, "mutation": mutation}


def format_table(rows: list[Row]) -> str:
    """A markdown table: µs/query, results, ns/result and the speed-up of native."""
    native = {(r.bindings, r.shape): r.us_per_query for r in rows if r.impl == "native"}
    lines = ["| bindings | query | implementation | µs/query | results | ns/result | native speed-up |",
             "|---:|---|---|---:|---:|---:|---:|"]
    for r in rows:
        nsr = f"{r.ns_per_result:.1f}" if r.ns_per_result else "-"
        ratio = r.us_per_query / native[(r.bindings, r.shape)]
        lines.append(f"| {r.bindings:,} | `{r.shape}` | {r.impl} | {r.us_per_query:,.2f} | "
                     f"{r.results:,.0f} | {nsr} | {ratio:,.1f}x |")
    return "\n".join(lines)


def json_rows(result: dict) -> list[dict]:
    """The report rows of a run: the native core against each baseline per size and query
    shape (CPU µs per query), then memory per binding and the bind/unbind rate."""
    rows: list[Row] = result["rows"]
    native = {(r.bindings, r.shape): r for r in rows if r.impl == "native"}
    out: list[dict] = []
    for r in rows:
        if r.impl == "native":
            continue
        mine = native[(r.bindings, r.shape)]
        out.append({"name": "native", "value": mine.us_per_query, "unit": "µs/query",
                    "baseline": r.impl, "baseline_value": r.us_per_query,
                    "ratio": r.us_per_query / mine.us_per_query,
                    "ratio_means": "native speed-up", "bindings": r.bindings, "shape": r.shape,
                    "results": mine.results, "baseline_results": r.results,
                    "ns_per_result": mine.ns_per_result})
    for n, name, per_binding in result["memory"]:
        out.append({"name": name, "value": per_binding, "unit": "bytes/binding",
                    "bindings": n, "kind": "memory"})
    for n, rate in result["mutation"]:
        out.append({"name": "native bind+unbind", "value": rate, "unit": "ops/s",
                    "bindings": n, "kind": "mutation"})
    return out
