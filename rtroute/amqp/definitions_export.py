"""A vhost's bindings from one definitions export, shared by the listings asked for meanwhile.

``GET /api/definitions/VHOST`` (an administrator's request) answers from the broker's tables
without the per-binding work of a bindings listing: measured on RabbitMQ 4.3.6 here, 100,000
bindings of one exchange in 0.3-0.4 s, against 1.8-2.6 s for the exchange's own listing
(``bindings/source``, with or without ``columns``). But the export is a faithful listing only
where it keeps every binding: RabbitMQ 3.10.8 and 4.0.5 leave out the bindings whose destination
is an exclusive queue (what most consumers bind), 4.3.6 keeps them (checked by
``tests/amqp/test_definitions_export.py`` on each broker). So it is used from
:data:`EXPORT_FROM` on, by a user the API lets export (an administrator); anywhere else the
exchange's listing is used, as before.

An export costs the whole vhost, so it is used for an exchange that holds at least half of
the vhost's bindings by the last export (or its own last listing), or before the vhost's
first export: a proxy following thousands of small exchanges lists each of them, after one
export told their sizes. One export serves every listing of the vhost asked for before it
started (those waiting at once for the same export form a batch). A listing is
never served by an export that started before it was asked for (the gap-free rule of
:class:`~rtroute.amqp.binding_watcher.BindingWatcher`: the listing must be taken after the
watcher's event subscription): the listings asked for while no export runs form a batch, and
the batch's export starts only once the batch is closed.

The export's text is read whole (as a listing's is), then its ``bindings`` array is parsed one
binding at a time; only the bindings of the exchanges asked for are kept, as tuples.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from typing import Any

from rtroute.amqp.management_listing import ListingProgress, array_items, skip_space

__all__ = ["EXPORT_FROM", "BindingRow", "DefinitionsExports", "ExportRefused", "exported_bindings"]

# the first RabbitMQ version whose definitions export keeps the bindings to exclusive queues
# (4.3.6 does; 3.10.8 and 4.0.5 leave them out; versions between were not checked)
EXPORT_FROM = (4, 3)

# (destination, destination_type, routing_key, arguments)
BindingRow = tuple[str, str, str, dict[str, Any]]


class ExportRefused(Exception):
    """The API refused the export (the user is no administrator)."""


class _Batch:
    """The listings of one vhost asked for while no export of it had started."""

    __slots__ = ("done", "error", "exchanges", "refused", "rows", "sources")

    def __init__(self) -> None:
        self.sources: set[str] = set()
        self.done = threading.Event()
        self.rows: dict[str, list[BindingRow]] = {}
        self.exchanges: set[str] = set()  # those of ``sources`` that exist
        self.error: Exception | None = None
        self.refused = False


def exported_bindings(payload: bytes, sources: Iterable[str],
                      counts: dict[str, int] | None = None
                      ) -> tuple[dict[str, list[BindingRow]], set[str]]:
    """The bindings of ``sources`` in a vhost's definitions export (its JSON text), and which
    of ``sources`` the export names as exchanges; ``counts``, if given, gets how many bindings
    each source exchange of the vhost has.

    Raises:
        ValueError: ``payload`` is not a definitions export.
    """
    wanted = set(sources)
    rows: dict[str, list[BindingRow]] = {source: [] for source in wanted}
    exchanges: set[str] = set()
    text = payload.decode("utf-8")
    decode = json.JSONDecoder().raw_decode
    at = skip_space(text, 0)
    if text[at:at + 1] != "{":
        raise ValueError("not a JSON object")
    at = skip_space(text, at + 1)
    while text[at:at + 1] != "}":
        key, at = decode(text, at)
        at = skip_space(text, at)
        if text[at:at + 1] != ":":
            raise ValueError(f"expected ':' at {at}")
        at = skip_space(text, at + 1)
        if key == "bindings":
            end = None
            for binding, end in array_items(text, at):
                source = binding["source"]
                if counts is not None:
                    counts[source] = counts.get(source, 0) + 1
                if source in wanted and binding.get("destination_type") in ("queue", "exchange"):
                    rows[source].append((binding["destination"], binding["destination_type"],
                                         binding["routing_key"], binding.get("arguments") or {}))
            # after the last item's ']' (an empty array: after its own)
            at = end if end is not None else skip_space(text, at + 1) + 1
        elif key == "exchanges":
            value, at = decode(text, at)
            exchanges.update(x["name"] for x in value if x.get("name") in wanted)
        else:
            _value, at = decode(text, at)
        at = skip_space(text, at)
        if text[at:at + 1] == ",":
            at = skip_space(text, at + 1)
        elif text[at:at + 1] != "}":
            raise ValueError(f"expected ',' or '}}' at {at}")
    return rows, exchanges


class DefinitionsExports:
    """The definitions exports of one management API, batched per vhost (see the module).

    Args:
        fetch: ``fetch(vhost, progress)`` -> the export's bytes; raises :class:`ExportRefused`
            when the API refuses it, anything else when it fails.
        version: ``version()`` -> the broker's version as a tuple (asked once, at first use).
    """

    def __init__(self, fetch: Callable[[str, ListingProgress], bytes],
                 version: Callable[[], tuple[int, ...]]) -> None:
        self._fetch = fetch
        self._version = version
        self._usable: bool | None = None  # None: not known yet
        self._lock = threading.Lock()
        self._waiting: dict[str, _Batch] = {}
        self._running: dict[str, threading.Lock] = {}
        # per vhost, from its last export: its bindings, and each source exchange's
        self._sizes: dict[str, tuple[int, dict[str, int]]] = {}

    @property
    def usable(self) -> bool:
        """Whether exports are tried: the broker keeps every binding in them, and the API has
        not refused one."""
        if self._usable is None:
            try:
                self._usable = tuple(self._version()[:2]) >= EXPORT_FROM
            except Exception:  # noqa: BLE001 - unknown: the listings do
                return False
        return self._usable

    def bindings(self, vhost: str, source: str, progress: ListingProgress
                 ) -> list[BindingRow] | None:
        """The bindings whose source is the exchange ``source`` of ``vhost``, from an export
        started after this call; None: exports are not used (list the exchange instead).

        Raises:
            LookupError: the export names no exchange ``source``.
            Exception: the export failed (what ``fetch`` raised).
        """
        if not self.usable or not self._worth(vhost, source, progress.expected):
            return None
        with self._lock:
            batch = self._waiting.get(vhost)
            if batch is None:
                batch = self._waiting[vhost] = _Batch()
            batch.sources.add(source)
            running = self._running.setdefault(vhost, threading.Lock())
        with running:  # one export of a vhost at a time; the next batch gathers meanwhile
            if not batch.done.is_set():
                with self._lock:  # closed: later listings form the next batch
                    if self._waiting.get(vhost) is batch:
                        del self._waiting[vhost]
                self._export(vhost, batch, progress)
        if batch.refused:
            return None
        if batch.error is not None:
            raise batch.error
        if source not in batch.exchanges:
            raise LookupError(f"no exchange {source!r} in vhost {vhost!r}")
        progress.total = len(batch.rows.get(source, ()))
        return batch.rows.get(source, [])

    def _worth(self, vhost: str, source: str, expected: int | None) -> bool:
        """Whether an export is worth it for one exchange's listing: the vhost was never
        exported, or the exchange holds at least half of its bindings (by the last export, or
        by its own last listing). An export costs the whole vhost: a proxy that follows 3,000
        small exchanges lists each (after one export tells their sizes), not 3,000 exports."""
        sizes = self._sizes.get(vhost)
        if sizes is None:
            return True
        total, counts = sizes
        size = max(counts.get(source, 0), expected or 0)
        return size > 0 and 2 * size >= total

    def _export(self, vhost: str, batch: _Batch, progress: ListingProgress) -> None:
        try:
            payload = self._fetch(vhost, progress)
            counts: dict[str, int] = {}
            batch.rows, batch.exchanges = exported_bindings(payload, batch.sources, counts)
            self._sizes[vhost] = (sum(counts.values()), counts)
        except ExportRefused:
            self._usable = False
            batch.refused = True
        except Exception as exc:  # noqa: BLE001 - each listing of the batch raises it
            batch.error = exc
        finally:
            batch.done.set()
