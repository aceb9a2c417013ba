"""The two units the relay moves: an upstream :class:`Item` (what is settled once) and an
:class:`Outgoing` publish made for it (what the window numbers and the broker confirms).

One item may have several publishes (the sidecar: the original and its diverted copies) or be
its own single publish (the shovel: a source message is published once, as it came). In the
second case one object plays both parts: a subclass of :class:`Item` that has the attributes of
:class:`Outgoing` (the outbox reads them by name, it never checks the class) and leaves
``item`` None, so a 1:1 relay allocates nothing extra per message.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rtroute.amqp.settle import Delivery

__all__ = ["Item", "Outgoing"]


class Item(Delivery):
    """One upstream unit: a delivery from a consume channel (or, for a publisher, a future).

    Attributes (besides :class:`~rtroute.amqp.settle.Delivery`'s ``tag``, ``awaiting``,
    ``failed``, ``settled`` and ``parked``; ``awaiting`` counts its publishes without an
    outcome, the ones still to be made included):
        settler: what acks it: the :class:`~rtroute.amqp.settle.Settler` of the channel it came
            on (each shard has its own), or the upstream itself.
        attempts: how often one of its publishes was made again after a nack (the policy
            counts them).
        settlement: how the policy settled it before every publish had its outcome (the first
            one wins), or None.
    """

    __slots__ = ("attempts", "settlement", "settler")

    def __init__(self, tag: int, settler: Any = None) -> None:
        super().__init__(tag)
        self.settler = settler
        self.attempts = 0
        self.settlement: Any = None


class Outgoing:
    """One ``basic.publish`` waiting for window room, then the context of its confirm.

    Either ``frames``: the method, content header and body frames ready for the publish
    channel (one ``bytes`` or a list of frames, ``frame_count`` in all), or ``properties`` and
    ``body`` for pika to encode. ``body`` (bytes, or a function that makes them) is what a
    ``basic.return`` is matched against. ``checked``: the content header is known to fit the
    channel's ``frame_max`` (made for it, or passed through unchanged), so the outbox does not
    measure it again. ``item``: the :class:`Item` it was made for.
    """

    __slots__ = ("body", "checked", "exchange", "frame_count", "frames", "item", "mandatory",
                 "properties", "routing_key")

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        *,
        frames: bytes | list[bytes] | None = None,
        frame_count: int = 0,
        properties: Any = None,
        body: bytes | Callable[[], bytes] | None = None,
        mandatory: bool = True,
        item: Item | None = None,
        checked: bool = False,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.frames = frames
        self.frame_count = frame_count
        self.properties = properties
        self.body = body
        self.mandatory = mandatory
        self.item = item
        self.checked = checked

    def __repr__(self) -> str:
        return f"<Outgoing {self.exchange!r} {self.routing_key!r}>"
