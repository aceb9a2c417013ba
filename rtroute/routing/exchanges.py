"""Exchange semantics as a library: rtopic, topic, direct and fanout, with CC/BCC. No I/O.

An exchange holds bindings ``(destination, binding_key)``; :meth:`route` returns the
destinations a publish reaches, each once, and the headers as delivered.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from rtroute.core import MAX_BINDING_BYTES, ForwardMatcher, ReverseMatcher
from rtroute.core.keys import decode_key
from rtroute.routing.sender_selected import delivered_headers, extra_routing_keys

Headers = Optional[Mapping[str, Any]]


@dataclass(frozen=True)
class RouteResult:
    """Where one publish goes.

    Attributes:
        destinations: every destination reached, each once.
        headers: the headers as delivered (``BCC`` removed, ``CC`` kept).
        binding_keys: the distinct binding keys that matched (what the sidecar hands to
            RabbitMQ as a ``BCC`` list).
    """

    destinations: frozenset
    headers: dict = field(default_factory=dict)
    binding_keys: frozenset = frozenset()


class _Exchange:
    """Bindings and the bookkeeping every exchange type shares."""

    kind = ""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._destinations_by_key: dict[str, set[str]] = {}

    def bind(self, destination: str, binding_key: str = "") -> bool:
        """Binds ``destination`` with ``binding_key``; returns False if already bound so.

        Raises:
            TypeError: a name or key is not a string.
            ValueError: a name or key is longer than 255 bytes or not valid UTF-8.
        """
        destination = decode_key(destination, MAX_BINDING_BYTES, "destination")
        binding_key = decode_key(binding_key, MAX_BINDING_BYTES, "binding key")
        destinations = self._destinations_by_key.get(binding_key)
        if destinations is None:
            self._key_added(binding_key)
            destinations = self._destinations_by_key[binding_key] = set()
        if destination in destinations:
            return False
        destinations.add(destination)
        return True

    def unbind(self, destination: str, binding_key: str = "") -> bool:
        """Removes one binding; returns False if it did not exist."""
        destinations = self._destinations_by_key.get(binding_key)
        if not destinations or destination not in destinations:
            return False
        destinations.discard(destination)
        if not destinations:
            del self._destinations_by_key[binding_key]
            self._key_removed(binding_key)
        return True

    def unbind_destination(self, destination: str) -> int:
        """Removes every binding of ``destination`` (a deleted queue); returns how many."""
        keys = [k for k, d in self._destinations_by_key.items() if destination in d]
        for key in keys:
            self.unbind(destination, key)
        return len(keys)

    def bindings(self) -> list[tuple[str, str]]:
        """Every ``(destination, binding_key)``, sorted."""
        return sorted((d, k) for k, ds in self._destinations_by_key.items() for d in ds)

    def destinations_of(self, binding_keys: Iterable[str]) -> frozenset:
        """The destinations bound with any of ``binding_keys``."""
        found: set[str] = set()
        for key in binding_keys:
            found.update(self._destinations_by_key.get(key, ()))
        return frozenset(found)

    def route(self, routing_key: str, headers: Headers = None) -> RouteResult:
        """Routes one publish: the routing key plus the ``CC`` and ``BCC`` keys.

        Raises:
            TypeError / ValueError: the routing key is not a string of at most 255 bytes.
            PreconditionFailed: ``CC`` or ``BCC`` is not an array (RabbitMQ's 406).
        """
        return self.route_many([(routing_key, headers)])[0]

    def route_many(self, publishes: Sequence[tuple[str, Headers]]) -> list[RouteResult]:
        """Routes many publishes with one call into the core per batch."""
        matched = self.matching_keys_many(publishes)
        return [
            RouteResult(self.destinations_of(keys), delivered_headers(headers), frozenset(keys))
            for keys, (_, headers) in zip(matched, publishes)
        ]

    def matching_keys_many(self, publishes: Sequence[tuple[str, Headers]]) -> list[set[str]]:
        """The binding keys each publish matches (routing key, CC and BCC), without resolving
        destinations. Identical key sets in one batch are matched once.

        Raises:
            as :meth:`route`.
        """
        groups: dict[tuple[str, ...], int] = {}
        order: list[int] = []
        for routing_key, headers in publishes:
            routing_key = decode_key(routing_key, MAX_BINDING_BYTES, "routing key")
            cc, bcc = extra_routing_keys(headers)
            order.append(groups.setdefault((routing_key, *cc, *bcc), len(groups)))
        matched = self.match_queries(list(groups))
        return [matched[i] for i in order]

    def match_queries(self, queries: Sequence[Sequence[str]]) -> list[set[str]]:
        """The binding keys each query matches; a query is the routing key followed by the
        CC and BCC keys of one publish, each already checked (:func:`decode_key`)."""
        raise NotImplementedError

    def _key_added(self, key: str) -> None:
        """Hook: a binding key gained its first destination."""

    def _key_removed(self, key: str) -> None:
        """Hook: a binding key lost its last destination."""


class _TrieExchange(_Exchange):
    """An exchange whose binding keys live in a core matcher."""

    matcher_class: Any = None

    def __init__(self, name: str = "") -> None:
        super().__init__(name)
        self._matcher = self.matcher_class()

    def _key_added(self, key: str) -> None:
        self._matcher.add(key)

    def _key_removed(self, key: str) -> None:
        self._matcher.remove(key)

    def match_queries(self, queries: Sequence[Sequence[str]]) -> list[set[str]]:
        flat = [q for group in queries for q in group]
        results = iter(self._matcher.match_many(flat))
        out = []
        for group in queries:
            keys: set[str] = set()
            for _ in group:
                keys.update(next(results))
            out.append(keys)
        return out


class RTopicExchange(_TrieExchange):
    """The x-rtopic exchange: plain binding keys, ``*``/``#`` in the published key (and CC/BCC)."""

    kind = "rtopic"
    matcher_class = ReverseMatcher


class TopicExchange(_TrieExchange):
    """RabbitMQ's topic exchange: ``*``/``#`` in binding keys, concrete routing keys."""

    kind = "topic"
    matcher_class = ForwardMatcher


class DirectExchange(_Exchange):
    """RabbitMQ's direct exchange: a binding key equal to any routing key (or CC/BCC entry)."""

    kind = "direct"

    def match_queries(self, queries: Sequence[Sequence[str]]) -> list[set[str]]:
        known = self._destinations_by_key
        return [{q for q in group if q in known} for group in queries]


class FanoutExchange(_Exchange):
    """RabbitMQ's fanout exchange: every bound destination; keys (and CC/BCC) do not matter."""

    kind = "fanout"

    def match_queries(self, queries: Sequence[Sequence[str]]) -> list[set[str]]:
        return [set(self._destinations_by_key) for _ in queries]


EXCHANGE_TYPES = {
    cls.kind: cls for cls in (RTopicExchange, TopicExchange, DirectExchange, FanoutExchange)
}


def make_exchange(kind: str, name: str = "") -> _Exchange:
    """Returns an empty exchange of ``kind`` (rtopic, topic, direct or fanout).

    Raises:
        ValueError: an unknown kind.
    """
    try:
        return EXCHANGE_TYPES[kind](name)
    except KeyError:
        raise ValueError(
            f"unknown exchange kind {kind!r}; expected one of {', '.join(EXCHANGE_TYPES)}"
        ) from None
