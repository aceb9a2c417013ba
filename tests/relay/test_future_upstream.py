"""The publisher's engine on the stub broker (no RabbitMQ): each outcome resolves or fails the
right MessageFuture (the relay's FanIn, the PublisherPolicy, a FutureUpstream), a message of
several publishes is settled once all are answered, and a lost connection fails what was in
flight while what was not sent waits for the next connection."""
from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pika.spec
import pytest

from rtroute.publisher import (
    PUBLISHED_KEY_HEADER,
    MessageFuture,
    PublisherClosed,
    PublisherPolicy,
    PublishFailed,
    PublishNacked,
    PublishReturned,
)
from rtroute.publisher.engine import PublisherEngine
from rtroute.relay import FutureUpstream, Item, Settlement
from rtroute.routing import PreconditionFailed
from rtroute.routing.exchange_router import ExchangeRouter
from tests.stub_broker import StubBroker

LONG = "w" * 60  # 100 such keys are more than one 4 KiB header frame holds


class PublisherRig:
    """A :class:`PublisherEngine` attached to a :class:`StubBroker` (its ReconnectingConnection
    is never started), with ``NAME.bindings`` listed: ``bindings`` maps queue -> key."""

    def __init__(self, bindings: dict[str, str] | None = None, *, window: int = 10,
                 frame_max: int = 131072, fast: bool = True) -> None:
        self.router = ExchangeRouter("ex", "rtopic")
        for queue, key in (bindings or {"A": "a.b"}).items():
            self.router.bind(("queue", queue), key)
        self.settled: list[MessageFuture] = []
        self.engine = PublisherEngine(
            ["amqp://guest:guest@127.0.0.1:1/%2F"], "ex", router=self.router,
            management=None, masked_uri="amqp://127.0.0.1:1/", vhost="/",  # type: ignore
            policy=PublisherPolicy("ex"), on_settled=self._settled, window=window,
            published_key_header=PUBLISHED_KEY_HEADER, connection_name="test")
        self.engine.watcher = SimpleNamespace(ready=True, last_error=None)  # type: ignore
        self.owner = SimpleNamespace(_condition=threading.Condition())
        self.connect(frame_max, fast)

    def connect(self, frame_max: int = 131072, fast: bool = True) -> None:
        """A new connection (a new stub broker), as after a reconnect."""
        self.broker = StubBroker(frame_max=frame_max)
        self.fast = fast
        self.engine.attach(self.broker.connection, self.broker.publish_channel,
                           self.broker.reader if fast else None)
        self.broker.ioloop.run()  # confirm.select-ok

    def ack(self, seq: int) -> None:
        """``basic.ack``; without the frame reader pika hands it to the window."""
        self.broker.ack(seq)
        if not self.fast:
            self.broker.publish_channel._on_ack_nack(
                SimpleNamespace(method=pika.spec.Basic.Ack(delivery_tag=seq)))

    def _settled(self, futures: Any) -> None:
        for future in futures:
            future._settle()
            self.settled.append(future)

    def publish(self, key: str = "a.b", body: bytes = b"m", *, headers: dict | None = None,
                mandatory: bool = False, drain: bool = True) -> MessageFuture:
        future = MessageFuture(self.owner, key, self.engine.upstream)
        self.engine.queue.append((future, key, body, None, headers, mandatory))
        if drain:
            self.drain()
        return future

    def drain(self) -> None:
        self.engine.drain()
        self.broker.ioloop.run()


def test_an_acked_message_resolves_its_future_once():
    rig = PublisherRig()
    future = rig.publish("*.b")
    [published] = rig.broker.published
    assert (published.exchange, published.routing_key) == ("ex.bindings", "*.b")
    assert published.properties.headers == {"BCC": ["a.b"]}
    assert not future.done()
    rig.broker.ack(1)
    assert future.done() and future.exception() is None and future.matched == ("a.b",)
    assert rig.settled == [future] and rig.engine.upstream.confirmed == 1
    assert rig.engine.idle()


def test_one_multiple_ack_resolves_every_message_it_covers():
    rig = PublisherRig()
    futures = [rig.publish(body=b"%d" % i) for i in range(5)]
    rig.broker.ack(5, multiple=True)
    assert all(f.done() and f.exception() is None for f in futures)
    assert rig.settled == futures


def test_a_nacked_publish_fails_its_future_with_publish_nacked_only():
    rig = PublisherRig()
    first, second = rig.publish(body=b"1"), rig.publish(body=b"2")
    rig.broker.nack(1)
    rig.broker.ack(2)
    assert isinstance(first.exception(), PublishNacked)
    assert str(first.exception()) == "the broker nacked 'a.b'"
    assert second.exception() is None
    assert (rig.engine.upstream.confirmed, rig.engine.upstream.failed) == (1, 1)


def test_a_returned_mandatory_message_fails_with_publish_returned():
    rig = PublisherRig()
    future = rig.publish("x.#", mandatory=True)  # no binding: published without BCC
    assert rig.broker.by_seq(1).mandatory
    rig.broker.return_(1, 312, "NO_ROUTE")
    rig.broker.ack(1)
    error = future.exception()
    assert isinstance(error, PublishReturned)
    assert (error.reply_code, error.reply_text) == (312, "NO_ROUTE")
    assert str(error) == "'x.#' was returned: 312 NO_ROUTE"
    assert rig.engine.unroutable == 1


def test_a_channel_closed_by_the_broker_fails_what_was_in_flight_with_publish_failed():
    rig = PublisherRig()
    bulk = rig.publish(body=b"1")
    mandatory = rig.publish(body=b"2", mandatory=True)  # the per-message path
    rig.broker.close_channel(rig.broker.publish_channel, 406, "PRECONDITION_FAILED")
    for future in (bulk, mandatory):
        assert isinstance(future.exception(), PublishFailed)
        assert "not confirmed" in str(future.exception())
        assert "PRECONDITION_FAILED" in str(future.exception())


@pytest.mark.parametrize("fast", [True, False])
def test_a_header_over_frame_max_fails_that_message_with_value_error_and_the_next_goes_on(fast):
    rig = PublisherRig(frame_max=4096, fast=fast)
    big = rig.publish(body=b"big", headers={"pad": "x" * 5000})
    ok = rig.publish(body=b"ok")
    assert isinstance(big.exception(), ValueError) and "frame_max" in str(big.exception())
    assert big.done()
    assert rig.broker.bodies() == [b"ok"]  # the big one was never written
    rig.ack(1)
    assert ok.done() and ok.exception() is None


def test_a_malformed_cc_fails_with_precondition_failed_before_anything_is_written():
    rig = PublisherRig()
    bad = rig.publish(headers={"CC": "a.b"})
    assert isinstance(bad.exception(), PreconditionFailed) and bad.done()
    assert rig.broker.published == []


def test_a_message_of_several_publishes_is_resolved_once_all_are_answered():
    rig = PublisherRig({f"q{i}": f"many.{i:03d}.{LONG}" for i in range(100)}, frame_max=4096)
    future = rig.publish("many.#")
    seqs = [p.seq for p in rig.broker.published]
    assert len(seqs) >= 2 and len(future.matched) == 100
    assert future.awaiting == len(seqs)
    for seq in reversed(seqs[1:]):  # in any order
        rig.broker.ack(seq)
        assert not future.done()
    rig.broker.ack(seqs[0])
    assert future.done() and future.exception() is None and rig.settled == [future]


def test_one_nacked_publish_of_several_fails_the_message_once_all_are_answered():
    rig = PublisherRig({f"q{i}": f"many.{i:03d}.{LONG}" for i in range(100)}, frame_max=4096)
    future = rig.publish("many.#")
    seqs = [p.seq for p in rig.broker.published]
    rig.broker.nack(seqs[0])
    assert not future.done()
    for seq in seqs[1:]:
        rig.broker.ack(seq)
    assert isinstance(future.exception(), PublishNacked) and rig.settled == [future]


def test_a_lost_connection_fails_in_flight_and_keeps_unsent_ones_for_the_next_connection():
    rig = PublisherRig(window=2)
    futures = [rig.publish(body=b"%d" % i, drain=False) for i in range(5)]
    rig.drain()
    assert len(rig.broker.published) == 2 and len(rig.engine.queue) == 3
    rig.broker.drop_connection()
    rig.engine._on_lost("connection reset")
    assert all(isinstance(f.exception(), PublishFailed) for f in futures[:2])
    assert not any(f.done() for f in futures[2:]) and len(rig.engine.queue) == 3
    rig.connect()  # the next connection sends them, in order
    rig.broker.ack_all()
    rig.drain()
    rig.broker.ack_all()
    assert rig.broker.bodies()[0] == b"2"
    assert all(f.done() and f.exception() is None for f in futures[2:])
    assert rig.engine.idle()


def test_a_message_cut_short_by_a_lost_connection_fails_with_publish_failed():
    """More publishes than the window holds: the rest wait in the relay's outbox, and the
    message fails when the connection goes before they were written."""
    rig = PublisherRig({f"q{i}": f"many.{i:03d}.{LONG}" for i in range(100)}, window=1,
                       frame_max=4096)
    future = rig.publish("many.#")
    assert len(rig.broker.published) == 1 and rig.engine.relay.queued
    rig.broker.drop_connection()
    rig.engine._on_lost("connection reset")
    assert isinstance(future.exception(), PublishFailed) and future.done()
    assert rig.settled == [future] and rig.engine.idle()


def test_nothing_is_routed_while_the_broker_blocks_the_connection():
    rig = PublisherRig()
    rig.broker.block()
    rig.broker.ioloop.run()
    futures = [rig.publish(body=b"%d" % i) for i in range(3)]
    assert rig.broker.published == [] and len(rig.engine.queue) == 3
    assert rig.engine.relay.blocked
    rig.broker.unblock()  # the relay's outbox resumes, and the engine drains
    rig.broker.ioloop.run()
    assert rig.broker.bodies() == [b"0", b"1", b"2"] and not rig.engine.relay.blocked
    rig.broker.ack(3, multiple=True)
    assert all(f.done() and f.exception() is None for f in futures)


def test_closing_fails_what_was_not_sent_with_publisher_closed():
    rig = PublisherRig(window=1)
    sent = rig.publish(body=b"1")
    waiting = rig.publish(body=b"2")
    rig.engine.fail_unsent()
    assert isinstance(waiting.exception(), PublisherClosed) and waiting.done()
    assert not sent.done()


def test_closing_fails_a_message_cut_short_with_publisher_closed():
    """Its publishes that wait in the relay go to the policy's unsent() (the relay's abandon):
    the message fails once, with the closing's error."""
    rig = PublisherRig({f"q{i}": f"many.{i:03d}.{LONG}" for i in range(100)}, window=1,
                       frame_max=4096)
    future = rig.publish("many.#")
    assert len(rig.broker.published) == 1 and rig.engine.relay.queued
    rig.engine.fail_unsent()
    assert not rig.engine.relay.queued and not future.done()  # one publish still in flight
    rig.broker.ack(1)
    rig.broker.ioloop.run()
    assert isinstance(future.exception(), PublisherClosed) and rig.settled == [future]


def test_the_future_upstream_settles_each_item_once():
    settled: list[list] = []
    upstream = FutureUpstream(lambda items: settled.append(list(items)))
    ok, failed, both = Item(0, upstream), Item(0, upstream), Item(0, upstream)
    upstream.ack(ok)
    upstream.settle_as(failed, Settlement.LEAVE)
    upstream.ack_many([ok, both])
    upstream.settle_as(both, Settlement.LEAVE)
    assert settled == [[ok], [failed], [both]]
    assert failed.failed and not both.failed
    assert (upstream.confirmed, upstream.failed) == (2, 1) and upstream.idle


def test_a_message_future_has_every_field_of_an_item_with_its_defaults():
    """MessageFuture sets the relay's item fields itself (the publishing thread's hot path, as
    the sidecar's PendingMessage does): they must stay those of Item."""
    settler = object()
    item, future = Item(0, settler), MessageFuture(None, "k", settler)
    slots = {name for cls in Item.__mro__ for name in getattr(cls, "__slots__", ())}
    assert {name: getattr(future, name) for name in slots} == \
        {name: getattr(item, name) for name in slots}
