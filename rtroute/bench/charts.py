"""The benchmark figures of docs/performance.md, drawn with matplotlib from the JSON reports of
``rtroute bench ... --json FILE`` (:mod:`rtroute.bench.report`).

Callers select the Agg backend before importing this module (``rtroute bench chart`` does);
matplotlib is an optional dependency (``pip install 'rtroute[bench]'``).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

DPI = 100
SIZE = (7.0, 4.0)  # inches: 700x400 pixels, 30-60 KB as PNG
NATIVE_COLOUR = "#1f77b4"
BASELINE_COLOUR = "#ff7f0e"
OTHER_COLOUR = "#9a9a9a"


def _rows(reports: Iterable[dict[str, Any]], benchmark: str) -> list[dict[str, Any]]:
    return [row for report in reports if report["benchmark"] == benchmark
            for row in report["rows"]]


def _machine(reports: Iterable[dict[str, Any]], benchmark: str) -> str:
    """A caption: where and when the figures were measured."""
    for report in reports:
        if report["benchmark"] == benchmark:
            m = report["machine"]
            broker = f", RabbitMQ {m['broker']}" if m.get("broker") else ""
            return (f"{m['cpu_count']} cores, Python {m['python']}, rtroute {m['rtroute']} "
                    f"({m['core']} core){broker}, {report['date'][:10]}")
    return ""


def _save(figure: Any, path: Path, caption: str) -> Path:
    figure.text(0.99, 0.01, caption, ha="right", va="bottom", fontsize=7, color="#555555")
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return path


def match_speedup(reports: list[dict[str, Any]], out: Path) -> Path | None:
    """The native core's speed-up over the Python dict trie and marisa-trie against the number
    of bindings, one line per query shape (log-log)."""
    rows = [r for r in _rows(reports, "match") if r.get("baseline") and r.get("ratio")]
    baselines = [b for b in ("python dict trie", "marisa-trie")
                 if any(r["baseline"] == b for r in rows)]
    if not baselines:
        return None
    figure, axes = plt.subplots(1, len(baselines), figsize=(8.0, 4.0), sharey=True,
                                squeeze=False)
    for axis, baseline in zip(axes[0], baselines):
        lines: dict[str, dict[int, float]] = defaultdict(dict)
        for r in rows:
            if r["baseline"] == baseline:
                lines[r["shape"]][r["bindings"]] = r["ratio"]
        for shape, points in lines.items():
            xs = sorted(points)
            axis.plot(xs, [points[x] for x in xs], marker="o", label=shape)
        axis.axhline(1, color=OTHER_COLOUR, linewidth=0.8)
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("bindings")
        axis.set_title(f"native vs {baseline}", fontsize=10)
        axis.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("native speed-up (x, CPU time per query)")
    axes[0][-1].legend(fontsize=7, title="query", title_fontsize=7, loc="upper left",
                       bbox_to_anchor=(1.02, 1.0))
    return _save(figure, out / "match-speedup.png", _machine(reports, "match"))


def _ratio_line(reports: list[dict[str, Any]], benchmark: str, x_key: str, x_label: str,
                title: str, select: Callable[[dict[str, Any]], bool], path: Path,
                log_x: bool) -> Path | None:
    points: dict[float, list[float]] = defaultdict(list)
    for r in _rows(reports, benchmark):
        if r.get("ratio") is not None and x_key in r and select(r):
            points[r[x_key]].append(r["ratio"])
    if not points:
        return None
    xs = sorted(points)
    figure, axis = plt.subplots(figsize=SIZE)
    for x in xs:  # every run's ratio, and the line through their means
        axis.scatter([x] * len(points[x]), points[x], color=OTHER_COLOUR, s=12, zorder=2)
    axis.plot(xs, [sum(points[x]) / len(points[x]) for x in xs], marker="o",
              color=NATIVE_COLOUR, zorder=3)
    axis.axhline(1, color=OTHER_COLOUR, linewidth=0.8, linestyle="--")
    axis.axhline(0.5, color=BASELINE_COLOUR, linewidth=0.8, linestyle=":",
                 label="0.5: each message crosses the broker twice")
    if log_x:
        axis.set_xscale("log")
    axis.set_xticks(xs, [f"{x:g}" for x in xs])
    axis.set_ylim(0, max(1.1, max(max(v) for v in points.values()) * 1.1))
    axis.set_xlabel(x_label)
    axis.set_ylabel("rtroute / native topic exchange (msg/s)")
    axis.set_title(title, fontsize=10)
    axis.legend(fontsize=8)
    axis.grid(True, alpha=0.3)
    return _save(figure, path, _machine(reports, benchmark))


def sidecar_ratio(reports: list[dict[str, Any]], out: Path) -> Path | None:
    """The sidecar's rate as a fraction of the native topic exchange's against the number of
    queues each message reaches (scenarios without extra bindings, wildcard key)."""
    return _ratio_line(reports, "sidecar", "queues_per_message", "queues per message",
                       "sidecar vs native topic exchange",
                       lambda r: not r.get("extra_bindings") and not r.get("exact"),
                       out / "sidecar-ratio.png", log_x=True)


def divert_ratio(reports: list[dict[str, Any]], out: Path) -> Path | None:
    """The managed exchange's rate as a fraction of the native one against the number of
    diverts whose filters match nothing."""
    return _ratio_line(reports, "divert", "diverts", "diverts (filters match nothing)",
                       "managed exchange with diverts vs native topic exchange",
                       lambda r: not r.get("copies"), out / "divert-ratio.png", log_x=False)


def spark_shapes(reports: list[dict[str, Any]], out: Path) -> Path | None:
    """Rows per second of every Spark pipeline (log scale), labelled with the native
    pipeline's speed-up over it; footnote rows (samples, extrapolated) hatched."""
    rows = [r for r in _rows(reports, "spark") if r.get("baseline_value")]
    if not rows:
        return None
    rows.sort(key=lambda r: r["baseline_value"])
    figure, axis = plt.subplots(figsize=SIZE)
    colours = [NATIVE_COLOUR if r.get("role") == "rtroute" else
               OTHER_COLOUR if r.get("role") in ("ceiling", "footnote") else BASELINE_COLOUR
               for r in rows]
    bars = axis.barh([r["baseline"] for r in rows], [r["baseline_value"] for r in rows],
                     color=colours)
    for bar, r in zip(bars, rows):
        if r.get("role") == "footnote":
            bar.set_hatch("//")
        label = "" if r.get("role") == "rtroute" else f"  native {r['ratio']:,.2f}x"
        axis.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                  f" {r['baseline_value']:,.0f}{label}", va="center", fontsize=8)
    axis.set_xscale("log")
    axis.set_xlim(right=max(r["baseline_value"] for r in rows) * 30)
    axis.set_xlabel("rows/s (log); hatched: footnote, on a sample")
    params = next(rep["parameters"] for rep in reports if rep["benchmark"] == "spark")
    axis.set_title(f"Spark {params.get('master', '')}: {params.get('messages', 0):,} messages, "
                   f"{params.get('bindings', 0):,} bindings", fontsize=10)
    axis.tick_params(axis="y", labelsize=8)
    axis.grid(True, axis="x", alpha=0.3)
    return _save(figure, out / "spark-shapes.png", _machine(reports, "spark"))


def ratio_bars(reports: list[dict[str, Any]], benchmark: str, out: Path) -> Path | None:
    """Any other benchmark: each row's ratio against its baseline, as bars."""
    rows = [r for r in _rows(reports, benchmark) if r.get("ratio") is not None]
    if not rows:
        return None
    labels = [str(r.get("case") or r.get("ack_mode") or r.get("scenario")
                  or f"vs {r.get('baseline')}") for r in rows]
    figure, axis = plt.subplots(figsize=SIZE)
    bars = axis.barh(labels, [r["ratio"] for r in rows], color=NATIVE_COLOUR)
    for bar, r in zip(bars, rows):
        axis.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {r['ratio']:,.2f}x",
                  va="center", fontsize=8)
    axis.axvline(1, color=OTHER_COLOUR, linewidth=0.8, linestyle="--")
    axis.set_xlabel(rows[0].get("ratio_means", "ratio"))
    axis.set_title(f"rtroute bench {benchmark}", fontsize=10)
    axis.tick_params(axis="y", labelsize=8)
    return _save(figure, out / f"{benchmark}-ratio.png", _machine(reports, benchmark))


def draw(reports: list[dict[str, Any]], out: Path,
         echo: Callable[[str], None] = print) -> list[Path]:
    """Draws every figure the reports hold data for into ``out`` (created); returns the PNGs."""
    out.mkdir(parents=True, exist_ok=True)
    benchmarks = {r["benchmark"] for r in reports}
    special = {"match": match_speedup, "sidecar": sidecar_ratio, "divert": divert_ratio,
               "spark": spark_shapes}
    written = []
    for benchmark in sorted(benchmarks):
        chart = special.get(benchmark)
        path = chart(reports, out) if chart else ratio_bars(reports, benchmark, out)
        if path is not None:
            echo(f"wrote {path} ({path.stat().st_size / 1024:.0f} KB)")
            written.append(path)
    return written
