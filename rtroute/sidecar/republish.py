"""The units the routing pipeline works with: an ingress message waiting for its confirms
(:class:`PendingMessage`) and each republish of it (:class:`Republish`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pika

from rtroute.amqp import Delivery, Settler
from rtroute.divert import Divert

if TYPE_CHECKING:
    from rtroute.sidecar.exchange import ManagedExchange


class PendingMessage(Delivery):
    """One ingress message waiting for the confirms of its republishes (original and copies):
    ``awaiting`` counts them (see :class:`rtroute.amqp.settle.Settler`)."""

    __slots__ = ("deferred", "exchange", "received_at", "settler")

    def __init__(self, exchange: ManagedExchange, tag: int, received_at: float = 0.0,
                 settler: Settler | None = None) -> None:
        super().__init__(tag)
        self.settler = settler  # of the channel it came on (the ingress one, or its shard's)
        self.received_at = received_at  # time.monotonic() of its batch, for the latency
        self.exchange = exchange
        self.deferred = 0  # copies waiting for a look at their forwarding address


# What one republish is, for the accounting of its confirm.
ORIGINAL = "original"  # the message itself, to NAME.bindings (or the alternate exchange)
COPY = "copy"  # a diverted copy
DEAD = "dead"  # a dead letter (of the message or of a copy)


class Republish:
    """One republish waiting for room in the confirm window (then the context of its confirm).

    Either ``properties`` (pika encodes the message) or ``frames``: the ready-made frames of an
    original republish (``frame_count`` of them), built from the ingress frames.
    """

    __slots__ = ("body", "divert", "exchange", "frame_count", "frames", "pending", "properties",
                 "role", "routing_key")

    def __init__(self, exchange: str, routing_key: str, properties: pika.BasicProperties | None,
                 body: bytes, pending: PendingMessage, role: str = ORIGINAL,
                 divert: Divert | None = None, frames: bytes | None = None,
                 frame_count: int = 0) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.properties = properties
        self.body = body
        self.pending = pending
        self.role = role
        self.divert = divert
        self.frames = frames
        self.frame_count = frame_count
