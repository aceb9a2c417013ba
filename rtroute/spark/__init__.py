"""Batch routing on Spark: where would an archive of messages go under a set of bindings?

Public API (pyspark, pyarrow and pandas come with ``pip install 'rtroute[spark]'``):

- :func:`route` -- add ``destinations``, ``delivered_headers`` and ``error`` to a DataFrame of
  messages, matching in ``mapInArrow`` with the native core's batch API.
- :func:`summarize`, :func:`destination_counts`, :func:`unroutable_count`,
  :func:`error_counts` -- reports on a routed DataFrame.
- :func:`diff`, :func:`summarize_diff` -- what changes if one binding set replaces another.
- :func:`read_messages` -- Parquet or JSON lines archives.
- :func:`spark_progress`, :func:`progress_line` -- progress of the running stages.
- :func:`drain` -- empty a RabbitMQ queue into Parquet files, acking only what is durably written.
- :func:`register_stream_source` -- ``spark.readStream.format("rtroute-rabbitmq-stream")``:
  RabbitMQ streams as a Spark streaming source (:mod:`rtroute.spark.stream_source`).
- :func:`run_stream` -- route a stream micro-batch by micro-batch into Parquet, each message
  exactly once (``rtroute spark stream``).

Nothing heavy is imported with the package itself: ``rtroute.spark.commands`` (the click group)
loads without pyspark or pyarrow, the names above load their module on first use, pyspark is
imported only inside the functions that need it, and :func:`drain` needs only pyarrow and pika.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DrainStats": "archive",
    "drain": "archive",
    "DiffSummary": "job",
    "RouteStats": "job",
    "RouteSummary": "job",
    "binding_pairs": "job",
    "destination_counts": "job",
    "diff": "job",
    "error_counts": "job",
    "progress_line": "job",
    "read_messages": "job",
    "register_stream_source": "stream_source",
    "route": "job",
    "run_stream": "stream_job",
    "StreamRunStats": "stream_job",
    "spark_progress": "job",
    "summarize": "job",
    "summarize_diff": "job",
    "unroutable_count": "job",
}

__all__ = [
    "DiffSummary",
    "DrainStats",
    "RouteStats",
    "RouteSummary",
    "StreamRunStats",
    "binding_pairs",
    "destination_counts",
    "diff",
    "drain",
    "error_counts",
    "progress_line",
    "read_messages",
    "register_stream_source",
    "route",
    "run_stream",
    "spark_progress",
    "summarize",
    "summarize_diff",
    "unroutable_count",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
