"""What ``rtroute spark`` subcommands print: progress lines on stderr, tables on stdout."""
from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from rtroute.spark.job import RouteStats

__all__ = ["echo_cores", "echo_err", "format_table"]


def echo_err(line: str) -> None:
    """One progress line on stderr."""
    click.echo(line, err=True)


def format_table(header: list[str], rows: list[list[object]]) -> str:
    """A markdown table; numbers right-aligned with thousands separators (floats: 1 decimal)."""
    def text(value: object) -> str:
        if isinstance(value, float):
            return f"{value:,.1f}"
        return f"{value:,}" if isinstance(value, int) else str(value)

    texts = [[text(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in texts]) for i, h in enumerate(header)]
    numeric = [bool(rows) and all(isinstance(r[i], (int, float)) for r in rows)
               for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if n else c.ljust(w)
                                 for c, w, n in zip(cells, widths, numeric)) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if n else ("-" * (w + 2))
                          for w, n in zip(widths, numeric)) + "|"
    return "\n".join([line(header), rule] + [line(r) for r in texts])


def echo_cores(stats: RouteStats) -> None:
    """Which core (native or pure Python) the executors routed with, one line each."""
    for line in sorted(stats.cores.value):
        echo_err(f"routed with the {line}")
