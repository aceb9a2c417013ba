"""Decides what happens to each ingress message of one managed exchange. Pure logic, no I/O.

:class:`ExchangeRouter` serves ``rtopic`` exchanges; :class:`BrokerRoutedRouter` the
``topic``, ``direct``, ``fanout`` and ``headers`` exchanges that the sidecar manages for their
diverts, where RabbitMQ itself routes on ``NAME.bindings``.

For rtopic, per message: route the routing key, the ``CC`` entries and the BCC-alias entries (RabbitMQ
strips a publisher's ``BCC`` before the ingress queue stores the message, so rtopic publishers
put their blind copies in an alias header, ``x-rtroute-bcc`` by default) with the core; then
plan the republishes (:mod:`rtroute.routing.delivery_plan`). A message that cannot be routed as
published is dead-lettered with the reason; one that matches nothing is unroutable.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from rtroute.core import MAX_BINDING_BYTES, MAX_QUERY_BYTES, ForwardMatcher, RTopicTable
from rtroute.core.keys import decode_key
from rtroute.core.plain_table import encode_plain_entries
from rtroute.routing import PreconditionFailed, extra_routing_keys
from rtroute.routing.delivery_plan import Destination, Publish, bcc_fits, plan_delivery
from rtroute.routing.rtopic_layout import ARCHIVE_KEY

__all__ = ["DEFAULT_BCC_ALIAS", "DEFAULT_FRAME_MAX", "ERROR_HEADER", "FRAME_OVERHEAD",
           "BrokerRoutedRouter", "Decision", "ExchangeRouter", "field_table_size"]

DEFAULT_BCC_ALIAS = "x-rtroute-bcc"
ERROR_HEADER = "x-rtroute-error"
# A header frame is at most frame_max (128 KiB on RabbitMQ by default); leave room for the
# frame and property overhead and the message's own headers (subtracted per message).
DEFAULT_FRAME_MAX = 131072
# literal keys' decisions kept across batches (see ExchangeRouter._literal); when full, the
# cache starts over
LITERAL_CACHE = 16_384
FRAME_OVERHEAD = 1024


@dataclass
class Decision:
    """The outcome for one ingress message.

    Attributes:
        publishes: the republishes to make (empty: nothing to publish).
        headers: the headers every republish carries (alias removed, everything else as is).
        error: why the message is dead-lettered, or None.
        unroutable: no binding matched.
        keys: the binding keys matched, as the core returned them.
    """

    publishes: list[Publish] = field(default_factory=list)
    headers: dict = field(default_factory=dict)
    error: str | None = None
    unroutable: bool = False
    keys: Sequence[str] = ()
    #: when set, ``keys`` are not listed yet: this lists them (the planner picks keys per
    #: destination without listing every matched key; only a caller that asks pays for it)
    list_keys: Callable[[], Sequence[str]] | None = field(default=None, repr=False,
                                                          compare=False)

    @cached_property
    def matched(self) -> tuple[str, ...]:
        """The distinct binding keys matched, sorted (computed when first asked: the
        sidecar does not ask, and a decision shared by a batch computes it once)."""
        keys = self.keys if self.list_keys is None else self.list_keys()
        return tuple(sorted(set(keys)))


def field_table_size(value: Any) -> int:
    """An upper bound of the AMQP 0-9-1 encoded size of a header value (or table); exact for
    a plain ``dict`` table (see :mod:`rtroute.core.plain_table`) and for a table that knows
    its ``wire_size`` (the sidecar's :class:`~rtroute.sidecar.ingress.RoutingHeaders`, which
    holds only a few entries)."""
    if type(value) is dict:  # most tables: their exact size, encoded natively in one pass
        plain = encode_plain_entries(value)
        if plain is not None:
            return 4 + len(plain)
    wire_size = getattr(value, "wire_size", None)
    if wire_size is not None:
        return wire_size
    size = 0
    stack = [value]  # iterative: a table may nest deeper than Python's recursion limit
    while stack:
        value = stack.pop()
        if isinstance(value, Mapping):
            size += 4
            for k, v in value.items():
                size += 1 + len(str(k).encode("utf-8", "surrogatepass")) + 1
                stack.append(v)
        elif isinstance(value, (list, tuple)):
            size += 4 + len(value)
            stack.extend(value)
        elif isinstance(value, str):
            size += 4 + len(value.encode("utf-8", "surrogatepass"))
        elif isinstance(value, (bytes, bytearray)):
            size += 4 + len(value)
        else:
            size += 9
    return size


class ExchangeRouter:
    """Bindings and routing decisions for one managed exchange ``NAME``.

    Args:
        name: the exchange publishers publish to.
        kind: ``rtopic`` (see :class:`BrokerRoutedRouter` for the others).
        bcc_alias: the header carrying BCC entries past RabbitMQ's ingress (stripped on delivery).
        alternate_exchange: where unroutable messages go (declared as the alternate exchange of
            ``NAME.bindings``, so publishing there unrouted reaches it).
        frame_max: the negotiated frame size that bounds one publish's BCC list.
        bindings_type: the type of ``NAME.bindings`` (``topic`` or ``direct``; see
            :func:`rtroute.routing.delivery_plan.bindings_exchange_type`): on a topic exchange
            RabbitMQ treats a bound key's literal ``*``/``#`` words as wildcards. It may be
            set later (once the broker said which type the exchange has).
        by_matched_key: publish a message that matched one binding key with that key as
            its routing key instead of a ``BCC`` (see
            :func:`rtroute.routing.delivery_plan.plan_delivery`).
    """

    def __init__(self, name: str, kind: str = "rtopic", bcc_alias: str = DEFAULT_BCC_ALIAS,
                 alternate_exchange: str | None = None,
                 frame_max: int = DEFAULT_FRAME_MAX, bindings_type: str = "topic",
                 by_matched_key: bool = False) -> None:
        self.name = name
        self.by_matched_key = by_matched_key
        self.bindings_type = bindings_type
        self.bindings_exchange = f"{name}.bindings"
        self.bcc_alias = bcc_alias
        self.alternate_exchange = alternate_exchange
        self.frame_max = frame_max
        if kind != "rtopic":
            raise ValueError(f"ExchangeRouter routes rtopic exchanges, not {kind!r} (see "
                             "BrokerRoutedRouter)")
        # the binding keys with their destinations, and the planner (src_c/reach.h): the one
        # copy of the bindings in this process
        self._table = RTopicTable()
        # bind/unbind run in the owner's thread; bindings() may be called from any other
        self._table_lock = threading.Lock()
        # bound keys holding '*'/'#' words: RabbitMQ's topic NAME.bindings treats them as
        # wildcards, so the planner must know what they catch
        self._wildcards = ForwardMatcher()
        # destinations bound with ARCHIVE_KEY: archive streams, which a proxy reaches by that
        # key in every BCC; never a destination of routing (rtroute.routing.rtopic_layout)
        self._archives: set[Destination] = set()
        # a literal key published without headers -> its (read-only) decision, which only
        # whether the key is bound decides: dropped when that changes (bind, unbind,
        # take_bindings), emptied when the exchanges the decision names change
        self._literals: dict[str, Decision] = {}
        self._literals_for = (self.bindings_exchange, alternate_exchange)

    # -- bindings (fed by the binding watcher or the static config) --------------------------
    def bind(self, destination: Destination, key: str) -> bool:
        """Adds a binding of ``destination`` ("queue"|"exchange", name) with ``key``."""
        destination = _check_destination(destination)
        if key == ARCHIVE_KEY:
            with self._table_lock:
                added = destination not in self._archives
                self._archives.add(destination)
            return added
        with self._table_lock:
            added = self._table.bind(destination, key)
            if added:  # under the lock: a decision _literal is making is stored before this
                self._literals.pop(key, None)
        if added and _has_wildcard(key) and len(self._table.destinations(key)) == 1:
            self._wildcards.add(key)
        return added

    def unbind(self, destination: Destination, key: str) -> bool:
        """Removes one binding; returns False if it was not known."""
        if key == ARCHIVE_KEY:
            with self._table_lock:
                removed = destination in self._archives
                self._archives.discard(destination)
            return removed
        with self._table_lock:
            removed = self._table.unbind(destination, key)
            if removed:
                self._literals.pop(key, None)
        if removed and _has_wildcard(key) and not self._table.destinations(key):
            self._wildcards.remove(key)
        return removed

    def take_bindings(self, fresh: ExchangeRouter) -> None:
        """Makes the bindings of ``fresh`` (a router of the same exchange, filled from a
        listing in another thread) this router's, keeping those this one has that ``fresh``
        lacks (learned since that listing was read): the union, as binding each of ``fresh``'s
        here would give, without a call per binding in the owner's thread. ``fresh`` is not
        to be used afterwards."""
        for destination, key in self.bindings():  # the archives' too
            fresh.bind(destination, key)
        with self._table_lock:
            self._table, self._wildcards, self._archives = \
                fresh._table, fresh._wildcards, fresh._archives
            self._literals.clear()

    def destinations_of(self, key: str) -> set[Destination]:
        """Where RabbitMQ's ``NAME.bindings`` delivers a publish routed with ``key``."""
        table = self._table
        found = set(table.destinations(key))
        if len(self._wildcards) and self.bindings_type == "topic":
            for wildcard in self._wildcards.match(key):
                found.update(table.destinations(wildcard))
        return found

    def replace_bindings(self, bindings: Sequence[tuple[Destination, str]]) -> None:
        """Makes the known bindings exactly ``bindings`` (after a full re-listing)."""
        wanted = set(bindings)
        with self._table_lock:
            current = set(self._table.items())
            current.update((dest, ARCHIVE_KEY) for dest in self._archives)
        for dest, key in current - wanted:
            self.unbind(dest, key)
        for dest, key in wanted - current:
            self.bind(dest, key)

    def bindings(self) -> list[tuple[Destination, str]]:
        """Every known ``((type, name), key)``, sorted. Safe from another thread while the
        owner binds (status pages, a publisher's caller)."""
        with self._table_lock:
            known = list(self._table.items())
            known.extend((dest, ARCHIVE_KEY) for dest in self._archives)
        return sorted(known)

    def binding_count(self) -> int:
        """How many bindings are known (cheap, from any thread)."""
        return self._table.binding_count() + len(self._archives)

    def archived_to(self, destination: Destination) -> bool:
        """Whether ``destination`` is bound with :data:`ARCHIVE_KEY` (an archive stream)."""
        return destination in self._archives

    # -- decisions ------------------------------------------------------------------------
    def decide(self, routing_key: Any, headers: Mapping[str, Any] | None = None) -> Decision:
        """Decides one message (:meth:`decide_many` of one, without a batch's bookkeeping: the
        proxy decides each message as it arrives); a bad one gets ``error``, never raises."""
        try:
            delivered, cc, queries, size = self._parse(routing_key, headers)
        except (PreconditionFailed, TypeError, ValueError) as exc:
            return Decision(headers=dict(headers or {}), error=str(exc))
        return self._decision(queries[0], {} if delivered is None else delivered, cc,
                              self._plan(queries, 1 + len(cc)), size)

    def decide_keys(self, routing_key: str, cc: Sequence[str], bcc: Sequence[str],
                    headers_size: int) -> Decision:
        """:meth:`decide` for a message whose ``CC`` and ``BCC`` string arrays were read from
        its frame (the BCC alias's entries after ``BCC``'s: see rtroute.core.headers) and whose
        headers table takes ``headers_size`` bytes; the decision's ``headers`` are left empty
        (the frame keeps them). A bad key gets ``error``, never raises."""
        try:
            routing_key = decode_key(routing_key, MAX_BINDING_BYTES, "routing key")
            queries = (routing_key, *[decode_key(k, MAX_QUERY_BYTES, "CC/BCC entry")
                                      for k in (*cc, *bcc)])
        except (TypeError, ValueError) as exc:
            return Decision(error=str(exc))
        return self._decision(routing_key, {}, list(cc), self._plan(queries, 1 + len(cc)),
                              headers_size)

    def plan_bcc(self, routing_key: str, cc: Sequence[str], bcc: Sequence[str],
                 headers_size: int) -> tuple[str, ...] | None:
        """The ``BCC`` of the one publish that :meth:`decide_keys` decides for a message whose
        routing key and ``CC``/``BCC`` entries are ASCII (read from its frame), without building
        the decision: the proxy's common path. None when that decision is something else (an
        entry too long, a plan that takes several publishes or another routing key, a topic
        ``NAME.bindings`` holding wildcard keys): ask :meth:`decide_keys` then."""
        if self.by_matched_key or self._legacy():
            return None
        if len(routing_key) > MAX_BINDING_BYTES or any(len(k) > MAX_QUERY_BYTES
                                                       for k in (*cc, *bcc)):
            return None
        chosen = self._table.plan((routing_key, *cc, *bcc), 1 + len(cc), False)[0]
        if not bcc_fits(chosen, self.frame_max - FRAME_OVERHEAD - headers_size):
            return None
        return tuple(chosen)

    def routes_as_published(self, routing_key: bytes | str) -> bool:
        """Whether a message with this routing key and no ``CC``, ``BCC`` or alias header is
        published to ``NAME.bindings`` as it is (no ``BCC``, its own key), without planning:
        a key with no ``*``/``#`` (its rtopic match is the key itself, bound or not) on a
        ``NAME.bindings`` that routes it to exactly that key's destinations (direct, or topic
        holding no wildcard keys), unless ``by_matched_key``. The proxy's and the publisher's
        literal keys take this (10,000 keys in turn defeat every cache of plans). False says
        only: plan it."""
        marks = (b"*", b"#") if type(routing_key) is bytes else ("*", "#")
        return marks[0] not in routing_key and marks[1] not in routing_key and \
            not self.by_matched_key and not self._legacy()

    def decide_many(self, messages: Sequence[tuple[str, Mapping[str, Any] | None]]
                    ) -> list[Decision]:
        """Decides each ``(routing_key, headers)``; bad messages get ``error``, never raise.

        Identical queries in one batch are matched once, and messages without headers that
        publish the same routing key share one (read-only) :class:`Decision`.
        """
        if len(messages) == 1:
            return [self.decide(*messages[0])]
        decisions: list[Decision | None] = [None] * len(messages)
        # (the publish's keys, how many of them RabbitMQ routes literally: the routing key and
        # CC) -> its index among the plans
        groups: dict[tuple[tuple[str, ...], int], int] = {}
        # (index, query's index, routing key, delivered headers or None for none, CC, size of
        # the headers table)
        valid: list[tuple[int, int, str, dict | None, list[str], int]] = []
        # a str key published without headers, seen before in this batch -> its query's index;
        # the messages that repeat it (a batch often holds many of one key) take its decision
        plain: dict[str, int] = {}
        repeats: list[tuple[int, int]] = []
        # a literal key without headers is published as it is (routes_as_published): its
        # decision is made without planning, and shared by its repeats (see _literal)
        literal = self.routes_as_published("")
        if literal and self._literals_for != (self.bindings_exchange, self.alternate_exchange):
            self._literals.clear()
            self._literals_for = (self.bindings_exchange, self.alternate_exchange)
        cached = self._literals
        # messages whose headers (a dict) hold no CC, BCC or alias: planned as their key
        # alone (shared with the batch), then given their headers (see _dressed)
        dressed: list[tuple[int, str, dict]] = []
        alias = self.bcc_alias
        for i, (routing_key, headers) in enumerate(messages):
            if headers is not None and type(headers) is dict and type(routing_key) is str \
                    and "CC" not in headers and "BCC" not in headers \
                    and alias not in headers:
                dressed.append((i, routing_key, headers))
                headers = None
            if headers is None and type(routing_key) is str:
                group = plain.get(routing_key)
                if group is not None:
                    repeats.append((i, group))
                    continue
                if literal and "*" not in routing_key and \
                        "#" not in routing_key and routing_key.isascii() and \
                        len(routing_key) <= MAX_BINDING_BYTES:
                    decision = cached.get(routing_key)
                    decisions[i] = decision if decision is not None else \
                        self._literal(routing_key)
                    continue
            try:
                delivered, cc, queries, size = self._parse(routing_key, headers)
            except (PreconditionFailed, TypeError, ValueError) as exc:
                decisions[i] = Decision(headers=dict(headers or {}), error=str(exc))
                continue
            group = groups.setdefault((queries, 1 + len(cc)), len(groups))
            valid.append((i, group, queries[0], delivered, cc, size))
            if headers is None and type(routing_key) is str:
                plain[routing_key] = group
        plans = [self._plan(queries, n_literal) for queries, n_literal in groups]
        shared: dict[int, Decision] = {}
        for i, group, routing_key, delivered, cc, size in valid:
            if delivered is None:
                decision = shared.get(group)
                if decision is None:
                    decision = shared[group] = self._decision(routing_key, {}, [],
                                                              plans[group])
                decisions[i] = decision
            else:
                decisions[i] = self._decision(routing_key, delivered, cc, plans[group], size)
        for i, group in repeats:  # the first of its key was plain too: its decision is shared
            decisions[i] = shared[group]
        for i, routing_key, headers in dressed:
            decisions[i] = self._dressed(decisions[i],  # type: ignore[arg-type]
                                         routing_key, headers)
        return decisions  # type: ignore[return-value]

    def _dressed(self, plain: Decision, routing_key: str, headers: dict) -> Decision:
        """The decision of a message with ``headers`` (a dict without ``CC``, ``BCC`` or the
        alias) from ``plain``, its key's decision without headers: the same publishes with
        the headers, as planning the message would decide, when the one publish's ``BCC``
        still fits beside the headers table; else (several publishes, or a ``BCC`` that the
        headers crowd out) the message is decided on its own."""
        if plain.error is not None:
            return Decision(headers=dict(headers), error=plain.error)
        publishes = plain.publishes
        if len(publishes) > 1 or (publishes and publishes[0].bcc and not bcc_fits(
                publishes[0].bcc,
                self.frame_max - FRAME_OVERHEAD - field_table_size(headers))):
            return self.decide(routing_key, headers)
        return Decision(publishes, dict(headers), unroutable=plain.unroutable,
                        keys=plain.keys, list_keys=plain.list_keys)

    def _literal(self, routing_key: str) -> Decision:
        """The decision for a valid literal key published without headers (see
        :meth:`routes_as_published`): the key as published, no ``BCC``; matched: the key
        itself when bound. Kept in the cache of literal decisions (shared, read-only): read
        and kept under the table's lock, so that a bind or unbind of the key from another
        thread either comes after (and drops it) or is seen."""
        with self._table_lock:
            if self._table.destinations(routing_key):
                decision = Decision([Publish(self.bindings_exchange, routing_key, ())], {},
                                    keys=(routing_key,))
            else:
                publishes = [Publish(self.bindings_exchange, routing_key, ())] \
                    if self.alternate_exchange else []
                decision = Decision(publishes, {}, unroutable=True)
            if len(self._literals) >= LITERAL_CACHE:
                self._literals.clear()
            self._literals[routing_key] = decision
        return decision

    def _parse(self, routing_key: Any, headers: Mapping[str, Any] | None
               ) -> tuple[dict | None, list[str], tuple[str, ...], int]:
        """``(delivered headers, CC, the publish's keys, size of its headers table)`` of one
        message; the headers are None for a message with nothing but its routing key.

        Raises:
            PreconditionFailed, TypeError, ValueError: it cannot be routed as published.
        """
        size = field_table_size(headers) if headers is not None else 0
        if headers or size > 4:  # a RoutingHeaders may be empty, its table not
            return (*self._queries(routing_key, headers), size)
        # the common case: nothing but the routing key
        return None, [], (decode_key(routing_key, MAX_BINDING_BYTES, "routing key"),), size

    def _queries(self, routing_key: Any, headers: Mapping[str, Any] | None
                 ) -> tuple[dict, list[str], tuple[str, ...]]:
        routing_key = decode_key(routing_key, MAX_BINDING_BYTES, "routing key")
        headers = dict(headers or {})
        cc, bcc = extra_routing_keys(headers)
        alias = headers.pop(self.bcc_alias, None)
        if alias is not None:
            if not isinstance(alias, (list, tuple)):
                raise PreconditionFailed(
                    f"header {self.bcc_alias!r} must be an array of routing keys, "
                    f"got {type(alias).__name__}")
            bcc += [k for k in alias if isinstance(k, str)]
        extra = [decode_key(k, MAX_QUERY_BYTES, "CC/BCC entry") for k in (*cc, *bcc)]
        headers.pop("BCC", None)
        return headers, cc, (routing_key, *extra)

    def _plan(self, queries: tuple[str, ...], n_literal: int) -> _Plan:
        """The core's plan of one publish (see :meth:`RTopicTable.plan`), with the queries.
        The matched keys are listed only where the plan needs them: a message that may be
        published with its one matched key (``by_matched_key``), and a topic
        ``NAME.bindings`` holding keys with ``*``/``#`` words, which RabbitMQ treats as
        wildcards (the planner's index knows exact keys only)."""
        legacy = self._legacy()
        chosen, matched, _, _ = self._table.plan(queries, n_literal,
                                                 self.by_matched_key or legacy)
        return _Plan(queries, chosen, matched, legacy)

    def _legacy(self) -> bool:
        """A topic ``NAME.bindings`` holding keys with ``*``/``#`` words: RabbitMQ treats them
        as wildcards, which the planner's index (exact keys) does not know."""
        return self.bindings_type == "topic" and len(self._wildcards) > 0

    def _decision(self, routing_key: str, headers: dict, cc: list[str], plan: _Plan,
                  headers_size: int = 0) -> Decision:
        matched = plan.matched
        if not matched:
            publishes = [Publish(self.bindings_exchange, routing_key, ())] \
                if self.alternate_exchange else []
            return Decision(publishes, headers, unroutable=True)
        budget = self.frame_max - FRAME_OVERHEAD - headers_size
        listed = isinstance(matched, list)
        chosen = plan.chosen
        if plan.legacy or not bcc_fits(chosen, budget):
            # more destinations than one frame's BCC holds: the cover planner splits them
            keys = matched if listed else self._table.match_union(plan.queries)
            publishes = plan_delivery(self.bindings_exchange, routing_key, cc, keys,
                                      self.destinations_of, budget, self.by_matched_key)
            return Decision(publishes, headers, keys=keys)
        if listed and self.by_matched_key and len(matched) == 1 and not cc and \
                matched[0] != routing_key:
            publishes = [Publish(self.bindings_exchange, matched[0], (), routing_key)]
        else:
            publishes = [Publish(self.bindings_exchange, routing_key, tuple(chosen))]
        if listed:
            return Decision(publishes, headers, keys=matched)
        queries, table = plan.queries, self._table
        return Decision(publishes, headers, list_keys=lambda: table.match_union(queries))


class _Plan(NamedTuple):
    """What the core planned for one publish (see :meth:`ExchangeRouter._plan`)."""

    queries: tuple[str, ...]
    chosen: list[str]  # at most one binding key per destination, sorted
    matched: list[str] | int  # the distinct keys matched, or their number (not listed)
    legacy: bool  # a topic NAME.bindings with wildcard keys: plan_delivery decides


class BrokerRoutedRouter:
    """Decisions for a managed ``topic``/``direct``/``fanout``/``headers`` exchange.

    ``NAME.bindings`` is a real exchange of that type: the sidecar republishes each message
    there once, with the routing key and headers as published, and RabbitMQ routes it (so the
    sidecar keeps no bindings and learns unroutable messages from ``basic.return``). The BCC
    alias header becomes a real ``BCC`` header, so RabbitMQ applies BCC semantics (extra
    routing keys, stripped before delivery) on ``NAME.bindings``.

    Args:
        name: the exchange publishers publish to.
        bcc_alias: the header carrying BCC entries past RabbitMQ's ingress.
    """

    def __init__(self, name: str, bcc_alias: str = DEFAULT_BCC_ALIAS) -> None:
        self.name = name
        self.bindings_exchange = f"{name}.bindings"
        self.bcc_alias = bcc_alias

    def bindings(self) -> list[tuple[Destination, str]]:
        """RabbitMQ keeps the bindings: none are known here."""
        return []

    def decide_many(self, messages: Sequence[tuple[str, Mapping[str, Any] | None]]
                    ) -> list[Decision]:
        """One republish per message; a bad alias header or key gets ``error``, never raises."""
        return [self._decide(routing_key, headers) for routing_key, headers in messages]

    def _decide(self, routing_key: Any, headers: Mapping[str, Any] | None) -> Decision:
        original = headers
        headers = dict(headers or {})
        try:
            routing_key = decode_key(routing_key, MAX_BINDING_BYTES, "routing key")
            alias = headers.pop(self.bcc_alias, None)
            headers.pop("BCC", None)
            if alias is not None and not isinstance(alias, (list, tuple)):
                raise PreconditionFailed(
                    f"header {self.bcc_alias!r} must be an array of routing keys, "
                    f"got {type(alias).__name__}")
        except (PreconditionFailed, TypeError, ValueError) as exc:
            return Decision(headers=dict(original or {}), error=str(exc))
        bcc = tuple(k for k in alias if isinstance(k, str)) if alias else None
        return Decision([Publish(self.bindings_exchange, routing_key, bcc or None)], headers)


def _has_wildcard(key: str) -> bool:
    return any(word in ("*", "#") for word in key.split("."))


def _check_destination(destination: Destination) -> Destination:
    kind, name = destination
    if kind not in ("queue", "exchange"):
        raise ValueError(f"destination type must be queue or exchange, got {kind!r}")
    return (kind, name)
