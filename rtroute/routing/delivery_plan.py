"""Plans the republishes that deliver one routed message of an rtopic exchange. Pure, no I/O.

(For the ``topic``/``direct``/``fanout``/``headers`` exchanges the sidecar manages for their
diverts there is nothing to plan: ``NAME.bindings`` is a real exchange of that type and one
republish with ``BCC`` = the alias entries suffices; see
:class:`rtroute.routing.exchange_router.BrokerRoutedRouter`. Diverted copies are planned by
:mod:`rtroute.divert.copies`.)

The sidecar hands matched *binding keys* to RabbitMQ: one publish to ``NAME.bindings`` with
the original routing key, the original headers and ``BCC`` = binding keys. RabbitMQ resolves
keys to queues, gives each queue one copy and strips ``BCC``. The native planner
(``RTopicTable.plan``, src_c/reach.h) picks one key per destination; :func:`plan_delivery` is
what decides when that list does not fit one header frame, or when ``NAME.bindings`` is a topic
exchange holding keys with ``*``/``#`` words (see :class:`ExchangeRouter`).

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

A header frame must fit in ``frame_max``, which bounds one publish's ``BCC`` list. When the
matched keys do not fit, only a *cover* of them travels: RabbitMQ gives a destination one copy
per publish however many of its keys match, so one key per destination is enough (7,000 keys
bound to one queue become one ``BCC`` entry). The cover is greedy (first the key that reaches
the most destinations not yet covered; deterministic) and leaves out the destinations that
the routing key and the CC entries reach, since RabbitMQ routes those on every publish of the
original key. A cover that still does not fit is split into several publishes such that no
destination is reachable from two of them (keys that share a destination travel together).
That is only safe when neither the routing key nor a CC entry reaches a destination; otherwise
there is one publish of the original key, with as many groups of keys as fit. A destination
that still cannot be carried (its group does not fit one frame, or the one publish is full) is
reached on its own:

- if no CC entry reaches a destination: with a publish to ``NAME.bindings`` whose routing key
  is a matched key reaching only queues that no other publish reaches (``published_key`` holds
  the key as published; the consumer sees the binding key as the routing key, as with
  ``by_matched_key``). Never a key that reaches an exchange, which would route that key instead
  of the key as published;
- otherwise (a bound CC entry would be routed again by that publish), and when no such key
  exists: a queue through the default exchange (the consumer then sees exchange ``""`` and the
  queue name as routing key: a documented difference) and an exchange directly with the
  original routing key. The kept CC header is routed on the default exchange too, so a queue
  *named* like a CC entry gets a copy of each such publish (the planner cannot see queues by
  name).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["BCC_ENTRY_COST", "BCC_FIXED_COST", "Destination", "Publish", "bcc_cost", "bcc_fits",
           "bindings_exchange_type", "plan_delivery"]

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
    # set when routing_key is a matched binding key instead of the key as published
    # (``by_matched_key``, or a destination reached on its own): the key as published, for a
    # header
    published_key: str | None = None


def bcc_cost(keys: Iterable[str]) -> int:
    """Encoded size in bytes of a ``BCC`` header holding ``keys``."""
    return BCC_FIXED_COST + sum(BCC_ENTRY_COST + len(k.encode("utf-8")) for k in keys)


def bcc_fits(keys: Sequence[str], budget: int) -> bool:
    """A ``BCC`` header holding ``keys`` fits in ``budget`` bytes (the cheap bound first)."""
    return len(keys) * (BCC_ENTRY_COST + 255) + BCC_FIXED_COST <= budget or \
        bcc_cost(keys) <= budget


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
        bindings_exchange: the exchange holding the bindings (``NAME.bindings``).
        routing_key: the routing key as published (kept on every publish to
            ``bindings_exchange`` but those that set ``published_key``).
        cc: the string entries of the ``CC`` header as published (the callers keep it on
            every publish).
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
    if {routing_key, *cc}.issuperset(keys):
        # RabbitMQ routes the routing key and CC on every publish: an exact-key publish needs
        # no BCC (which costs the broker a header rewrite and a trie walk per entry)
        return [Publish(bindings_exchange, routing_key, ())]
    if bcc_fits(keys, budget):
        return [Publish(bindings_exchange, routing_key, tuple(keys))]

    reach = {k: frozenset(destinations_of(k)) for k in keys}
    # reached by every publish to bindings_exchange (CC) or of the original key (both)
    cc_routed = {d for c in cc for d in destinations_of(c)}
    routed = cc_routed.union(destinations_of(routing_key))
    cover = _cover(keys, reach, routed)
    if not cover:
        return [Publish(bindings_exchange, routing_key, ())]
    groups = _groups_sharing_destinations(cover, reach.__getitem__)
    groups.sort(key=len, reverse=True)  # stable: ties keep the keys' order
    # a second publish of the original key would reach the routed destinations again
    splittable = not routed

    publishes: list[Publish] = []
    current: list[str] = []
    cost = BCC_FIXED_COST
    leftover: list[str] = []
    for group in groups:
        group_cost = bcc_cost(group) - BCC_FIXED_COST
        if cost + group_cost <= budget:
            current += group
            cost += group_cost
        elif splittable and BCC_FIXED_COST + group_cost <= budget:
            publishes.append(Publish(bindings_exchange, routing_key, tuple(sorted(current))))
            current = list(group)
            cost = BCC_FIXED_COST + group_cost
        else:
            leftover += group  # too large for one frame, or the one publish is full
    if current or not splittable:
        publishes.append(Publish(bindings_exchange, routing_key, tuple(sorted(current))))

    reached = routed.union(*(reach[k] for p in publishes for k in p.bcc or ()))
    rest = sorted({d for k in leftover for d in reach[k]} - reached)
    own_keys = {} if cc_routed else _keys_reaching_only(keys, reach, set(rest))
    for destination in rest:
        if destination in reached:
            continue  # by the bound key of an earlier one
        for k in own_keys.get(destination, ()):
            if reached.isdisjoint(reach[k]):
                publishes.append(Publish(bindings_exchange, k, (), routing_key))
                reached |= reach[k]
                break
        else:
            kind, name = destination
            if kind == "exchange":
                publishes.append(Publish(name, routing_key, None))
            else:
                publishes.append(Publish("", name, None))
            reached.add(destination)
    return publishes


def _cover(
    keys: list[str], reach: Mapping[str, frozenset[Destination]], skip: set[Destination]
) -> list[str]:
    """A few of ``keys`` (sorted) that together reach every destination that ``keys`` reach,
    but those in ``skip``: greedy, the key that reaches the most destinations not yet covered
    first (deterministic). A key is looked at again only when some of its destinations
    were covered meanwhile, so the cost stays near the number of (key, destination) pairs."""
    uncovered = set().union(*reach.values()) - skip
    buckets: dict[int, list[str]] = {}  # uncovered destinations of a key (maybe fewer now)
    for k in reversed(keys):  # pop() takes them in key order
        n = len(reach[k] & uncovered)
        if n:
            buckets.setdefault(n, []).append(k)
    chosen = []
    for n in range(max(buckets, default=0), 0, -1):
        bucket = buckets.get(n, [])
        while bucket:
            k = bucket.pop()
            fresh = reach[k] & uncovered
            if len(fresh) == n:
                chosen.append(k)
                uncovered -= fresh
            elif fresh:
                buckets.setdefault(len(fresh), []).append(k)
    return sorted(chosen)


def _keys_reaching_only(
    keys: list[str], reach: Mapping[str, frozenset[Destination]], wanted: set[Destination]
) -> dict[Destination, list[str]]:
    """Per destination of ``wanted``, the keys (in order) that reach only queues of
    ``wanted``: publishing such a key as the routing key reaches nothing else. (An exchange
    would route the key instead of the key as published.)"""
    found: dict[Destination, list[str]] = {}
    for k in keys:
        ds = reach[k]
        if ds and ds <= wanted and all(kind == "queue" for kind, _ in ds):
            for d in ds:
                found.setdefault(d, []).append(k)
    return found


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
