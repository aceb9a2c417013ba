"""The units the routing pipeline hands to the relay: an ingress message waiting for its
confirms (:class:`PendingMessage`, a relay :class:`~rtroute.relay.outgoing.Item`) and each
republish of it (:class:`Republish`, a relay :class:`~rtroute.relay.outgoing.Outgoing`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pika

from rtroute.amqp import Settler
from rtroute.divert import Divert
from rtroute.relay.outgoing import Item, Outgoing

if TYPE_CHECKING:
    from rtroute.sidecar.exchange import ManagedExchange


class PendingMessage(Item):
    """One ingress message waiting for the outcomes of its republishes (original and copies):
    ``awaiting`` counts them (see :class:`rtroute.relay.fanin.FanIn`); ``settler`` is the one
    of the channel it came on (the ingress channel, or its shard's)."""

    __slots__ = ("deferred", "exchange", "received_at")

    def __init__(self, exchange: ManagedExchange, tag: int, received_at: float = 0.0,
                 settler: Settler | None = None) -> None:
        # Item's fields set here, not through its __init__: one per message, on the hot path
        # (tests/sidecar/test_sidecar_policy.py checks they match Item's)
        self.tag = tag
        self.awaiting = 0
        self.failed = self.settled = self.parked = False
        self.settler = settler
        self.attempts = 0
        self.settlement = None
        self.received_at = received_at  # time.monotonic() of its batch, for the latency
        self.exchange = exchange
        self.deferred = 0  # copies waiting for a transformer or a look at their address


# What one republish is, for the accounting of its confirm.
ORIGINAL = "original"  # the message itself, to NAME.bindings (or the alternate exchange)
COPY = "copy"  # a diverted copy
DEAD = "dead"  # a dead letter (of the message or of a copy)


class Republish(Outgoing):
    """One republish of an ingress message (``pending``), always ``mandatory``.

    Either ``properties`` (pika encodes the message) or ``frames``: the ready-made frames of a
    republish (``frame_count`` of them), built from the ingress frames. ``role`` says what it
    is (:data:`ORIGINAL`, :data:`COPY`, :data:`DEAD`) and ``divert`` which divert made it.
    """

    __slots__ = ("divert", "role")
    # what a republish's Outgoing fields always are (for the type checker)
    frames: bytes | None
    body: bytes
    item: PendingMessage

    def __init__(self, exchange: str, routing_key: str, properties: pika.BasicProperties | None,
                 body: bytes, pending: PendingMessage, role: str = ORIGINAL,
                 divert: Divert | None = None, frames: bytes | None = None,
                 frame_count: int = 0) -> None:
        # Outgoing's fields set here, not through its __init__ (one or more per message)
        self.exchange = exchange
        self.routing_key = routing_key
        self.frames = frames
        self.frame_count = frame_count
        self.properties = properties
        self.body = body
        self.mandatory = True
        self.item = pending
        self.checked = False
        self.role = role
        self.divert = divert

    @property
    def pending(self) -> PendingMessage:
        """The ingress message it was made for."""
        return self.item
