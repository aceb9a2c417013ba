"""The bindings of one exchange as a :class:`~rtroute.amqp.binding_watcher.BindingWatcher`
keeps them, compactly: per destination, a dict of binding key -> arguments.

An entry is ``(destination, destination_type, binding_key, arguments)``, the arguments
normalised to a tuple (``()`` for none, the common case; the same binding may have several
entries with other arguments). Kept as one set of entry tuples, a set of bindings, a key count
and a destination index, 100,000 bindings took ~520 bytes each in Python objects; grouped by
destination, each binding costs one dict slot and its key string (~120 bytes): no tuple, no
object per binding (issue #47: at most 1 KiB per binding per process, the native routing table
included).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["BindingTable", "Entry"]

Entry = tuple[str, str, str, tuple]
_MISSING: Any = object()


class _Several(set):
    """The arguments of a binding that has more than one entry."""

    __slots__ = ()


class BindingTable:
    """Entries grouped by destination (not thread-safe: one thread at a time)."""

    __slots__ = ("_by_destination",)

    def __init__(self) -> None:
        self._by_destination: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, entry: Entry) -> int:
        """Adds ``entry``: 0 it was there, 1 a new entry of a known binding, 2 a new binding."""
        destination = (entry[0], entry[1])
        keys = self._by_destination.get(destination)
        if keys is None:
            keys = self._by_destination[destination] = {}
        arguments = keys.get(entry[2], _MISSING)
        if arguments is _MISSING:
            keys[entry[2]] = entry[3]
            return 2
        if type(arguments) is _Several:
            if entry[3] in arguments:
                return 0
            arguments.add(entry[3])
            return 1
        if arguments == entry[3]:
            return 0
        keys[entry[2]] = _Several((arguments, entry[3]))
        return 1

    def remove(self, entry: Entry) -> int:
        """Removes ``entry``: 0 it was not there, 1 its binding has other entries, 2 the
        binding is gone."""
        destination = (entry[0], entry[1])
        keys = self._by_destination.get(destination)
        if keys is None:
            return 0
        arguments = keys.get(entry[2], _MISSING)
        if arguments is _MISSING:
            return 0
        if type(arguments) is _Several:
            if entry[3] not in arguments:
                return 0
            arguments.discard(entry[3])
            if len(arguments) == 1:
                keys[entry[2]] = next(iter(arguments))
            return 1
        if arguments != entry[3]:
            return 0
        del keys[entry[2]]
        if not keys:
            del self._by_destination[destination]
        return 2

    def has(self, entry: Entry) -> bool:
        keys = self._by_destination.get((entry[0], entry[1]))
        arguments = _MISSING if keys is None else keys.get(entry[2], _MISSING)
        if arguments is _MISSING:
            return False
        return entry[3] in arguments if type(arguments) is _Several else arguments == entry[3]

    def has_binding(self, destination: str, destination_type: str, key: str) -> bool:
        keys = self._by_destination.get((destination, destination_type))
        return keys is not None and key in keys

    def drop(self, destination: str, destination_type: str) -> list[str]:
        """Removes every entry of a destination; returns the keys of its bindings."""
        return list(self._by_destination.pop((destination, destination_type), ()))

    def clear(self) -> list[tuple[str, str, str]]:
        """Removes everything; returns the bindings there were."""
        bindings = list(self.bindings())
        self._by_destination.clear()
        return bindings

    def apply(self, event: tuple[str, Any]) -> None:
        """A watcher's parsed event: ``("add"|"remove", entry)``, ``("drop", (destination,
        type))`` or ``("clear", None)``."""
        action, payload = event
        if action == "add":
            self.add(payload)
        elif action == "remove":
            self.remove(payload)
        elif action == "drop":
            self.drop(*payload)
        else:
            self.clear()

    def bindings(self) -> Iterator[tuple[str, str, str]]:
        """``(destination, destination_type, key)`` of each binding."""
        for (destination, kind), keys in self._by_destination.items():
            for key in keys:
                yield destination, kind, key

    def entries_of(self, destination: str, destination_type: str, key: str) -> list[Entry]:
        keys = self._by_destination.get((destination, destination_type))
        arguments = _MISSING if keys is None else keys.get(key, _MISSING)
        if arguments is _MISSING:
            return []
        several = arguments if type(arguments) is _Several else (arguments,)
        return [(destination, destination_type, key, a) for a in several]

    def keys(self) -> Iterator[str]:
        for keys in self._by_destination.values():
            yield from keys

    def missing_from(self, other: BindingTable) -> Iterator[tuple[str, str, str]]:
        """The bindings of this table that ``other`` lacks (whatever their arguments)."""
        for destination, keys in self._by_destination.items():
            theirs = other._by_destination.get(destination)
            if theirs is None:
                for key in keys:
                    yield destination[0], destination[1], key
            else:
                for key in keys:
                    if key not in theirs:
                        yield destination[0], destination[1], key

    def __len__(self) -> int:
        """The number of bindings."""
        return sum(len(keys) for keys in self._by_destination.values())
