"""The divert table: which diverts fire for a message, as Artemis decides it. Pure, no I/O.

Artemis keeps a divert as a binding of its address (``BindingsImpl``):

- exclusive diverts are tried first, in the order they were added; *every* one whose filter
  matches fires, and if any fired the message goes nowhere else: neither to the address's own
  queues nor to a non-exclusive divert (``routeToExclusiveBindings``);
- otherwise the non-exclusive diverts are grouped by routing name; per group, starting at the
  group's position, the first divert whose filter matches fires and the position moves past it
  (``getNextBinding``), so diverts sharing a routing name take turns; the default routing name
  is the divert's own name, so normally every group has one divert and all matching ones fire.
  The message also goes on to the address.

A divert's ``address`` may be a topic pattern over the managed exchange names (``orders.#``):
it is kept in a forward trie (:class:`rtroute.core.ForwardMatcher`) and applies to every
managed exchange the pattern matches, each with its own routing-name positions (as Artemis
binds a wildcard divert to every matching address).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rtroute.config.constants import ROUTING_TYPES
from rtroute.core import ForwardMatcher
from rtroute.divert.message import Transformer, TransformerError, load_transformer
from rtroute.routing.divert_graph import find_cycle, watched_exchanges
from rtroute.selector import MessageFacts, Selector, SelectorError
from rtroute.selector import compile as compile_selector

#: Per-divert counter -> help text (a :class:`Divert`'s attributes and ``status()`` fields,
#: ``rtroute_divert_*_total`` in ``/metrics``).
DIVERT_COUNTERS: dict[str, str] = {
    "matched": "Messages a divert fired for",
    "forwarded": "Diverted copies confirmed by the broker",
    "dead_lettered": "Diverted copies sent to rtroute.dead",
    "unrouted": "Diverted copies no queue took",
}


class DivertError(ValueError):
    """A divert that cannot be added or removed (the message says why)."""


class DivertExists(DivertError):
    """A divert of that name is in the table already."""


class DivertConfigLike(Protocol):
    """The ``[[divert]]`` keys (a :class:`rtroute.config.divert.DivertConfig` has them)."""

    name: str
    address: str
    forwarding_address: str
    filter: str | None
    exclusive: bool
    routing_name: str
    routing_key: str | None
    routing_type: str
    transformer: str | None

    @property
    def forwarding_addresses(self) -> tuple[str, ...]: ...


class Divert:
    """One divert, compiled: its selector and transformer loaded, with its counters.

    Attributes:
        config: the divert as configured.
        forwarding_addresses: where its copies go, in order.
        selector: the compiled filter (matches everything without one).
        transformer: the loaded ``module:function``, or None.
        origin: ``config`` or ``http`` (created at run time).
        matched: messages for which it fired.
        forwarded: copies the broker confirmed.
        dead_lettered: copies dead-lettered (hop limit, transformer failure, no such address).
        unrouted: copies the broker returned (no queue took them).
    """

    def __init__(self, config: DivertConfigLike, origin: str = "config") -> None:
        if config.routing_type not in ROUTING_TYPES:
            raise DivertError(f"divert {config.name!r}: routing_type must be one of "
                              f"{', '.join(ROUTING_TYPES)}, got {config.routing_type!r}")
        if config.routing_type == "ANYCAST" and config.routing_key is not None:
            raise DivertError(f"divert {config.name!r}: an ANYCAST copy goes to the queue named "
                              "by the forwarding address through the default exchange, whose "
                              "routing key is that name: routing_key cannot apply")
        try:
            self.selector: Selector = compile_selector(config.filter)
        except SelectorError as exc:
            raise DivertError(f"divert {config.name!r}: filter: {exc}") from None
        try:
            self.transformer: Transformer | None = (
                load_transformer(config.transformer) if config.transformer else None)
        except TransformerError as exc:
            raise DivertError(f"divert {config.name!r}: {exc}") from None
        self.config = config
        self.forwarding_addresses: tuple[str, ...] = tuple(config.forwarding_addresses)
        self.origin = origin
        self.matched = 0
        self.forwarded = 0
        self.dead_lettered = 0
        self.unrouted = 0

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def exclusive(self) -> bool:
        return self.config.exclusive

    @property
    def routing_key(self) -> str | None:
        return self.config.routing_key

    @property
    def routing_type(self) -> str:
        return self.config.routing_type

    def status(self) -> dict[str, Any]:
        """The divert and its counters, for ``/status``."""
        c = self.config
        return {
            "name": c.name, "address": c.address, "forwarding_address": c.forwarding_address,
            "filter": c.filter, "exclusive": c.exclusive, "routing_name": c.routing_name,
            "routing_key": c.routing_key, "routing_type": c.routing_type,
            "transformer": c.transformer, "origin": self.origin,
            **{name: getattr(self, name) for name in DIVERT_COUNTERS},
        }

    def __repr__(self) -> str:
        return f"Divert({self.name!r}, {self.config.address!r} -> " \
               f"{self.config.forwarding_address!r})"


@dataclass
class Verdict:
    """What the diverts of an exchange decide for one message.

    Attributes:
        fired: the diverts that fire, in order (each makes a copy per forwarding address).
        original: whether the message also goes on to its own address.
    """

    fired: list[Divert] = field(default_factory=list)
    original: bool = True


_PASS = Verdict()


@dataclass
class _Group:
    """Non-exclusive diverts of one exchange sharing a routing name, and whose turn it is."""

    diverts: list[Divert]
    position: int = 0


@dataclass
class _ExchangeDiverts:
    exclusive: list[Divert]
    groups: list[_Group]
    needs_message: bool
    needs_body: bool = False


class DivertTable:
    """Every divert of a sidecar, by managed exchange.

    Args:
        exchanges: the managed exchange names (a divert must watch at least one).
    """

    def __init__(self, exchanges: Sequence[str]) -> None:
        self._exchanges = list(exchanges)
        self._diverts: dict[str, Divert] = {}  # declaration order
        self._addresses = ForwardMatcher()
        self._address_uses: dict[str, int] = {}
        self._by_exchange: dict[str, _ExchangeDiverts] = {}
        self._positions: dict[tuple[str, str], _Group] = {}

    # -- the table ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._diverts)

    def __iter__(self) -> Iterator[Divert]:
        return iter(list(self._diverts.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._diverts

    def get(self, name: str) -> Divert | None:
        """The divert named ``name``, or None."""
        return self._diverts.get(name)

    def check(self, config: DivertConfigLike) -> list[str]:
        """Validates ``config`` against the table without adding it.

        Returns:
            The managed exchanges it would watch.

        Raises:
            DivertError: the name is taken, the address matches no managed exchange, or the
                divert would close a cycle.
        """
        if config.name in self._diverts:
            raise DivertExists(f"divert {config.name!r} exists already")
        watched = watched_exchanges(config.address, self._exchanges)
        if not watched:
            raise DivertError(f"divert {config.name!r}: address {config.address!r} matches no "
                              f"managed exchange (managed: {', '.join(self._exchanges)})")
        configs = [d.config for d in self._diverts.values()] + [config]
        cycle = find_cycle(self._exchanges, configs)
        if cycle is not None:
            raise DivertError(f"divert {configs[cycle.closing].name!r}: "
                              f"{cycle.describe(configs)}")
        return watched

    def add(self, config: DivertConfigLike | Divert, origin: str = "config") -> Divert:
        """Adds a divert after the others (it is evaluated after them).

        Raises:
            DivertError: see :meth:`check`; also a bad filter, transformer or routing type.
        """
        divert = config if isinstance(config, Divert) else Divert(config, origin)
        self.check(divert.config)
        address = divert.config.address
        try:
            if self._address_uses.get(address, 0) == 0:
                self._addresses.add(address)
        except (TypeError, ValueError) as exc:
            raise DivertError(f"divert {divert.name!r}: address: {exc}") from None
        self._address_uses[address] = self._address_uses.get(address, 0) + 1
        self._diverts[divert.name] = divert
        self._rebuild()
        return divert

    def check_update(self, config: DivertConfigLike) -> Divert:
        """Validates new settings for the divert named ``config.name`` without applying them.

        Returns:
            The new settings compiled (a :class:`Divert` outside the table).

        Raises:
            KeyError: no such divert.
            DivertError: the address, ``exclusive`` or routing name differ (as in Artemis's
                ``updateDivert``, only the filter, forwarding address, routing type and
                transformer change, plus rtroute's routing key); a bad filter, transformer or
                routing type; or the new forwarding addresses would close a cycle.
        """
        divert = self._diverts[config.name]
        old = divert.config
        for key, before, after in (
                ("address", old.address, config.address),
                ("exclusive", old.exclusive, config.exclusive),
                ("routing_name", old.routing_name or old.name,
                 config.routing_name or config.name)):
            if before != after:
                raise DivertError(f"divert {config.name!r}: {key} cannot be changed by an "
                                  f"update (it is {before!r}); delete the divert and create "
                                  "it again")
        candidate = Divert(config, divert.origin)
        configs = [config if d is divert else d.config for d in self._diverts.values()]
        cycle = find_cycle(self._exchanges, configs)
        if cycle is not None:
            raise DivertError(f"divert {configs[cycle.closing].name!r}: "
                              f"{cycle.describe(configs)}")
        return candidate

    def update(self, config: DivertConfigLike) -> Divert:
        """Gives the divert named ``config.name`` new settings, in place: it keeps its position
        (exclusive order, routing-name turns) and its counters, and the next
        :meth:`evaluate` uses the new settings (all of them or none: see
        :meth:`check_update`, which runs first and leaves the divert unchanged on error).

        Returns:
            The divert (the same object as before).

        Raises:
            KeyError, DivertError: see :meth:`check_update`.
        """
        candidate = self.check_update(config)
        divert = self._diverts[config.name]
        divert.config = candidate.config
        divert.selector = candidate.selector
        divert.transformer = candidate.transformer
        divert.forwarding_addresses = candidate.forwarding_addresses
        self._rebuild()
        return divert

    def remove(self, name: str) -> Divert:
        """Removes the divert named ``name`` and returns it.

        Raises:
            KeyError: no such divert.
        """
        divert = self._diverts.pop(name)
        address = divert.config.address
        self._address_uses[address] -= 1
        if self._address_uses[address] == 0:
            del self._address_uses[address]
            self._addresses.remove(address)
        self._rebuild()
        return divert

    def exchanges_of(self, divert: Divert) -> list[str]:
        """The managed exchanges ``divert`` watches."""
        return watched_exchanges(divert.config.address, self._exchanges)

    def _rebuild(self) -> None:
        by_exchange: dict[str, _ExchangeDiverts] = {}
        for exchange in self._exchanges:
            patterns = set(self._addresses.match(exchange)) if len(self._addresses) else set()
            diverts = [d for d in self._diverts.values() if d.config.address in patterns]
            if not diverts:
                continue
            groups: dict[str, list[Divert]] = {}
            for d in diverts:
                if not d.exclusive:
                    groups.setdefault(d.config.routing_name or d.name, []).append(d)
            built = []
            for routing_name, members in groups.items():
                previous = self._positions.get((exchange, routing_name))
                group = _Group(members, previous.position if previous else 0)
                self._positions[(exchange, routing_name)] = group
                built.append(group)
            by_exchange[exchange] = _ExchangeDiverts(
                [d for d in diverts if d.exclusive], built,
                any(d.selector.needs_message for d in diverts),
                any(d.selector.needs_body for d in diverts))
        self._by_exchange = by_exchange

    # -- decisions ---------------------------------------------------------------------------
    def watches(self, exchange: str) -> bool:
        """Whether any divert watches ``exchange``."""
        return exchange in self._by_exchange

    def needs_message(self, exchange: str) -> bool:
        """Whether a filter on ``exchange`` reads standard fields (pass a MessageFacts)."""
        entry = self._by_exchange.get(exchange)
        return entry is not None and entry.needs_message

    def needs_body(self, exchange: str) -> bool:
        """Whether a filter on ``exchange`` reads the body (an ``XPATH`` term: pass ``body``)."""
        entry = self._by_exchange.get(exchange)
        return entry is not None and entry.needs_body

    def evaluate(self, exchange: str, headers: Mapping[str, Any] | None,
                 message: MessageFacts | None = None, body: bytes | None = None) -> Verdict:
        """Which diverts of ``exchange`` fire for a message, and whether the original goes on.

        Counts ``matched`` on each divert that fires and moves the routing-name turns.
        """
        entry = self._by_exchange.get(exchange)
        if entry is None:
            return _PASS
        headers = headers if headers is not None else {}
        fired = [d for d in entry.exclusive if d.selector.matches(headers, message, body)]
        if fired:
            for d in fired:
                d.matched += 1
            return Verdict(fired, original=False)
        for group in entry.groups:
            members = group.diverts
            if len(members) == 1:
                if members[0].selector.matches(headers, message, body):
                    fired.append(members[0])
                continue
            count = len(members)
            position = group.position if group.position < count else 0
            for _ in range(count):
                candidate = members[position]
                position = position + 1 if position + 1 < count else 0
                if candidate.selector.matches(headers, message, body):
                    fired.append(candidate)
                    group.position = position
                    break
        for d in fired:
            d.matched += 1
        return Verdict(fired, original=True)
