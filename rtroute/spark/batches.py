"""The executor side of the Spark job: route Arrow record batches with the core's batch API.

Everything here runs in the executors' Python workers and needs only pyarrow (no pyspark), so it
is testable on its own. :func:`route_batches` is the function handed to ``mapInArrow``; it lives
in this importable module so that Spark pickles it by reference and the module-level matcher
cache survives from one task to the next in a reused Python worker.

Per row the router reads the routing key and the optional headers, takes ``CC``/``BCC`` the way
RabbitMQ does (:func:`rtroute.routing.extra_routing_keys`), sends every query of the batch to the
core in one ``match_many`` call (each distinct query once) and maps matched binding keys to
destinations. A row that cannot
be routed (null key, over-long key, headers of the wrong type) gets a reason in ``error`` and
nulls in ``destinations``/``delivered_headers`` instead of failing the task.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import socket
import sys
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rtroute.core import MAX_BINDING_BYTES, MAX_QUERY_BYTES, ForwardMatcher, ReverseMatcher
from rtroute.core.keys import decode_key
from rtroute.routing import EXCHANGE_TYPES, PreconditionFailed, extra_routing_keys
from rtroute.routing.rtopic_layout import ARCHIVE_KEY
from rtroute.spark.header_json import HeaderJsonError, headers_from_json, value_json

DESTINATIONS = "destinations"
DELIVERED_HEADERS = "delivered_headers"
ERROR = "error"
OUTPUT_COLUMNS = (DESTINATIONS, DELIVERED_HEADERS, ERROR)

# A key of at most this many characters is at most 4 * 63 = 252 UTF-8 bytes: no need to encode.
_SAFE_KEY_CHARS = MAX_BINDING_BYTES // 4
_SAFE_QUERY_CHARS = MAX_QUERY_BYTES // 4
# Routers kept per Python worker: a diff needs two binding sets at once.
_CACHE_SIZE = 4

Bindings = Sequence[tuple[str, str]]


def fingerprint(kind: str, bindings: Iterable[tuple[str, str]]) -> str:
    """A stable digest of an exchange kind and a binding set (order and duplicates ignored)."""
    digest = hashlib.sha256(kind.encode())
    for destination, key in sorted(set(bindings)):
        digest.update(b"\0" + destination.encode() + b"\1" + key.encode())
    return digest.hexdigest()[:32]


class _NoMatch:
    """A matcher that finds nothing: the benchmark's measure of Spark's own cost."""

    def match_many(self, queries: Sequence[str]) -> list[list[str]]:
        return [[] for _ in queries]


class _KeySetMatcher:
    """Equality against a set of keys: the direct exchange."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = frozenset(keys)

    def match_many(self, queries: Sequence[str]) -> list[list[str]]:
        keys = self._keys
        return [[q] if q in keys else [] for q in queries]


class _EveryKeyMatcher:
    """Every binding key for every query: the fanout exchange."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = list(keys)

    def match_many(self, queries: Sequence[str]) -> list[list[str]]:
        return [self._keys for _ in queries]


def _check_kind(kind: str) -> None:
    if kind not in EXCHANGE_TYPES:
        raise ValueError(
            f"unknown exchange kind {kind!r}; expected one of {', '.join(EXCHANGE_TYPES)}")


def _by_key(kind: str, bindings: Bindings) -> dict[str, set[str]]:
    """Each binding key's destinations, every destination and key checked (see
    :class:`BatchRouter`'s errors)."""
    by_key: dict[str, set[str]] = {}
    for destination, key in bindings:
        if key == ARCHIVE_KEY and kind == "rtopic":
            continue  # an archive stream's binding (rtopic_layout): never a destination
        decode_key(destination, MAX_BINDING_BYTES, "destination")
        by_key.setdefault(decode_key(key, MAX_BINDING_BYTES, "binding key"), set()).add(
            destination)
    return by_key


def check_bindings(kind: str, bindings: Bindings) -> None:
    """Raises what ``BatchRouter(kind, bindings)`` would raise, without building a router
    (the driver's check before its tasks build theirs).

    Raises:
        ValueError: an unknown kind, or a binding key the core refuses (over 255 bytes).
        TypeError: a destination or key that is not a string.
    """
    _check_kind(kind)
    _by_key(kind, bindings)


def _matcher_for(kind: str, keys: Iterable[str]) -> Any:
    _check_kind(kind)
    if kind == "direct":
        return _KeySetMatcher(keys)
    if kind == "fanout":
        return _EveryKeyMatcher(keys)
    matcher = ReverseMatcher() if kind == "rtopic" else ForwardMatcher()
    for key in keys:
        matcher.add(key)
    return matcher


class BatchRouter:
    """Routes record batches against one binding set with the core's batch API.

    Args:
        kind: rtopic, topic, direct or fanout (the semantics of :mod:`rtroute.routing`).
        bindings: ``(destination, binding_key)`` pairs.
        noop: match nothing (Spark's ceiling in the benchmark); the rest of the work is the same.
        matcher: used instead of the core's matcher: any object whose ``match_many(queries)``
            returns, per query, the matching binding keys (the benchmark's Python baselines
            plug in here, so that everything but the matching is the same work).

    Raises:
        ValueError: an unknown kind, or a binding key the core refuses (over 255 bytes).
        TypeError: a destination or key that is not a string.
    """

    def __init__(self, kind: str, bindings: Bindings, noop: bool = False,
                 matcher: Any = None) -> None:
        by_key = _by_key(kind, bindings)
        self.kind = kind
        if matcher is not None:
            self._matcher = matcher
        else:
            self._matcher = _NoMatch() if noop else _matcher_for(kind, by_key)
        self._destinations = {key: sorted(dests) for key, dests in by_key.items()}

    def route_batch(self, batch: pa.RecordBatch, key_column: str = "routing_key",
                    headers_column: str | None = "headers") -> pa.RecordBatch:
        """Returns ``batch`` with ``destinations``, ``delivered_headers`` and ``error`` appended.

        ``headers_column`` may be None or absent from the batch (no headers on any row); see
        :func:`decode_headers` for the accepted column types.
        """
        n = batch.num_rows
        keys, errors = _routing_keys(batch.column(key_column))
        if headers_column is not None and headers_column in batch.schema.names \
                and batch.column(headers_column).null_count < n:
            headers, header_errors = decode_headers(batch.column(headers_column))
            errors = [e or h for e, h in zip(errors, header_errors)]
        else:
            headers = [None] * n
        # Most rows have neither headers nor errors: one query each, no per-row Python loop.
        special = [i for i, (h, e) in enumerate(zip(headers, errors)) if h or e]
        extras: dict[int, list[str]] = {}
        for i in special:
            if errors[i] is None:
                extra = _extra_queries(headers[i])
                if isinstance(extra, str):
                    errors[i] = extra
                elif extra:
                    extras[i] = extra
        failed = any(errors)
        valid = [k for k, e in zip(keys, errors) if e is None] if failed else keys
        found = self._destinations_by_query(valid + list(chain.from_iterable(extras.values())))
        if failed:
            destinations = [None if e else found[k] for k, e in zip(keys, errors)]
        else:
            destinations = [found[k] for k in keys]
        for i, extra in extras.items():
            destinations[i] = sorted(set(found[keys[i]]).union(*(found[q] for q in extra)))
        columns = list(batch.columns) + [
            _list_array(destinations),
            _headers_array(headers, errors),
            pa.array(errors, pa.string()),
        ]
        names = list(batch.schema.names) + list(OUTPUT_COLUMNS)
        return pa.RecordBatch.from_arrays(columns, names=names)

    def _destinations_by_query(self, queries: list[str]) -> dict[str, list[str]]:
        """Each distinct query's sorted destinations, from one core call for the batch (an
        archive repeats its routing keys, so a batch has far fewer distinct queries than rows).
        """
        destinations_of = self._destinations.__getitem__
        distinct = list(dict.fromkeys(queries))
        found: dict[str, list[str]] = {}
        for query, keys in zip(distinct, self._matcher.match_many(distinct)):
            if len(keys) == 1:
                found[query] = destinations_of(keys[0])
            else:  # the lists are shared between rows: never mutated
                found[query] = sorted(set(chain.from_iterable(map(destinations_of, keys))))
        return found


def _routing_keys(column: pa.Array) -> tuple[list[Any], list[str | None]]:
    """The routing keys as ``str`` and, per row, None or why the key is unusable.

    A string column is checked in Arrow (nulls, UTF-8 length over 255 bytes), so only the bad
    rows cost Python work; a binary column is decoded row by row.
    """
    keys = column.to_pylist()
    errors: list[str | None] = [None] * len(keys)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        too_long = pc.greater(pc.binary_length(column), MAX_BINDING_BYTES)
        bad = pc.or_kleene(column.is_null(), too_long).fill_null(True)
        suspects = pc.indices_nonzero(bad).to_pylist() if pc.any(bad).as_py() else []
    else:
        suspects = range(len(keys))
    for i in suspects:
        key = keys[i]
        if isinstance(key, bytes):
            try:
                key = keys[i] = key.decode("utf-8")
            except UnicodeDecodeError:
                pass  # decode_key reports it
        errors[i] = _check_routing_key(key)
    return keys, errors


def _check_routing_key(key: Any) -> str | None:
    """None if ``key`` is a routing key RabbitMQ accepts, else the reason."""
    if key is None:
        return "routing key is null"
    if isinstance(key, str) and len(key) <= _SAFE_KEY_CHARS:
        return None
    try:
        decode_key(key, MAX_BINDING_BYTES, "routing key")
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def _extra_queries(headers: Mapping[str, Any]) -> Any:
    """The CC then BCC keys of one row, or the reason the row cannot be published (a str)."""
    if not isinstance(headers, Mapping):
        return f"headers must be a table (a JSON object), not {type(headers).__name__}"
    try:
        cc, bcc = extra_routing_keys(headers)
    except PreconditionFailed as exc:
        return f"406 PRECONDITION_FAILED - {exc}"
    extra = cc + bcc
    for key in extra:
        if len(key) > _SAFE_QUERY_CHARS:
            try:
                decode_key(key, MAX_QUERY_BYTES, "CC/BCC key")
            except ValueError as exc:
                return str(exc)
    return extra


def decode_headers(column: pa.Array) -> tuple[list[Any], list[str | None]]:
    """The headers of each row as a dict (None when null) and a per-row decoding error.

    Accepted column types: a JSON string (or binary) holding an object, which keeps value types
    exactly (a ``CC`` that is a string is RabbitMQ's 406; the typed values a drain writes, see
    :mod:`rtroute.spark.header_json`); a struct; a map. In a struct or a map a null value means
    the header is absent (a struct has a slot for every field in every row).

    Raises:
        TypeError: any other column type (a schema error, not a row error).
    """
    kind = column.type
    values = column.to_pylist()
    errors: list[str | None] = [None] * len(values)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind) \
            or pa.types.is_large_binary(kind):
        out = []
        for i, text in enumerate(values):
            if text is None:
                out.append(None)
                continue
            try:
                decoded = headers_from_json(text)
            except HeaderJsonError as exc:
                errors[i] = str(exc)
                out.append(None)
                continue
            if not isinstance(decoded, dict):
                errors[i] = f"headers must be a JSON object, not {type(decoded).__name__}"
                decoded = None
            out.append(decoded)
        return out, errors
    if pa.types.is_struct(kind):
        return [None if v is None else {k: x for k, x in v.items() if x is not None}
                for v in values], errors
    if pa.types.is_map(kind):
        return [None if v is None else {k: x for k, x in v if x is not None}
                for v in values], errors
    raise TypeError(f"headers column must be a JSON string, a struct or a map, not {kind}")


def header_text(value: Any) -> str:
    """A delivered header value as text: a string as is, anything else as compact JSON that
    keeps its AMQP type (:func:`rtroute.spark.header_json.value_json`)."""
    if isinstance(value, str):
        return value
    return value_json(value)


def _list_array(lists: list[list[str] | None]) -> pa.Array:
    mask = _null_mask(lists)
    if mask is not None:
        lists = [item or [] for item in lists]
    offsets = pa.array([0, *accumulate(map(len, lists))], pa.int32())
    values = pa.array(list(chain.from_iterable(lists)), pa.string())
    return pa.ListArray.from_arrays(offsets, values, mask=mask)


def _headers_array(headers: list[Any], errors: list[str | None]) -> pa.Array:
    counts = [0] * len(headers)
    names: list[str] = []
    texts: list[str] = []
    for i, (h, error) in enumerate(zip(headers, errors)):
        if h and error is None:
            for name, value in h.items():
                if name != "BCC":
                    names.append(name if isinstance(name, str)
                                 else name.decode("utf-8", "replace"))  # not UTF-8
                    texts.append(header_text(value))
                    counts[i] += 1
    return pa.MapArray.from_arrays(pa.array([0, *accumulate(counts)], pa.int32()),
                                   pa.array(names, pa.string()), pa.array(texts, pa.string()),
                                   mask=_null_mask([None if e else True for e in errors]))


def _null_mask(values: list[Any]) -> pa.Array | None:
    mask = [v is None for v in values]
    return pa.array(mask) if any(mask) else None


@dataclass(frozen=True)
class RoutePlan:
    """What a Spark task needs to route its batches; small, pickled into every task.

    The binding set itself travels in a Spark broadcast (``bindings``, whose ``.value`` is the
    list of pairs); ``fingerprint`` names it in the per-worker cache, so a worker that already
    built this router never reads the broadcast again.
    """

    kind: str
    fingerprint: str
    bindings: Any
    key_column: str = "routing_key"
    headers_column: str | None = "headers"
    noop: bool = False
    builds: Any = None  # a Spark accumulator counting routers built, or None
    rows: Any = None  # a Spark accumulator counting rows routed, or None
    workers: Any = None  # a Spark accumulator of the "host:pid" of each routing worker, or None
    cores: Any = None  # a Spark accumulator of each routing worker's core_in_use(), or None


class SetUnion:
    """The accumulator parameter of :attr:`RoutePlan.workers` (sets, merged by union).

    Duck-typed ``pyspark.AccumulatorParam``: it lives here, importable without pyspark, because
    the executors unpickle it.
    """

    def zero(self, value: set) -> set:
        return set()

    def addInPlace(self, value1: set, value2: set) -> set:
        value1 |= value2
        return value1


class PackedPairs:
    """Binding pairs packed small for pickling: one zlib-compressed text, unpacked by
    ``.value`` (as a broadcast's). A Python data source's class, which carries its plan, is
    pickled on the driver, handed to the JVM and unpickled by every task; 10,000 pairs
    pickle to about 300 kB as tuples, about a third of that packed, and a task whose worker already
    built the router (by the plan's fingerprint) never unpacks them."""

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        self._packed = zlib.compress(pickle.dumps(list(pairs), pickle.HIGHEST_PROTOCOL), 1)

    @property
    def value(self) -> list[tuple[str, str]]:
        return pickle.loads(zlib.decompress(self._packed))


_ROUTERS: OrderedDict[tuple[str, bool], BatchRouter] = OrderedDict()


def router_for(plan: RoutePlan) -> BatchRouter:
    """The worker's router for ``plan``'s binding set, built on first use and then cached."""
    cache_key = (plan.fingerprint, plan.noop)
    router = _ROUTERS.get(cache_key)
    if router is None:
        bindings = plan.bindings.value if hasattr(plan.bindings, "value") else plan.bindings
        router = BatchRouter(plan.kind, bindings, noop=plan.noop)
        _ROUTERS[cache_key] = router
        while len(_ROUTERS) > _CACHE_SIZE:
            _ROUTERS.popitem(last=False)
        if plan.builds is not None:
            plan.builds.add(1)
    else:
        _ROUTERS.move_to_end(cache_key)
    return router


def core_in_use() -> str:
    """Which core this Python routes with, and from where: ``native core <module file> (python
    <interpreter>)``, or ``reference ...`` for the pure-Python twin."""
    from rtroute import core

    module = sys.modules[ReverseMatcher.__module__]
    return f"{core.IMPLEMENTATION} core {module.__file__} (python {sys.executable})"


def route_batches(batches: Iterator[pa.RecordBatch], plan: RoutePlan
                  ) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: route each batch of a partition (bind ``plan`` first)."""
    router = router_for(plan)
    if plan.workers is not None:
        plan.workers.add({f"{socket.gethostname()}:{os.getpid()}"})
    if plan.cores is not None:
        plan.cores.add({core_in_use()})
    for batch in batches:
        routed = router.route_batch(batch, plan.key_column, plan.headers_column)
        if plan.rows is not None:
            plan.rows.add(batch.num_rows)
        yield routed

