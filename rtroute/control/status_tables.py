"""``rtroute status``: the ``/status`` JSON of a running rtroute process as compact, aligned
tables, in the manner of ``rabbitmqctl list_exchanges`` and ``shovel_status``.

Which process answered is read from the keys its ``/status`` has (so older processes are
recognised too): ``exchanges`` for ``rtroute run`` (a sidecar, perhaps with shovels beside it),
``catalogs`` for ``rtroute proxy``, ``shovels`` alone for ``rtroute shovel run``.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["EXCHANGE_COLUMNS", "SHOVEL_COLUMNS", "aligned", "format_status", "process_kind",
           "shovel_table"]

SIDECAR, PROXY, SHOVEL = "rtroute run", "rtroute proxy", "rtroute shovel run"

#: one row per managed exchange (``/status`` ``exchanges[]``; ``in_flight`` counts the process's
#: messages being routed, all exchanges together)
EXCHANGE_COLUMNS = ("name", "kind", "state", "role", "bindings_known", "received", "routed",
                    "unroutable", "dead_lettered", "diverted", "returned", "requeued",
                    "in_flight", "since")
DIVERT_COLUMNS = ("name", "address", "forwarding_address", "filter", "exclusive", "matched",
                  "forwarded", "dead_lettered", "unrouted")
CATALOG_COLUMNS = ("vhost", "ready", "exchanges", "error")
FOLLOWED_COLUMNS = ("vhost", "exchange", "bindings", "ready", "last_change")


def aligned(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A header line and one line per row, each column as wide as its widest cell; a cell
    that is None or empty shows as ``-``, whitespace inside a cell as one space."""
    lines = [list(columns)] + [[_cell(value) for value in row] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
                     for line in lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return " ".join(str(value).split()) or "-"


def process_kind(status: Any) -> str | None:
    """The command that runs the process whose ``/status`` this is (``rtroute run``,
    ``rtroute proxy``, ``rtroute shovel run``), None when it is no rtroute ``/status``."""
    if not isinstance(status, dict) or "healthy" not in status:
        return None
    if isinstance(status.get("exchanges"), list):
        return SIDECAR
    if isinstance(status.get("catalogs"), list):
        return PROXY
    if isinstance(status.get("shovels"), list):
        return SHOVEL
    return None


def format_status(status: dict[str, Any]) -> str:
    """The tables of ``status`` (see :func:`process_kind`; it must be one).

    Raises:
        ValueError: not the ``/status`` of an rtroute process.
    """
    kind = process_kind(status)
    if kind is None:
        raise ValueError("not the /status of an rtroute process")
    health = "healthy" if status["healthy"] else "NOT healthy"
    if kind == PROXY:
        return _proxy(status, health)
    if kind == SHOVEL:
        return "\n".join([f"{SHOVEL}: {health}", "", _shovels(status["shovels"])])
    return _sidecar(status, health)


def _sidecar(status: dict[str, Any], health: str) -> str:
    if not status["healthy"] and status.get("reason"):  # e.g. bindings still loading
        health += f": {status['reason']}"
    where = status.get("connected_to") or status.get("broker") or "?"
    out = [(f"{SIDECAR}: {health}; connection {status.get('connection', '?')} to {where} "
            f"(connects {status.get('connects', 0)}, internal errors "
            f"{status.get('internal_errors', 0)})")]
    if status.get("last_error"):
        out.append(f"last error: {status['last_error']}")
    exchanges = status["exchanges"]
    out += ["", f"Exchanges ({len(exchanges)})"]
    if exchanges:
        out.append(aligned(EXCHANGE_COLUMNS, ([ex.get(c) for c in EXCHANGE_COLUMNS]
                                              for ex in exchanges)))
    diverts = status.get("diverts") or []
    out += ["", f"Diverts ({len(diverts)})"]
    if diverts:
        out.append(aligned(DIVERT_COLUMNS, ([d.get(c) for c in DIVERT_COLUMNS]
                                            for d in diverts)))
    if "shovels" in status:
        out += ["", f"Shovels ({len(status['shovels'])})", _shovels(status["shovels"])]
    return "\n".join(out)


def _shovels(rows: list[dict[str, Any]]) -> str:
    return shovel_table(rows) if rows else "no shovels"


#: The columns of ``rabbitmqctl shovel_status`` (RabbitMQ 4.0), then rtroute's count, then
#: the columns RabbitMQ 4.3 added (appended, so the earlier ones keep their places).
SHOVEL_COLUMNS = ("name", "vhost", "type", "state", "source_protocol", "source",
                  "destination_protocol", "destination", "termination_reason", "last_changed",
                  "moved", "pending", "source_queue", "destination_queue", "remaining",
                  "remaining_unacked", "forwarded")


def shovel_table(rows: list[dict[str, Any]]) -> str:
    """The status rows as an aligned text table, one line per shovel, with the columns of
    ``rabbitmqctl shovel_status`` (:data:`SHOVEL_COLUMNS`); an empty cell shows as ``-``."""
    lines = []
    for row in rows:
        line = []
        for column in SHOVEL_COLUMNS:
            if column == "moved":
                value = row.get("counters", {}).get("moved", "")
            elif column == "termination_reason":
                value = row.get("termination_reason", row.get("reason")) or ""
            else:
                value = row.get(column, "")
            line.append(value)
        lines.append(line)
    return aligned(SHOVEL_COLUMNS, lines)


def _proxy(status: dict[str, Any], health: str) -> str:
    if not status["healthy"] and status.get("reason"):
        health += f": {status['reason']}"
    out = [f"{PROXY}: {health}; vhost {status.get('vhost', '?')}"]
    listeners = status.get("listeners")
    if listeners is not None:
        out += ["", f"Listeners ({len(listeners)})",
                aligned(("listen", "tls"), ([x.get("listen"), x.get("tls")] for x in listeners))]
    line = f"Client connections: {status.get('client_connections', 0)} open"
    if "client_connections_accepted" in status:
        line += f", {status['client_connections_accepted']} accepted"
    if "publishes_rewritten" in status:
        line += f"; publishes rewritten: {status['publishes_rewritten']}"
    out += ["", line]
    catalogs = status["catalogs"]
    out += ["", f"Catalogs ({len(catalogs)})"]
    if catalogs:
        out.append(aligned(CATALOG_COLUMNS, (
            [c.get("vhost"), c.get("ready"), c.get("exchanges"),
             c.get("failure") or c.get("last_error")] for c in catalogs)))
    followed = [[c.get("vhost"), x.get("name"), x.get("bindings"), x.get("ready"),
                 x.get("last_change")] for c in catalogs for x in c.get("followed") or []]
    out += ["", f"x-rtopic exchanges followed ({sum(c.get('exchanges') or 0 for c in catalogs)})"]
    if followed:
        out.append(aligned(FOLLOWED_COLUMNS, followed))
    refusals = status.get("refusals")
    if refusals is not None:
        out += ["", f"Refusals ({sum(refusals.values())})"]
        if refusals:
            out.append(aligned(("kind", "count"), sorted(refusals.items())))
    return "\n".join(out)
