"""``/metrics`` with ``prometheus_client``: the components' counters as they report them, plus
the process metrics, ``rtroute_build_info`` and latency histograms.

Components describe their metrics as plain data (no client objects on the hot path):
``{name: {"help": str, "type": "counter" | "gauge" | "histogram", "samples": [(labels, value)]}}``
where a histogram's value is ``{"buckets": [(upper_bound, cumulative_count), ...], "sum": s}``
(the last bound ``"+Inf"``). :class:`LatencyHistogram` keeps one cheaply.
"""
from __future__ import annotations

import bisect
import platform
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest

__all__ = ["LatencyHistogram", "counter_metrics", "render"]

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0)


class LatencyHistogram:
    """Seconds observed into fixed buckets: one ``bisect`` and two additions per observation
    (the sidecar observes once per message)."""

    __slots__ = ("_counts", "count", "sum")

    def __init__(self) -> None:
        self._counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self._counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.count += 1
        self.sum += seconds

    def sample(self) -> dict[str, Any]:
        """The histogram in the form :func:`render` takes."""
        buckets, running = [], 0
        for bound, count in zip((*LATENCY_BUCKETS, float("inf")), self._counts):
            running += count
            buckets.append(("+Inf" if bound == float("inf") else str(bound), running))
        return {"buckets": buckets, "sum": self.sum}


def counter_metrics(prefix: str, described: Mapping[str, str],
                    rows: Iterable[tuple[Mapping[str, str], Mapping[str, Any]]]
                    ) -> dict[str, dict[str, Any]]:
    """The ``/metrics`` form of counters declared once as ``described`` (name -> help text):
    ``{prefix}{name}_total`` per name, with a sample per row of ``rows``: ``(labels, values)``,
    ``values`` the component's counters by name (what ``/status`` shows)."""
    rows = list(rows)
    return {f"{prefix}{name}_total": {
        "help": help_text, "type": "counter",
        "samples": [(labels, values[name]) for labels, values in rows]}
        for name, help_text in described.items()}


class _StatusCollector:
    def __init__(self, metrics: Mapping[str, Mapping[str, Any]]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        for name, metric in sorted(self._metrics.items()):
            kind = metric.get("type", "counter")
            samples = metric.get("samples", [])
            help_text = metric.get("help", name)
            labels = sorted({k for sample_labels, _ in samples for k in sample_labels})
            family: Any
            if kind == "counter":
                family = CounterMetricFamily(name, help_text, labels=labels)
            elif kind == "histogram":
                family = HistogramMetricFamily(name, help_text, labels=labels)
            else:
                family = GaugeMetricFamily(name, help_text, labels=labels)
            for sample_labels, value in samples:
                values = [str(sample_labels.get(k, "")) for k in labels]
                if kind == "histogram":
                    family.add_metric(values, value["buckets"], value["sum"])
                else:
                    family.add_metric(values, value)
            yield family


class _BuildInfo:
    def collect(self) -> Iterator[Metric]:
        from importlib.metadata import PackageNotFoundError, version

        import pika

        from rtroute import core

        try:
            rtroute_version = version("rtroute")
        except PackageNotFoundError:
            rtroute_version = "unknown"
        family = GaugeMetricFamily(
            "rtroute_build_info", "rtroute's version, core implementation, pika and Python",
            labels=["version", "core", "pika", "python"])
        family.add_metric([rtroute_version, core.IMPLEMENTATION, pika.__version__,
                           platform.python_version()], 1)
        yield family


def render(metrics: Mapping[str, Mapping[str, Any]], process: bool = True) -> str:
    """The Prometheus text exposition of ``metrics`` (and, with ``process``, of the process:
    CPU, memory, open descriptors, start time; Python; ``rtroute_build_info``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StatusCollector(metrics))
    if process:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        registry.register(_BuildInfo())
    return generate_latest(registry).decode("utf-8")
