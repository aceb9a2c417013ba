"""The divert graph: which managed exchanges a divert watches, and whether diverts form a cycle.

Artemis has no loop guard (a divert A -> B plus B -> A overflows its stack), so rtroute checks
the graph whenever diverts change: when the config is loaded (:mod:`rtroute.config.rtroute_toml`) and when a
divert is created at run time (:class:`rtroute.divert.DivertTable`). An edge runs from each
exchange a divert watches to each of its forwarding addresses that is itself a managed exchange;
an ``ANYCAST`` divert delivers to a queue, never back through a managed exchange, so it adds no
edge. Pure logic, no I/O.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rtroute.core.keys import split_words
from rtroute.core.reference import glob_match


class DivertLike(Protocol):
    """What the graph needs of a divert (a :class:`rtroute.config.divert.DivertConfig` has it)."""

    name: str
    address: str
    routing_type: str

    @property
    def forwarding_addresses(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class DivertCycle:
    """A loop in the divert graph.

    Attributes:
        exchanges: the exchanges on the loop, the first repeated at the end (``A, B, A``).
        diverts: index (in the list given) of the divert taking each step of the loop.
        target: the exchange whose forwarding closes the loop.
    """

    exchanges: tuple[str, ...]
    diverts: tuple[int, ...]
    target: str

    @property
    def closing(self) -> int:
        """Index of the divert that closes the loop (the last step)."""
        return self.diverts[-1]

    def describe(self, diverts: Sequence[DivertLike]) -> str:
        """``forwarding to 'A' closes a cycle A -> B -> A (diverts 'ab', 'ba')``."""
        used = ", ".join(repr(diverts[d].name) for d in self.diverts)
        return (f"forwarding to {self.target!r} closes a cycle {' -> '.join(self.exchanges)} "
                f"(diverts {used}); diverted messages would loop")


def address_matches(pattern: str, name: str) -> bool:
    """Whether exchange ``name`` matches divert address ``pattern`` (RabbitMQ topic rules)."""
    return glob_match(split_words(pattern), split_words(name))


def watched_exchanges(address: str, exchanges: Sequence[str]) -> list[str]:
    """The managed exchanges (of ``exchanges``) a divert with ``address`` watches."""
    return [n for n in exchanges if address_matches(address, n)]


def find_cycle(exchanges: Sequence[str], diverts: Sequence[DivertLike]) -> DivertCycle | None:
    """The first cycle a depth-first walk finds (exchanges and diverts in the order given).

    Args:
        exchanges: the managed exchange names.
        diverts: every divert, in declaration order.

    Returns:
        None when the graph has no cycle.
    """
    names = list(exchanges)
    managed = set(names)
    edges: dict[str, list[tuple[str, int]]] = {n: [] for n in names}
    for i, divert in enumerate(diverts):
        if divert.routing_type == "ANYCAST":
            continue  # copies go to a queue, not back through a managed exchange
        for source in watched_exchanges(divert.address, names):
            for target in divert.forwarding_addresses:
                if target in managed:
                    edges[source].append((target, i))

    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[tuple[str, int]] = []  # (exchange, divert that led to it)

    def visit(node: str) -> DivertCycle | None:
        state[node] = 1
        for target, divert_index in edges[node]:
            if state.get(target) == 1:
                start = next(k for k, (n, _d) in enumerate(stack) if n == target)
                loop = stack[start:] + [(target, divert_index)]
                return DivertCycle(tuple(n for n, _d in loop), tuple(d for _n, d in loop[1:]),
                                   target)
            if state.get(target) is None:
                stack.append((target, divert_index))
                found = visit(target)
                stack.pop()
                if found is not None:
                    return found
        state[node] = 2
        return None

    for name in names:
        if state.get(name) is None:
            stack.append((name, -1))
            found = visit(name)
            stack.pop()
            if found is not None:
                return found
    return None
