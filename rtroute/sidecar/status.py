"""What ``/status`` and ``/metrics`` show of the sidecar: the per-exchange counters and states,
and the Prometheus metrics built from a status snapshot."""
from __future__ import annotations

import enum
import time
from typing import Any

from rtroute.divert.table import DIVERT_COUNTERS
from rtroute.ops.metrics import counter_metrics


def utc_timestamp(seconds: float | None = None) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` of ``seconds`` since the epoch (default: now), as ``/status``
    shows times."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))

BCC_HINT = ("RabbitMQ removes a publisher's BCC header before the ingress queue stores the "
            "message, so the sidecar never sees it and those copies are not made: publishers "
            "put blind copies in each exchange's bcc_alias_header instead (x-rtroute-bcc by "
            "default), which the sidecar removes before delivery. CC works as published. "
            "The one trace a BCC-only publish leaves is an empty headers table: "
            "exchanges[].empty_headers counts those (clients that always send a table too).")


#: Per-exchange counter -> help text: declared once, shown by ``/status`` (each exchange's
#: ``counters`` fields, also at its top level) and ``/metrics`` (``rtroute_exchange_*_total``).
EXCHANGE_COUNTERS: dict[str, str] = {
    "received": "Ingress messages received",
    "routed": "Messages routed to at least one binding",
    "unroutable": "Messages that matched no binding",
    "dead_lettered": "Malformed messages sent to rtroute.dead",
    "diverted": "Messages taken away by an exclusive divert",
    "republished": "Republishes confirmed by the broker",
    "requeued": "Ingress messages requeued after a nack",
    "redelivered": "Ingress messages seen again (at-least-once)",
    "returned": "Republishes returned: bindings changed meanwhile",
    # straight to a queue through the default exchange (a match set too large for one
    # frame's BCC): consumers see exchange "" and the queue name as routing key
    "direct_to_queue": "Republishes straight to a queue (BCC too big)",
    # all RabbitMQ leaves of a publish whose only header was BCC (stripped before the
    # ingress queue); some clients send an empty table anyway
    "empty_headers": "Messages with an empty headers table",
}


class Counters:
    """Per-exchange counters since start (see :data:`EXCHANGE_COUNTERS`; plain ints,
    attributes on the hot path, readable from the HTTP thread)."""

    __slots__ = tuple(EXCHANGE_COUNTERS)
    # the slots, for the type checker (tests/sidecar check these are EXCHANGE_COUNTERS')
    received: int
    routed: int
    unroutable: int
    dead_lettered: int
    diverted: int
    republished: int
    requeued: int
    redelivered: int
    returned: int
    direct_to_queue: int
    empty_headers: int

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        """Every counter by name, in :data:`EXCHANGE_COUNTERS` order."""
        return {name: getattr(self, name) for name in self.__slots__}


class ExchangeState(enum.Enum):
    """What a managed exchange is doing (``/status`` shows the value)."""

    STARTING = "starting"
    """Connecting, declaring, learning bindings."""
    RUNNING = "running"
    """Consuming its ingress queue."""
    BLOCKED = "blocked"
    """The broker blocked the connection (``connection.blocked``: a memory or disk alarm):
    republishes wait, in order, until it unblocks; the prefetch window bounds what arrives."""
    RECONNECTING = "reconnecting"
    """The connection or a channel was lost; unacked messages will be redelivered."""
    STOPPING = "stopping"
    """Stopped consuming; waiting for the confirms of what is in flight."""
    STOPPED = "stopped"


def sidecar_metrics(vhost: str, exchanges: list[dict], latencies: list[tuple[str, Any]],
                    diverts: list[dict], in_flight: int, connects: int,
                    internal_errors: int) -> dict[str, dict]:
    """The ``metrics`` of ``/status`` (rendered by ``/metrics``): ``exchanges`` and ``diverts``
    are their status entries, ``latencies`` each exchange's name and latency histogram sample."""
    metrics: dict[str, dict] = counter_metrics(
        "rtroute_exchange_", {**EXCHANGE_COUNTERS, "bindings_disagreements":
                              "Binding re-listings that disagreed with the event stream"},
        [({"exchange": e["name"], "vhost": vhost}, e) for e in exchanges])
    metrics["rtroute_exchange_bindings"] = {
        "help": "Bindings known", "type": "gauge",
        "samples": [({"exchange": e["name"], "vhost": vhost}, e["bindings_known"])
                    for e in exchanges if e["bindings_known"] is not None]}
    metrics["rtroute_exchange_active"] = {
        "help": "1 when this replica is the ingress queue's active consumer (it routes the "
                "exchange), 0 on a standby", "type": "gauge",
        "samples": [({"exchange": e["name"], "vhost": vhost}, int(e.get("role") == "active"))
                    for e in exchanges if e.get("role") not in (None, "sharded")]}
    metrics["rtroute_exchange_confirm_latency_seconds"] = {
        "help": "From the ingress delivery to the broker's confirm of every republish",
        "type": "histogram",
        "samples": [({"exchange": name, "vhost": vhost}, sample) for name, sample in latencies]}
    metrics.update(counter_metrics(
        "rtroute_divert_", DIVERT_COUNTERS,
        [({"divert": d["name"], "vhost": vhost}, d) for d in diverts]))
    metrics["rtroute_in_flight"] = {"help": "Ingress messages awaiting confirms",
                                    "type": "gauge", "samples": [({}, in_flight)]}
    metrics["rtroute_connects_total"] = {"help": "Broker connections made", "type": "counter",
                                         "samples": [({}, connects)]}
    metrics["rtroute_internal_errors_total"] = {
        "help": "Unexpected exceptions caught while routing (the messages were "
                "dead-lettered)", "type": "counter", "samples": [({}, internal_errors)]}
    return metrics
