"""The JSON form of a benchmark run (``rtroute bench ... --json FILE``), read back by
``rtroute bench chart``.

One document per run::

    {"schema": "rtroute-bench/1", "benchmark": "match", "date": "2026-11-24T10:00:00+00:00",
     "machine": {"cpu_count": 2, "python": "3.12.3", "platform": "...", "rtroute": "0.1.0",
                 "core": "native", "broker": "3.10.8"},
     "parameters": {...the command's options...},
     "rows": [{"name": "...", "value": 0.53, "unit": "µs/query",
               "baseline": "python dict trie", "baseline_value": 3.44, "ratio": 6.5, ...}]}

Every row measures one thing (``name``) in ``unit`` against the baseline of the same run, and
``ratio`` says how rtroute compares with it, in the direction the row's ``ratio_means`` states
(for example "native speed-up" or "rtroute / baseline"). Rows carry their own dimensions
(``bindings``, ``shape``, ``queues_per_message``...), which the charts plot against.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
from pathlib import Path
from typing import Any

SCHEMA = "rtroute-bench/1"
REQUIRED_ROW_KEYS = ("name", "value", "unit")


def machine_info(broker_version: str | None = None) -> dict[str, Any]:
    """What the figures were measured on: cores, Python, rtroute and its core, the broker."""
    from rtroute import __version__
    from rtroute.core import IMPLEMENTATION

    return {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "rtroute": __version__,
        "core": IMPLEMENTATION,
        "broker": broker_version,
    }


def broker_version(uri: str) -> str | None:
    """The RabbitMQ version the broker at ``uri`` announces in ``connection.start``, or None
    when it cannot be reached or does not say."""
    from rtroute.amqp import connect_blocking
    from rtroute.amqp.broker_identity import identity_from_server_properties
    from rtroute.amqp.pika_internals import server_properties

    try:
        connection = connect_blocking(uri, connection_name="rtroute-bench-version")
    except Exception:  # noqa: BLE001 - the version is a label; the benchmark reports the error
        return None
    try:
        return identity_from_server_properties(server_properties(connection)).version
    finally:
        connection.close()


def _plain(value: Any) -> Any:
    """``value`` with tuples as lists and non-finite floats as None (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def build_report(benchmark: str, parameters: dict[str, Any], rows: list[dict[str, Any]],
                 broker: str | None = None, extra: dict[str, Any] | None = None,
                 ) -> dict[str, Any]:
    """The JSON document of one run (see the module docstring).

    Raises:
        ValueError: a row lacks ``name``, ``value`` or ``unit``.
    """
    for row in rows:
        missing = [k for k in REQUIRED_ROW_KEYS if k not in row]
        if missing:
            raise ValueError(f"benchmark row {row!r} lacks {', '.join(missing)}")
    report = {
        "schema": SCHEMA,
        "benchmark": benchmark,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(broker),
        "parameters": parameters,
        "rows": rows,
    }
    if extra:
        report["extra"] = extra
    return _plain(report)


def write_report(path: str | Path, report: dict[str, Any]) -> Path:
    """Writes ``report`` as indented JSON (directories created); returns the path."""
    target = Path(path)
    if target.parent != Path(""):
        target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return target


def read_report(path: str | Path) -> dict[str, Any]:
    """Reads a report written by :func:`write_report`.

    Raises:
        ValueError: not JSON, or not an ``rtroute-bench/1`` document with rows.
    """
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not an {SCHEMA} report (write one with "
                         "`rtroute bench ... --json FILE`)")
    if not isinstance(report.get("rows"), list) or "benchmark" not in report:
        raise ValueError(f"{path}: a report needs 'benchmark' and a list of 'rows'")
    for row in report["rows"]:
        if not isinstance(row, dict) or any(k not in row for k in REQUIRED_ROW_KEYS):
            raise ValueError(f"{path}: row {row!r} lacks one of {', '.join(REQUIRED_ROW_KEYS)}")
    return report
