"""A relay wired to the stub broker, and the items and publishes the tests make."""
from __future__ import annotations

from typing import Any

import pika

from rtroute.amqp import frames
from rtroute.relay import BrokerUpstream, Item, Outgoing, Policy, Relay, Timers
from tests.stub_broker import StubBroker, StubChannel


def frames_of(channel: int, exchange: str, key: str, body: bytes, headers: dict | None = None,
              frame_max: int = 131072) -> list[bytes]:
    """A publish's frames for ``channel``: method, content header, body frames."""
    method = frames.publish_frame(channel, frames.shortstr(exchange), frames.shortstr(key),
                                  True)
    header = pika.frame.Header(channel, len(body),
                               pika.BasicProperties(headers=headers)).marshal()
    return [method, header, *frames.body_frames(channel, body, frame_max)]


class Single(Item):
    """An item that is its own one publish (the shovel's shape)."""

    __slots__ = ("body", "checked", "exchange", "frame_count", "frames", "routing_key")

    item = None
    mandatory = True
    properties = None

    def __init__(self, tag: int, settler: Any) -> None:
        super().__init__(tag, settler)
        self.awaiting = 1


class Rig:
    """A :class:`Relay` on a :class:`StubBroker`, with a :class:`BrokerUpstream` whose settler
    acks on the stub's consume channel.

    ``flows`` records ``on_flow`` calls; ``broken`` the ``on_broken`` reasons; ``nacked`` the
    upstream's ``on_nacked`` calls as ``(tag, requeue)``; ``errors`` the settlers' errors.
    """

    def __init__(self, policy: Policy | None = None, *, window: int = 10,
                 confirms: bool = True, ack_on_write: bool = False, frame_max: int = 131072,
                 has_dlx: Any = None, **relay_kwargs: Any) -> None:
        self.broker = StubBroker(frame_max=frame_max)
        self.ioloop = self.broker.ioloop
        self.timers = Timers(self.ioloop)
        self.flows: list[tuple[bool, str | None]] = []
        self.broken: list[str] = []
        self.nacked: list[tuple[int, bool]] = []
        self.errors: list[str] = []
        self.upstream = BrokerUpstream(
            self.timers, has_dlx=has_dlx,
            on_nacked=lambda item, rq: self.nacked.append((item.tag, rq)),
            on_error=lambda what, exc: self.errors.append(f"{what}: {type(exc).__name__}"))
        self.settler = self.upstream.open(self.broker.consume)
        self.policy = policy or Policy()
        self.relay = Relay(self.timers, self.policy, self.upstream, window=window,
                           confirms=confirms, ack_on_write=ack_on_write,
                           on_flow=lambda blocked, reason: self.flows.append((blocked, reason)),
                           on_broken=self.broken.append, **relay_kwargs)
        self.relay.watch(self.broker.connection)
        self.ready = False
        self.relay.attach(self.broker.publish_channel, self.broker.reader,
                          on_ready=self._on_ready)
        self.ioloop.run()

    def _on_ready(self) -> None:
        self.ready = True

    # -- items ---------------------------------------------------------------------------------

    def item(self, channel: StubChannel | None = None, settler: Any = None) -> Item:
        """A new delivery on the consume channel (or ``channel``, settled by ``settler``),
        tracked once it is submitted (the relay's ``submit`` does it)."""
        if settler is None:  # not "or": a settler with nothing tracked is falsy (len 0)
            settler = self.settler
        return self.broker.deliver(lambda tag: Item(tag, settler), settler, channel,
                                   track=False)

    def out(self, item: Item, name: str = "0", *, key: str = "k", headers: dict | None = None,
            checked: bool = True, size: int = 0, channel: StubChannel | None = None
            ) -> Outgoing:
        """A ready-made publish for ``item``: its body names the item (see the stub)."""
        number = (channel or self.broker.consume).channel_number
        body = f"{number}.{item.tag}/{name}".encode() + b"x" * size
        data = frames_of(self.broker.publish_channel.channel_number, "ex", key, body, headers)
        return Outgoing("ex", key, frames=data, frame_count=len(data), body=body,
                        item=item, checked=checked)

    def single(self, *, key: str = "k", headers: dict | None = None, checked: bool = True
               ) -> Single:
        """A 1:1 item (its own publish), delivered and put through the relay's fast lane."""
        entry = self.broker.deliver(lambda tag: Single(tag, self.settler), self.settler)
        body = f"{self.broker.consume.channel_number}.{entry.tag}/".encode()
        entry.frames = frames_of(self.broker.publish_channel.channel_number, "ex", key, body,
                                 headers)
        entry.frame_count = len(entry.frames)
        entry.exchange, entry.routing_key, entry.body = "ex", key, body
        entry.checked = checked
        self.relay.put(entry)
        return entry

    # -- what the broker saw -------------------------------------------------------------------

    def settled(self) -> list[tuple]:
        """What went to the consume channel: (kind, tag, multiple or requeue)."""
        return [(s.kind, s.tag, s.requeue if s.kind != "ack" else s.multiple)
                for s in self.broker.consume.settled]

    def seqs(self) -> list[int]:
        return [p.seq for p in self.broker.published]

    def keys(self) -> list[str]:
        return [p.routing_key for p in self.broker.published]

    def turn(self) -> None:
        """End the ioloop turn (writes and acks go out) and run what that scheduled."""
        self.ioloop.run()
