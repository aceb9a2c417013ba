"""The publisher's engine on the stub broker (tests/stub_broker.py): the real
:class:`PublisherEngine` connects through its :class:`ReconnectingConnection`, declares,
installs its frame reader, routes what callers queue and publishes it through the relay; each
message's future then says what happened -- confirmed, nacked, returned, failed with the link
-- and what was not sent yet waits for the next connection. No RabbitMQ: the broker tier keeps
parity and loss under real faults (tests/publisher/test_publisher_broker.py,
test_publisher_blocked.py)."""
from __future__ import annotations

from typing import Any

import pika
import pytest

import rtroute.publisher.engine as engine_module
from rtroute.amqp.connection import ReconnectingConnection
from rtroute.publisher.engine import PublisherEngine
from rtroute.publisher.future import MessageFuture, PublishFailed, PublishNacked, PublishReturned
from rtroute.publisher.policy import PublisherPolicy
from rtroute.routing.exchange_router import ExchangeRouter
from tests.stub_rabbit import StubRabbit

URI = "amqp://guest:guest@stub.invalid:5672/%2F"


class Management:
    """The management API as the engine asks it: this broker, a direct ``NAME.bindings``."""

    def expect_broker(self, *_args: Any) -> None:
        pass

    def verify_broker(self) -> None:
        pass

    def exchange(self, _name: str, _vhost: str) -> dict:
        return {"type": "direct"}


class Watcher:
    """The bindings, listed once (the router holds them: see :func:`publishing`)."""

    ready = True
    last_error = None

    def start(self, _connection: Any) -> None:
        pass


class Publishing:
    """A :class:`PublisherEngine` on a :class:`StubRabbit`, and what
    :class:`~rtroute.publisher.RTopicPublisher` does on the caller's side: queue a message
    with its future and wake the engine."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, window: int = 10) -> None:
        self.rabbit = rabbit = StubRabbit()
        rabbit.declare_queue("q1")
        monkeypatch.setattr(pika, "SelectConnection", rabbit.connect)
        rabbit.exchanges["logs.bindings"] = "direct"
        monkeypatch.setattr(engine_module, "ReconnectingConnection",
                            lambda *a, **k: ReconnectingConnection(*a, ioloop=rabbit.ioloop, **k))
        router = ExchangeRouter("logs", "rtopic", "x-rtroute-bcc")
        router.bind(("queue", "q1"), "a.b")
        router.bind(("queue", "q2"), "x.y")
        self.settled: list[MessageFuture] = []
        self.engine = PublisherEngine(
            [URI], "logs", router=router, management=Management(),  # type: ignore[arg-type]
            masked_uri=URI, vhost="/", policy=PublisherPolicy("logs"),
            on_settled=self._settled, window=window, published_key_header=None,
            connection_name="test")
        self.engine.watcher = Watcher()  # type: ignore[assignment]
        self.engine.connection.start()
        self.run()
        assert self.engine.ready

    def _settled(self, futures: Any) -> None:
        for future in futures:
            future._settle()
            self.settled.append(future)

    def publish(self, routing_key: str, body: bytes, headers: dict | None = None,
                mandatory: bool = False) -> MessageFuture:
        engine = self.engine
        future = MessageFuture(self, routing_key, engine.upstream)
        with engine.lock:
            engine.queue.append((future, routing_key, body, None, headers, mandatory))
            wake = not engine.wakeup_scheduled
            engine.wakeup_scheduled = True
        if wake:
            engine.connection.add_callback_threadsafe(engine.drain)
        return future

    def run(self) -> None:
        self.rabbit.ioloop.run()

    def bodies(self) -> list[bytes]:
        return [p.body for p in self.rabbit.to("logs.bindings")]


def test_each_message_is_published_once_with_its_bcc_and_settled_by_its_confirm(monkeypatch):
    pub = Publishing(monkeypatch)
    rabbit = pub.rabbit
    futures = [pub.publish("a.*", b"m1"), pub.publish("x.y", b"m2"),
               pub.publish("a.b", b"m3", headers={"CC": ["x.y"]})]
    pub.run()
    published = rabbit.to("logs.bindings")
    assert [(p.routing_key, p.body) for p in published] == \
        [("a.*", b"m1"), ("x.y", b"m2"), ("a.b", b"m3")]
    assert published[0].properties.headers == {"BCC": ["a.b"]}
    assert published[2].properties.headers["CC"] == ["x.y"]
    assert not any(f.done() for f in futures)
    rabbit.ack(published[1])
    pub.run()
    assert [f.done() for f in futures] == [False, True, False]  # futures settle alone
    rabbit.ack(published[2], multiple=True)
    pub.run()
    assert all(f.done() and f.exception() is None for f in futures)
    assert pub.engine.idle()


def test_a_nack_fails_only_its_own_message(monkeypatch):
    pub = Publishing(monkeypatch)
    rabbit = pub.rabbit
    futures = [pub.publish("a.b", f"m{i}".encode()) for i in (1, 2, 3)]
    pub.run()
    published = rabbit.to("logs.bindings")
    rabbit.ack(published[0])
    rabbit.nack(published[1])
    rabbit.ack(published[2])
    pub.run()
    assert all(f.done() for f in futures)
    assert [type(f.exception()) for f in futures] == [type(None), PublishNacked, type(None)]


def test_a_returned_mandatory_message_fails_with_the_reply(monkeypatch):
    pub = Publishing(monkeypatch)
    rabbit = pub.rabbit
    future = pub.publish("nothing.bound", b"m1", mandatory=True)
    pub.run()
    (published,) = rabbit.to("logs.bindings")
    assert published.mandatory and published.properties.headers is None
    rabbit.return_(published)
    rabbit.ack(published)
    pub.run()
    assert isinstance(future.exception(), PublishReturned)
    assert future.exception().reply_code == 312 and pub.engine.unroutable == 1


def test_a_lost_link_fails_what_was_in_flight_and_sends_what_waited_on_the_next(monkeypatch):
    pub = Publishing(monkeypatch, window=2)
    rabbit = pub.rabbit
    futures = [pub.publish("a.b", f"m{i}".encode()) for i in (1, 2, 3, 4)]
    pub.run()
    old = rabbit.connection
    assert pub.bodies() == [b"m1", b"m2"]  # the window is full: m3, m4 wait in the queue
    rabbit.drop(old)
    pub.run()
    assert [type(f.exception()) for f in futures[:2]] == [PublishFailed, PublishFailed]
    assert not futures[2].done() and not futures[3].done()
    rabbit.ioloop.advance(2.0)  # the reconnect
    again = [p for p in rabbit.to("logs.bindings") if p.connection is not old]
    assert [p.body for p in again] == [b"m3", b"m4"]
    rabbit.ack_all()
    pub.run()
    assert [f.exception() for f in futures[2:]] == [None, None] and pub.engine.idle()


def test_a_lost_link_fails_publishes_handed_over_but_not_yet_written(monkeypatch):
    pub = Publishing(monkeypatch)
    rabbit = pub.rabbit
    futures = [pub.publish("a.b", b"m1"), pub.publish("x.y", b"m2", mandatory=True)]
    rabbit.ioloop.turn()  # routed and handed to the window; written at the end of the turn
    assert pub.engine.in_flight == 2 and rabbit.published == []
    old = rabbit.connection
    rabbit.drop(old)
    pub.run()
    assert rabbit.published == []  # never written
    assert [type(f.exception()) for f in futures] == [PublishFailed, PublishFailed]
    rabbit.ioloop.advance(2.0)
    assert rabbit.connection is not old and rabbit.published == []  # not sent twice
    assert pub.engine.idle()


def test_while_the_broker_blocks_nothing_is_routed_and_a_lost_link_keeps_the_queue(monkeypatch):
    pub = Publishing(monkeypatch)
    rabbit = pub.rabbit
    rabbit.block()
    futures = [pub.publish("a.b", b"m1"), pub.publish("x.y", b"m2")]
    pub.run()
    assert rabbit.published == [] and len(pub.engine.queue) == 2
    rabbit.drop()
    rabbit.blocked = False  # a new connection is not blocked
    rabbit.ioloop.advance(2.0)
    assert pub.bodies() == [b"m1", b"m2"]
    rabbit.ack_all()
    pub.run()
    assert all(f.done() and f.exception() is None for f in futures)


def test_a_content_header_of_frame_max_payload_bytes_goes_out_one_byte_more_does_not(
        monkeypatch):
    # RabbitMQ takes a payload of frame_max (checked on 3.10.8 and 4.3.6: see
    # rtroute.amqp.frame_codec); the stub refuses what RabbitMQ refuses
    pub = Publishing(monkeypatch)
    rabbit = pub.rabbit
    base = len(pika.frame.Header(1, 2, pika.BasicProperties(headers={"p": ""})).marshal())
    pad = rabbit.frame_max + 8 - base
    at_limit = pub.publish("a.b", b"m1", headers={"p": "x" * pad})
    above = pub.publish("a.b", b"m2", headers={"p": "x" * (pad + 1)})
    pub.run()
    (published,) = rabbit.to("logs.bindings")
    assert published.body == b"m1"
    rabbit.ack(published)
    pub.run()
    assert at_limit.done() and at_limit.exception() is None
    assert above.done() and "frame_max" in str(above.exception())


def test_what_the_native_framer_leaves_goes_through_the_general_path_in_its_place(monkeypatch):
    """A header the framer does not write (a Decimal) is encoded by the general path, one it
    cannot be (over frame_max) fails its message alone; the batch keeps its order."""
    import decimal

    pub = Publishing(monkeypatch)
    too_big = {"p": "x" * (pub.rabbit.frame_max + 1)}
    futures = [pub.publish("a.b", b"m1", headers={"n": 1}),
               pub.publish("a.b", b"m2", headers={"d": decimal.Decimal("1.5")}),
               pub.publish("a.*", b"m3", headers=too_big),
               pub.publish("a.*", b"m4")]
    pub.run()
    published = pub.rabbit.to("logs.bindings")
    assert [p.body for p in published] == [b"m1", b"m2", b"m4"]
    assert published[1].properties.headers == {"d": decimal.Decimal("1.5")}
    assert published[2].properties.headers == {"BCC": ["a.b"]}
    assert futures[2].done() and "frame_max" in str(futures[2].exception())
    pub.rabbit.ack(published[-1], multiple=True)
    pub.run()
    assert all(f.done() for f in futures) and pub.engine.idle()


def test_literal_keys_in_turn_go_as_published_framed_in_one_call_per_batch(monkeypatch):
    """Literal keys without headers (a new key per message) are published as they are, no
    BCC, decided without the planner; the batch's frames are made in one call of the native
    framer, none by the general path (a header frame per message there)."""
    built: list[int] = []
    real = engine_module.content_header_frame
    framed: list[int] = []
    real_framer = engine_module.publish_frames

    def counting(channel: int, size: int, values: Any) -> bytes:
        built.append(size)
        return real(channel, size, values)

    def counting_framer(channel, publishes, start, frame_max, key_header):
        framed.append(len(publishes) - start)
        return real_framer(channel, publishes, start, frame_max, key_header)

    monkeypatch.setattr(engine_module, "content_header_frame", counting)
    monkeypatch.setattr(engine_module, "publish_frames", counting_framer)
    pub = Publishing(monkeypatch)
    pub.engine._router.bind(("queue", "q1"), "k.1")
    pub.engine._router.bind(("queue", "q1"), "k.2")
    keys = ["k.1", "k.2", "x.y", "k.1", "nowhere", "k.2"]
    futures = [pub.publish(key, b"m" * (1 + i % 2)) for i, key in enumerate(keys)]
    pub.run()
    published = pub.rabbit.to("logs.bindings")
    assert [(p.routing_key, p.body) for p in published] == \
        [(key, b"m" * (1 + i % 2)) for i, key in enumerate(keys)]
    assert all(not p.properties.headers for p in published)
    assert framed == [6] and built == []  # one call for the batch, nothing apart
    assert futures[0].decision.matched == ("k.1",)
    assert pub.engine.unroutable == 1  # "nowhere": sent, the broker applies mandatory/AE


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_while_a_batch_is_routed_and_left_as_the_caller_had_it(
        monkeypatch, enabled):
    import gc

    pub = Publishing(monkeypatch)
    router = pub.engine._router
    seen = []
    decide_many = router.decide_many
    monkeypatch.setattr(router, "decide_many",
                        lambda messages: seen.append(gc.isenabled()) or decide_many(messages))
    if not enabled:
        gc.disable()
    try:
        future = pub.publish("a.*", b"m1")
        pub.run()
        assert seen == [False] and gc.isenabled() == enabled
    finally:
        gc.enable()
    pub.rabbit.ack(pub.rabbit.to("logs.bindings")[0])
    pub.run()
    assert future.done() and future.exception() is None
