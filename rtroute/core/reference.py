"""The pure-Python twin of the native core: short and obviously correct.

It scans every binding and matches words with a memoised glob, so it costs O(bindings) per
query. It is the fallback when the extension is absent (or ``RTROUTE_PURE=1``) and the oracle of
the property tests. Same interface as :mod:`rtroute.core._native`.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from rtroute.core.keys import MAX_BINDING_BYTES, MAX_QUERY_BYTES, Key, decode_key, split_words


def glob_match(pattern: Sequence[str], words: Sequence[str]) -> bool:
    """True if ``words`` match ``pattern``, where ``*`` is one word and ``#`` zero or more.

    Runs the pattern as a set of positions (an NFA), word by word, so that long keys need no
    recursion.
    """

    def skip_hashes(states: set[int]) -> set[int]:
        out = set()
        for i in states:
            while i < len(pattern) and pattern[i] == "#":
                out.add(i)  # '#' may take the next word...
                i += 1  # ...or none
            out.add(i)
        return out

    states = skip_hashes({0})
    for word in words:
        states = skip_hashes(
            {i if pattern[i] == "#" else i + 1
             for i in states if i < len(pattern) and pattern[i] in ("#", "*", word)}
        )
        if not states:
            return False
    return len(pattern) in states


class _Matcher:
    """A set of binding keys that answers match queries."""

    def __init__(self) -> None:
        self._words: dict[str, tuple[str, ...]] = {}

    def add(self, key: Key) -> bool:
        """Adds a binding key; returns False if it was already present."""
        key = decode_key(key, MAX_BINDING_BYTES, "binding key")
        if key in self._words:
            return False
        self._words[key] = tuple(split_words(key))
        return True

    def remove(self, key: Key) -> bool:
        """Removes a binding key; returns False if it was absent."""
        key = decode_key(key, MAX_BINDING_BYTES, "binding key")
        return self._words.pop(key, None) is not None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._words

    def __len__(self) -> int:
        return len(self._words)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._words))

    def match(self, query: Key) -> list[str]:
        """Returns every binding key matching ``query``, each once."""
        query = decode_key(query, MAX_QUERY_BYTES, "routing key")
        q = split_words(query)
        return [key for key, words in self._words.items() if self._matches(q, words)]

    def match_many(self, queries: Iterable[Key]) -> list[list[str]]:
        """Returns, for each query, the binding keys matching it."""
        return [self.match(q) for q in list(queries)]

    def match_union(self, queries: Iterable[Key]) -> list[str]:
        """Returns the binding keys matching any of ``queries``, each once."""
        seen: dict[str, None] = {}
        for found in self.match_many(queries):
            seen.update(dict.fromkeys(found))
        return list(seen)

    def compact(self) -> None:
        """Nothing to compact in the twin (the native core rewrites its tries)."""

    def memory(self) -> int:
        """Bytes held (an estimate: the pure twin is not built for size)."""
        return sum(len(k) + 100 for k in self._words)

    @staticmethod
    def _matches(query: Sequence[str], binding: Sequence[str]) -> bool:
        raise NotImplementedError


class ReverseMatcher(_Matcher):
    """x-rtopic: concrete binding keys; ``*`` and ``#`` in the query."""

    @staticmethod
    def _matches(query: Sequence[str], binding: Sequence[str]) -> bool:
        return glob_match(query, binding)


class ForwardMatcher(_Matcher):
    """RabbitMQ's topic exchange: ``*`` and ``#`` in the binding key; a concrete query."""

    @staticmethod
    def _matches(query: Sequence[str], binding: Sequence[str]) -> bool:
        return glob_match(binding, query)


class RTopicTable(ReverseMatcher):
    """An x-rtopic exchange's bindings (binding key -> destinations) and the delivery planner
    (the twin of ``_native.RTopicTable``): :meth:`plan` picks at most one binding key per
    destination that a publish reaches. Destinations are any hashable objects."""

    def __init__(self) -> None:
        super().__init__()
        self._reach: dict[str, set] = {}
        self._bindings = 0

    def bind(self, destination: object, key: Key) -> bool:
        """Binds ``destination`` with ``key``; returns False if it was bound so already."""
        key = decode_key(key, MAX_BINDING_BYTES, "binding key")
        destinations = self._reach.get(key)
        if destinations is None:
            self.add(key)
            destinations = self._reach[key] = set()
        if destination in destinations:
            return False
        destinations.add(destination)
        self._bindings += 1
        return True

    def unbind(self, destination: object, key: object) -> bool:
        """Removes one binding; returns False if it was not known."""
        destinations = self._reach.get(key) if isinstance(key, str) else None
        if not destinations or destination not in destinations:
            return False
        destinations.discard(destination)
        self._bindings -= 1
        if not destinations:
            del self._reach[key]
            self.remove(key)
        return True

    def binding_count(self) -> int:
        """How many (destination, key) bindings are known."""
        return self._bindings

    def destinations(self, key: object) -> list:
        """The destinations bound with exactly ``key`` (a list; empty if none)."""
        return list(self._reach.get(key, ())) if isinstance(key, str) else []

    def items(self) -> list[tuple[object, str]]:
        """Every ``(destination, key)`` binding (a list, in no order)."""
        return [(d, k) for k, ds in self._reach.items() for d in ds]

    def reach_memory(self) -> int:
        """Bytes held by the planner's index (an estimate)."""
        return sum(100 + 60 * len(ds) for ds in self._reach.values())

    def plan(self, queries: Sequence[str], n_literal: int, want_matched: bool = False
             ) -> tuple[list[str], list[str] | int, int, int]:
        """As ``_native.RTopicTable.plan``: ``(keys, matched, destinations, skipped)``."""
        queries = list(queries)
        if not 0 <= n_literal <= len(queries):
            raise ValueError("n_literal must be between 0 and the number of queries")
        matched = self.match_union(queries)
        first: dict[object, str] = {}  # every destination reached -> the first key reaching it
        for key in matched:
            for destination in self._reach[key]:
                first.setdefault(destination, key)
        covered = {d for q in queries[:n_literal] for d in self._reach.get(q, ())}
        skipped = len(covered)
        own = {d: k for k, ds in self._reach.items() if len(ds) == 1 for d in ds}
        chosen = []
        for shared in (True, False):  # keys no destination has alone first: they cover more
            for destination, key in first.items():
                if destination in covered or shared == (destination in own):
                    continue
                key = key if shared else own[destination]
                chosen.append(key)
                covered |= self._reach[key]
        chosen = self._pruned(chosen, queries[:n_literal])
        return sorted(chosen), matched if want_matched else len(matched), len(first), skipped

    def _pruned(self, chosen: list[str], literal: Sequence[str]) -> list[str]:
        """``chosen`` without the keys whose destinations the literal keys and the other
        keys kept reach already (as the native planner prunes, in the same order)."""
        count: dict[object, float] = {}
        for q in literal:
            for d in self._reach.get(q, ()):
                count[d] = float("inf")
        for key in chosen:
            for d in self._reach[key]:
                count[d] = count.get(d, 0) + 1
        kept = []
        for key in chosen:
            if any(count[d] == 1 for d in self._reach[key]):
                kept.append(key)
            else:
                for d in self._reach[key]:
                    count[d] -= 1
        return kept
