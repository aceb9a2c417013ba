"""Plans the republishes that deliver one routed message of an rtopic exchange. Pure, no I/O.

(For the ``topic``/``direct``/``fanout``/``headers`` exchanges the sidecar manages for their
diverts there is nothing to plan: ``NAME.bindings`` is a real exchange of that type and one
republish with ``BCC`` = the alias entries suffices; see
:class:`rtroute.sidecar.router.BrokerRoutedRouter`. Diverted copies are planned by
:mod:`rtroute.divert.copies`.)

The sidecar hands the matched *binding keys* to RabbitMQ: one publish to ``NAME.bindings`` with
the original routing key, the original headers and ``BCC`` = the matched keys. RabbitMQ resolves
keys to queues, gives each queue one copy and strips ``BCC``.

``NAME.bindings`` is a *topic* exchange on RabbitMQ 3.x and a *direct* one on 4.x
(:func:`bindings_exchange_type`): RabbitMQ 3.10 routes a publish with several routing keys (the
key plus CC/BCC) on a direct exchange by scanning every binding of the exchange once per key,
which costs O(bindings x keys) per message (measured: 681 msg/s for a one-key BCC at 10k
bindings, against 8,551 on a topic exchange, which walks its trie per key); RabbitMQ 4.0.5
indexes direct routing, and there a one-key BCC publish at 10k bindings runs 1.4-1.7x a native
topic exchange publish, against 0.6-0.7x through a topic ``NAME.bindings`` (``rtroute bench
publish --bindings-type direct|topic``). Binding keys are plain words in rtopic, so topic
semantics only differ for a binding key that holds a literal ``*`` or ``#`` word: RabbitMQ
treats it as a wildcard there (a direct exchange matches it literally, as the plugin does).
``destinations_of`` tells the planner what RabbitMQ really reaches with a key, wildcard
bindings of a topic ``NAME.bindings`` included.

A header frame must fit in ``frame_max``, which bounds one publish's BCC list. A larger match
set is split into several publishes such that no destination is reachable from two of them
(keys that share a destination travel together). That is only safe when the routing key and the
CC entries (which RabbitMQ routes on every publish) are not themselves bound keys; otherwise, and
for a group of keys too large for any frame, the remaining destinations are reached one by one:
a queue through the default exchange (the consumer then sees exchange ``""`` and the queue name
as routing key: a documented difference), an exchange directly with the original routing key.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

# AMQP field-table cost of BCC: name (1 + 3), type (1), array length (4); per entry type (1),
# string length (4) and the bytes.
BCC_FIXED_COST = 9
BCC_ENTRY_COST = 5

Destination = tuple[str, str]  # (destination_type "queue" | "exchange", name)


def bindings_exchange_type(broker_version: str | None) -> str:
    """The type to declare a new ``NAME.bindings`` with on a broker of this version (from
    ``connection.start``'s ``version``): ``direct`` from RabbitMQ 4 on, else ``topic``. An
    existing ``NAME.bindings`` keeps its type (RabbitMQ cannot change it)."""
    major = (broker_version or "").split(".", 1)[0]
    return "direct" if major.isdigit() and int(major) >= 4 else "topic"


@dataclass(frozen=True)
class Publish:
    """One republish: to ``exchange`` with ``routing_key``; ``bcc`` is None for a direct one
    (to a destination itself) and empty for a publish the routing key and CC route alone."""

    exchange: str
    routing_key: str
    bcc: tuple[str, ...] | None
    # set when routing_key is the one matched binding key instead of the key as published
    # (``by_matched_key``): the key as published, for a header
    published_key: str | None = None


def bcc_cost(keys: Iterable[str]) -> int:
    """Encoded size in bytes of a ``BCC`` header holding ``keys``."""
    return BCC_FIXED_COST + sum(BCC_ENTRY_COST + len(k.encode("utf-8")) for k in keys)


def plan_delivery(
    bindings_exchange: str,
    routing_key: str,
    cc: Iterable[str],
    matched: Iterable[str],
    destinations_of: Callable[[str], Iterable[Destination]],
    budget: int,
    by_matched_key: bool = False,
) -> list[Publish]:
    """Returns the publishes that give every destination of ``matched`` exactly one copy.

    Args:
        bindings_exchange: the direct exchange holding the bindings (``NAME.bindings``).
        routing_key: the routing key as published (kept on every publish).
        cc: the string entries of the ``CC`` header as published (kept).
        matched: the distinct binding keys the message matched.
        destinations_of: where RabbitMQ delivers a publish routed with a given key.
        budget: bytes the ``BCC`` header may take in one header frame.
        by_matched_key: a message without CC that matched one binding key is published
            with that key as its routing key and no ``BCC`` (``published_key`` says the
            key as published). RabbitMQ 3.x routes such a publish at the cost of a plain
            one; a ``BCC`` costs it a header rewrite and a second lookup. The consumer then
            sees the binding key as the routing key.
    """
    keys = sorted(set(matched))  # binding keys: at most 255 bytes each
    if not keys:
        return []
    cc = list(cc)
    if by_matched_key and len(keys) == 1 and not cc and keys[0] != routing_key:
        return [Publish(bindings_exchange, keys[0], (), routing_key)]
    always_routed = {routing_key, *cc}
    if always_routed.issuperset(keys):
        # RabbitMQ routes the routing key and CC on every publish: an exact-key publish needs
        # no BCC (which costs the broker a header rewrite and a trie walk per entry)
        return [Publish(bindings_exchange, routing_key, ())]
    if len(keys) * (BCC_ENTRY_COST + 255) + BCC_FIXED_COST <= budget or \
            bcc_cost(keys) <= budget:
        return [Publish(bindings_exchange, routing_key, tuple(keys))]

    groups = _groups_sharing_destinations(keys, destinations_of)
    # RabbitMQ routes the routing key and CC on every publish: the group reached that way must
    # travel in the first publish, and a second publish is safe only if no such key is bound.
    groups.sort(key=lambda g: (not (always_routed & set(g)), -len(g)))
    splittable = not any(any(destinations_of(k)) for k in always_routed)

    publishes: list[Publish] = []
    current: list[str] = []
    leftover: list[str] = []
    for group in groups:
        if bcc_cost(current + group) <= budget:
            current += group
        elif not publishes and not current and not splittable:
            leftover += group  # cannot go in a BCC publish at all (too large for one frame)
        elif splittable and bcc_cost(group) <= budget:
            publishes.append(Publish(bindings_exchange, routing_key, tuple(sorted(current))))
            current = list(group)
        else:
            leftover += group
    if current:
        publishes.append(Publish(bindings_exchange, routing_key, tuple(sorted(current))))

    reached = {d for p in publishes for k in (p.bcc or ()) for d in destinations_of(k)}
    if not splittable and publishes:
        reached |= {d for k in always_routed for d in destinations_of(k)}
    direct = sorted({d for k in leftover for d in destinations_of(k)} - reached)
    for kind, name in direct:
        if kind == "exchange":
            publishes.append(Publish(name, routing_key, None))
        else:
            publishes.append(Publish("", name, None))
    return publishes


def _groups_sharing_destinations(
    keys: list[str], destinations_of: Callable[[str], Iterable[Destination]]
) -> list[list[str]]:
    """Partitions ``keys`` so that keys reaching a common destination share a group."""
    parent = {k: k for k in keys}

    def find(k: str) -> str:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    owner: dict[Destination, str] = {}
    for k in keys:
        for d in destinations_of(k):
            if d in owner:
                parent[find(k)] = find(owner[d])
            else:
                owner[d] = k
    groups: dict[str, list[str]] = {}
    for k in keys:
        groups.setdefault(find(k), []).append(k)
    return list(groups.values())
