"""The sidecar's outcome rules on the relay engine, on the stub broker (no RabbitMQ): what each
answer to a republish does to its ingress message and to the counters."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from rtroute.amqp import frames
from rtroute.ops.metrics import LatencyHistogram
from rtroute.routing.exchange_router import ERROR_HEADER
from rtroute.sidecar.dead_letters import DIVERT_HEADER, SOURCE_HEADER
from rtroute.sidecar.layout import DEAD_LETTER_EXCHANGE
from rtroute.sidecar.policy import SidecarPolicy
from rtroute.sidecar.republish import COPY, DEAD, ORIGINAL, PendingMessage, Republish
from rtroute.sidecar.status import Counters
from tests.relay.rig import Rig, frames_of


class Exchange:
    """What the policy reads of a managed exchange."""

    def __init__(self, broker_routed: bool = False) -> None:
        self.spec = SimpleNamespace(name="logs")
        self.counters = Counters()
        self.latency = LatencyHistogram()
        self.broker_routed = broker_routed
        self.unroutable: list[str] = []

    def note_unroutable(self, routing_key: str) -> None:
        self.unroutable.append(routing_key)


def divert(name: str = "d1") -> Any:
    return SimpleNamespace(name=name, forwarded=0, unrouted=0, dead_lettered=0)


class SidecarRig(Rig):
    """The relay on the stub broker with the sidecar's policy, as the pipeline wires it."""

    def __init__(self, **kwargs: Any) -> None:
        self.publish_frames: frames.PublishFrames | None = None
        super().__init__(SidecarPolicy(lambda: (self.publish_frames, 131072)), **kwargs)
        self.publish_frames = frames.PublishFrames(self.broker.publish_channel.channel_number,
                                                   100)

    def message(self, ex: Exchange, received_at: float = 0.0) -> PendingMessage:
        settler = self.settler
        pending = self.broker.deliver(lambda tag: PendingMessage(ex, tag, received_at, settler),
                                      settler, track=False)  # submit tracks it
        return pending

    def republish(self, pending: PendingMessage, role: str = ORIGINAL, name: str = "0", *,
                  exchange: str = "logs.bindings", key: str = "k", headers: dict | None = None,
                  via: Any = None) -> Republish:
        body = f"{self.broker.consume.channel_number}.{pending.tag}/{name}".encode()
        data = b"".join(frames_of(self.broker.publish_channel.channel_number, exchange, key,
                                  body, headers))
        return Republish(exchange, key, None, body, pending, role, via, frames=data,
                         frame_count=3)


def test_the_message_is_acked_once_the_original_and_every_copy_are_confirmed():
    rig, ex, d = SidecarRig(), Exchange(), divert()
    m = rig.message(ex, received_at=1.0)
    rig.relay.submit(m, [rig.republish(m), rig.republish(m, COPY, "c", exchange="", key="q",
                                                         via=d)])
    rig.turn()
    rig.broker.ack(2)
    rig.turn()
    assert rig.settled() == [] and d.forwarded == 1
    rig.broker.ack(1)
    rig.turn()
    assert rig.settled() == [("ack", 1, True)]
    assert ex.counters.republished == 1 and ex.latency.count == 1


def test_a_nacked_republish_requeues_the_message_with_a_reject_after_its_other_answers():
    rig, ex, d = SidecarRig(), Exchange(), divert()
    m = rig.message(ex)
    rig.relay.submit(m, [rig.republish(m), rig.republish(m, COPY, "c", via=d)])
    rig.turn()
    rig.broker.nack(1)
    rig.turn()
    assert rig.settled() == []  # the copy has no answer yet
    rig.broker.ack(2)
    rig.turn()
    assert rig.settled() == [("reject", 1, True)]
    assert rig.nacked == [(1, True)] and ex.latency.count == 0


def test_a_returned_copy_is_replaced_by_its_dead_letter_and_the_message_waits_for_it():
    rig, ex, d = SidecarRig(), Exchange(), divert("audit")
    m = rig.message(ex)
    rig.relay.submit(m, [rig.republish(m, COPY, "c", exchange="", key="gone", via=d,
                                       headers={"keep": "me"})])
    rig.turn()
    rig.broker.return_(1)
    rig.broker.ack(1)
    rig.turn()
    dead = rig.broker.published[-1]
    assert (dead.exchange, dead.routing_key) == (DEAD_LETTER_EXCHANGE, "gone")
    headers = dead.properties.headers
    assert headers["keep"] == "me" and headers[DIVERT_HEADER] == "audit"
    assert headers[SOURCE_HEADER] == "logs" and "no queue took the copy" in headers[ERROR_HEADER]
    assert rig.settled() == [] and (d.unrouted, d.dead_lettered, d.forwarded) == (1, 1, 0)
    rig.broker.ack(dead.seq)
    rig.turn()
    assert rig.settled() == [("ack", 1, True)]


def test_a_returned_original_is_counted_then_acked():
    for broker_routed in (False, True):
        rig, ex = SidecarRig(), Exchange(broker_routed)
        m = rig.message(ex)
        rig.relay.submit(m, [rig.republish(m, key="a.b")])
        rig.turn()
        rig.broker.return_(1)
        rig.broker.ack(1)
        rig.turn()
        rig.broker.ready(m)
        rig.turn()
        assert rig.settled() == [("ack", 1, True)]
        assert len(rig.broker.published) == 1  # nothing published in its place
        if broker_routed:
            assert ex.unroutable == ["a.b"] and ex.counters.returned == 0
        else:
            assert ex.unroutable == [] and ex.counters.returned == 1


def test_a_republish_over_frame_max_becomes_a_minimal_dead_letter_saying_why():
    rig, ex = SidecarRig(frame_max=4096), Exchange()
    m = rig.message(ex)
    rig.relay.submit(m, [rig.republish(m, headers={"big": "x" * 5000})])
    rig.turn()
    (dead,) = rig.broker.published
    assert dead.exchange == DEAD_LETTER_EXCHANGE
    headers = dead.properties.headers
    assert "frame_max" in headers[ERROR_HEADER] and "big" not in headers
    assert ex.counters.dead_lettered == 1
    rig.broker.ack(dead.seq)
    rig.turn()
    assert rig.settled() == [("ack", 1, True)]


def test_a_lost_connection_forgets_every_message_and_acks_nothing_on_the_next():
    rig, ex = SidecarRig(), Exchange()
    m = rig.message(ex)
    rig.relay.submit(m, [rig.republish(m)])
    rig.turn()
    rig.relay.detach()
    rig.broker.ack(1)
    rig.turn()
    assert rig.settled() == [] and m not in rig.settler


def test_a_dead_letter_nothing_took_still_settles_its_message():
    rig, ex = SidecarRig(), Exchange()
    m = rig.message(ex)
    rig.relay.submit(m, [rig.republish(m, DEAD, exchange=DEAD_LETTER_EXCHANGE)])
    rig.turn()
    rig.broker.return_(1)
    rig.broker.ack(1)
    rig.broker.ready(m)
    rig.turn()
    assert rig.settled() == [("ack", 1, True)] and len(rig.broker.published) == 1


def test_the_sidecar_units_have_every_field_of_the_relay_units_with_their_defaults():
    """PendingMessage and Republish set the relay's fields themselves (the hot path): they must
    stay those of Item and Outgoing."""
    from rtroute.relay.outgoing import Item, Outgoing

    ex, settler = Exchange(), object()
    item, pending = Item(7, settler), PendingMessage(ex, 7, 0.0, settler)  # type: ignore[arg-type]
    slots = {name for cls in type(item).__mro__ for name in getattr(cls, "__slots__", ())}
    assert {name: getattr(pending, name) for name in slots} == \
        {name: getattr(item, name) for name in slots}
    out = Outgoing("x", "k", frames=b"f", frame_count=3, body=b"b", item=pending)
    republish = Republish("x", "k", None, b"b", pending, frames=b"f", frame_count=3)
    assert {name: getattr(republish, name) for name in Outgoing.__slots__} == \
        {name: getattr(out, name) for name in Outgoing.__slots__}


def test_a_message_id_that_is_no_string_is_left_out_of_a_minimal_dead_letter():
    """The minimal dead letter is the last resort: what could not be encoded stays out."""
    import pika

    from rtroute.sidecar.dead_letters import minimal_dead_letter

    pending = PendingMessage(Exchange(), 1)  # type: ignore[arg-type]
    out = Republish("x", "k", pika.BasicProperties(message_id=12345, headers={}), b"b",
                    pending, COPY, divert())
    dead = minimal_dead_letter(out, "its properties cannot be encoded")
    assert dead.properties.message_id is None and dead.exchange == DEAD_LETTER_EXCHANGE
    kept = minimal_dead_letter(Republish("x", "k", pika.BasicProperties(message_id="m-1"),
                                         b"b", pending, COPY, divert()), "why")
    assert kept.properties.message_id == "m-1"
