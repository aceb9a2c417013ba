"""Varied traffic for the benches: many routing keys in turn, each with the bindings it needs,
for the rtopic paths (plain binding keys, the wildcard in the published key) and for the
native topic exchange (the wildcard in the binding key, a literal published key), so that
every path delivers the same copies to the same queues.

One key repeated lets caches answer most of the work (the proxy's rewrite cache, the broker's
own); real traffic varies. Each :class:`Traffic` names its keys and bindings; the benches
publish the keys in turn (with ``vary_header``, a header whose value changes per message, as
amqplib and clients that stamp each message send one).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Traffic", "fanout", "mixed", "varied_literal", "varied_star"]


@dataclass(frozen=True)
class Traffic:
    """Keys published in turn and the bindings that route them.

    Attributes:
        queues: how many queues the bindings name (queue ``i`` of the bench's own).
        rtopic_keys: what rtopic publishers send, in turn.
        rtopic_bindings: ``(queue, binding key)`` on ``NAME.bindings`` (and the plugin's).
        topic_keys: what the native topic exchange's publisher sends, in turn (same order).
        topic_bindings: ``(queue, binding key)`` on the native topic exchange.
        copies: the queues each key reaches (same order).
    """

    queues: int
    rtopic_keys: tuple[str, ...]
    rtopic_bindings: tuple[tuple[int, str], ...]
    topic_keys: tuple[str, ...]
    topic_bindings: tuple[tuple[int, str], ...]
    copies: tuple[int, ...]

    def total_copies(self, messages: int) -> int:
        """The copies ``messages`` publishes deliver (the keys taken in turn)."""
        rounds, rest = divmod(messages, len(self.copies))
        return rounds * sum(self.copies) + sum(self.copies[:rest])


def varied_literal(keys: int = 10_000, queues: int = 10) -> Traffic:
    """``keys`` different literal keys, one binding each (key ``i`` to queue ``i % queues``)."""
    names = tuple(f"hit.k{i}.t0" for i in range(keys))
    bindings = tuple((i % queues, k) for i, k in enumerate(names))
    return Traffic(queues, names, bindings, names, bindings, (1,) * keys)


def varied_star(keys: int = 1_000, per_key: int = 10, queues: int = 10) -> Traffic:
    """``keys`` different keys with one ``*`` (``w{i}.*``), each matching ``per_key`` bindings
    of one queue (``w{i}.t{j}``); the topic exchange binds ``w{i}.*`` and gets ``w{i}.t0``."""
    return Traffic(
        queues,
        tuple(f"w{i}.*" for i in range(keys)),
        tuple((i % queues, f"w{i}.t{j}") for i in range(keys) for j in range(per_key)),
        tuple(f"w{i}.t0" for i in range(keys)),
        tuple((i % queues, f"w{i}.*") for i in range(keys)),
        (1,) * keys)


def fanout(keys: int = 100, queues: int = 10) -> Traffic:
    """``keys`` different keys ``f{i}.*``, each reaching every one of ``queues`` queues (queue
    ``q`` bound with ``f{i}.t{q}``); the topic exchange binds ``f{i}.*`` to each queue."""
    return Traffic(
        queues,
        tuple(f"f{i}.*" for i in range(keys)),
        tuple((q, f"f{i}.t{q}") for i in range(keys) for q in range(queues)),
        tuple(f"f{i}.t0" for i in range(keys)),
        tuple((q, f"f{i}.*") for i in range(keys) for q in range(queues)),
        (queues,) * keys)


def mixed() -> Traffic:
    """In turn: a literal key, a ``*`` key over 10 bindings of one queue, a literal key, and a
    key reaching 10 queues (2,000 + 5,000 + 1,000 bindings over 10 queues)."""
    literal, star, wide = varied_literal(2_000), varied_star(500), fanout(100)
    rtopic, topic, copies = [], [], []
    for i in range(1_000):
        for part, j in ((literal, 2 * i), (star, i % 500), (literal, 2 * i + 1),
                        (wide, i % 100)):
            rtopic.append(part.rtopic_keys[j])
            topic.append(part.topic_keys[j])
            copies.append(part.copies[j])
    return Traffic(10, tuple(rtopic),
                   literal.rtopic_bindings + star.rtopic_bindings + wide.rtopic_bindings,
                   tuple(topic),
                   literal.topic_bindings + star.topic_bindings + wide.topic_bindings,
                   tuple(copies))
