"""The sidecar on the stub broker (tests/stub_broker.py): the real :class:`Sidecar` connects,
declares, probes its divert targets, consumes its ingress (or its shards), routes, republishes
through the relay and acks; every message is then found where it must be -- republished and
confirmed then acked, back in its ingress queue, dead-lettered -- through confirms, diverts,
returns, nacks and lost connections, including deliveries read but not yet routed when the
connection goes. No RabbitMQ: the broker tier keeps parity and loss under real faults
(tests/sidecar/test_sidecar_broker.py, tests/divert/test_lossless_broker.py)."""
from __future__ import annotations

from typing import Any

import pika
import pytest

from rtroute.amqp.connection import ReconnectingConnection
from rtroute.config.rtroute_toml import BindingConfig, DivertConfig, ExchangeConfig
from rtroute.sidecar import service
from rtroute.sidecar.service import Sidecar
from tests.stub_rabbit import StubRabbit

URI = "amqp://guest:guest@stub.invalid:5672/%2F"
INGRESS = "rtroute.ingress.logs"
BINDINGS = [BindingConfig(destination="q1", key="a.b"), BindingConfig(destination="q2", key="a.c"),
            BindingConfig(destination="q3", key="x.y")]


class Running:
    """A :class:`Sidecar` serving on a :class:`StubRabbit`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, exchanges: list[ExchangeConfig],
                 diverts: list[DivertConfig] = (), queues: tuple[str, ...] = ()) -> None:
        self.rabbit = rabbit = StubRabbit()
        monkeypatch.setattr(pika, "SelectConnection", rabbit.connect)
        made: list[ReconnectingConnection] = []

        def on_the_stub(*args: Any, **kwargs: Any) -> ReconnectingConnection:
            made.append(ReconnectingConnection(*args, ioloop=rabbit.ioloop, **kwargs))
            return made[-1]

        monkeypatch.setattr(service, "ReconnectingConnection", on_the_stub)
        for queue in queues:
            rabbit.declare_queue(queue)
        self.sidecar = Sidecar(URI, exchanges, use_management=False, diverts=list(diverts))
        self.connection = made[0]
        self.connection.start()
        self.run()
        assert [ex["state"] for ex in self.sidecar.status()["exchanges"]] == \
            ["running"] * len(exchanges)

    def run(self) -> None:
        self.rabbit.ioloop.run()

    def publishes(self, exchange: str | None = None) -> list:
        return [p for p in self.rabbit.published if exchange is None or p.exchange == exchange]

    def acked(self, queue: str = INGRESS) -> list[bytes]:
        return [m.body for m in self.rabbit.acked if m.queue == queue]

    def no_unknown_tags(self) -> bool:
        """No ack or nack named a delivery tag its channel did not have (the #33 bug)."""
        return not [e for e in self.rabbit.errors if "unknown delivery tag" in e]


def serve(monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> Running:
    return Running(monkeypatch, [ExchangeConfig(name="logs", bindings=BINDINGS)], **kwargs)


def test_each_message_is_routed_to_its_bindings_and_acked_once_its_republish_is_confirmed(
        monkeypatch):
    run = serve(monkeypatch)
    rabbit = run.rabbit
    rabbit.enqueue(INGRESS, b"m1", "a.*")
    rabbit.enqueue(INGRESS, b"m2", "x.y")
    rabbit.enqueue(INGRESS, b"m3", "nothing.bound")
    run.run()
    first, second = run.publishes()
    assert (first.exchange, first.routing_key, first.body) == ("logs.bindings", "a.*", b"m1")
    assert sorted(first.properties.headers["BCC"]) == ["a.b", "a.c"]
    assert (second.routing_key, second.body) == ("x.y", b"m2")
    # m3 matched nothing: acked (dropped, as the plugin drops it) -- but only after m1, m2
    assert run.acked() == [] and rabbit.bodies(INGRESS) == [b"m1", b"m2", b"m3"]
    rabbit.ack(second)
    run.run()
    assert run.acked() == []  # m2 waits for m1: acks go out in delivery order
    rabbit.ack(first)
    run.run()
    assert run.acked() == [b"m1", b"m2", b"m3"] and rabbit.bodies(INGRESS) == []
    counters = run.sidecar.status()["exchanges"][0]
    assert (counters["republished"], counters["unroutable"]) == (2, 1)
    assert run.no_unknown_tags()


def test_a_message_without_headers_is_republished_as_it_came_in_one_native_call(monkeypatch):
    """Literal keys in turn (10,000 of them miss every cache of method frames): a message
    without headers whose republish adds no BCC is sent with the content as received and
    its publish frame made with it (rtroute.core.frames.publish_message), not through the
    cache of method frames, and not measured again by the outbox (its header frame came
    within this connection's frame_max); its properties arrive as they were published."""
    from rtroute.amqp import frames as amqp_frames
    from rtroute.relay.amqp_sink import AmqpSink

    asked: list = []
    cached = amqp_frames.PublishFrames.get
    monkeypatch.setattr(amqp_frames.PublishFrames, "get",
                        lambda self, *key: asked.append(key) or cached(self, *key))
    measured: list = []
    check = AmqpSink.check
    monkeypatch.setattr(AmqpSink, "check",
                        lambda self, out: measured.append(out.routing_key) or check(self, out))
    run = serve(monkeypatch)
    rabbit = run.rabbit
    rabbit.enqueue(INGRESS, b"m1", "a.b", properties=pika.BasicProperties(
        content_type="text/plain", message_id="id-1", delivery_mode=2))
    rabbit.enqueue(INGRESS, b"", "x.y")
    rabbit.enqueue(INGRESS, b"m3", "a.*")  # BCC added: the general path
    run.run()
    first, second, third = run.publishes()
    assert [(p.exchange, p.routing_key, p.body) for p in (first, second, third)] == [
        ("logs.bindings", "a.b", b"m1"), ("logs.bindings", "x.y", b""),
        ("logs.bindings", "a.*", b"m3")]
    assert (first.properties.content_type, first.properties.message_id,
            first.properties.delivery_mode, first.properties.headers) == \
        ("text/plain", "id-1", 2, None)
    assert asked == [("logs.bindings", "a.*")] and measured == ["a.*"]
    for p in (first, second, third):
        rabbit.ack(p)
    run.run()
    assert run.acked() == [b"m1", b"", b"m3"] and run.no_unknown_tags()


def test_a_nacked_republish_puts_its_message_back_in_the_ingress_queue_and_it_is_routed_again(
        monkeypatch):
    run = serve(monkeypatch)
    rabbit = run.rabbit
    rabbit.enqueue(INGRESS, b"m1", "a.*")
    rabbit.enqueue(INGRESS, b"m2", "x.y")
    run.run()
    first, second = run.publishes()
    rabbit.nack(first)
    rabbit.ack(second)
    run.run()
    # m1 rejected with requeue, redelivered and republished; m2 acked
    assert run.acked() == [b"m2"]
    again = run.publishes()[2:]
    assert [p.body for p in again] == [b"m1"]
    m1 = next(m for m in rabbit.unacked() if m.body == b"m1")
    assert m1.redelivered and m1.deliveries == 2
    rabbit.ack(again[0])
    run.run()
    assert sorted(run.acked()) == [b"m1", b"m2"] and rabbit.bodies(INGRESS) == []
    assert run.sidecar.status()["exchanges"][0]["requeued"] == 1 and run.no_unknown_tags()


def test_a_divert_copy_and_the_original_are_both_confirmed_before_the_ack(monkeypatch):
    run = serve(monkeypatch, queues=("audit",), diverts=[DivertConfig(
        name="audit", address="logs", forwarding_address="audit", filter="level = 'error'")])
    rabbit = run.rabbit
    rabbit.enqueue(INGRESS, b"e1", "a.*", headers={"level": "error"})
    rabbit.enqueue(INGRESS, b"i1", "a.*", headers={"level": "info"})
    run.run()
    copies = run.publishes("")
    originals = run.publishes("logs.bindings")
    assert [(p.routing_key, p.body) for p in copies] == [("audit", b"e1")]
    assert [p.body for p in originals] == [b"e1", b"i1"]
    assert rabbit.bodies("audit") == [b"e1"]
    rabbit.ack(copies[0])
    rabbit.ack(originals[1])
    run.run()
    assert run.acked() == []  # e1's original unconfirmed; i1 waits behind it
    rabbit.ack(originals[0])
    run.run()
    assert run.acked() == [b"e1", b"i1"] and run.no_unknown_tags()
    divert = run.sidecar.status()["diverts"][0]
    assert divert["forwarded"] == 1


def test_an_exclusive_divert_sends_only_the_copy_and_a_returned_copy_is_dead_lettered(
        monkeypatch):
    run = serve(monkeypatch, queues=("audit",), diverts=[DivertConfig(
        name="audit", address="logs", forwarding_address="audit", exclusive=True)])
    rabbit = run.rabbit
    rabbit.enqueue(INGRESS, b"e1", "a.*")
    run.run()
    assert run.publishes("logs.bindings") == []
    (copy,) = run.publishes("")
    rabbit.return_(copy)  # no queue took it
    rabbit.ack(copy)
    run.run()
    assert run.acked() == []  # it waits for its dead letter
    (dead,) = run.publishes("rtroute.dead")
    assert dead.body == b"e1" and "audit" in dead.properties.headers["x-rtroute-error"]
    rabbit.ack(dead)
    run.run()
    assert run.acked() == [b"e1"] and rabbit.bodies(INGRESS) == [] and run.no_unknown_tags()


def test_a_lost_connection_requeues_deliveries_read_but_not_yet_routed(monkeypatch):
    run = serve(monkeypatch)
    rabbit = run.rabbit
    for i in (1, 2, 3):
        rabbit.enqueue(INGRESS, f"m{i}".encode(), "a.*")
    rabbit.ioloop.turn()  # the broker delivers: read, in the batch, routed next turn
    old = rabbit.connection
    assert len(rabbit.unacked()) == 3 and run.publishes() == []
    rabbit.drop(old)
    run.run()
    assert [m.body for m in rabbit.queues[INGRESS].ready] == [b"m1", b"m2", b"m3"]
    assert run.publishes() == []  # nothing routed for the lost connection
    rabbit.ioloop.advance(2.0)  # the reconnect
    assert rabbit.connection is not old and rabbit.connection.is_open
    published = run.publishes()
    assert [p.body for p in published] == [b"m1", b"m2", b"m3"]
    assert all(p.connection is rabbit.connection for p in published)
    rabbit.ack_all()
    run.run()
    assert run.acked() == [b"m1", b"m2", b"m3"] and rabbit.bodies(INGRESS) == []
    assert run.no_unknown_tags()
    # each was routed once, after the reconnect (the batch of the lost connection was not)
    counters = run.sidecar.status()["exchanges"][0]
    assert (counters["received"], counters["redelivered"], counters["republished"]) == (3, 3, 3)


def test_a_connection_lost_while_blocked_starts_the_next_one_unblocked(monkeypatch):
    run = serve(monkeypatch)
    rabbit = run.rabbit
    rabbit.block()
    rabbit.enqueue(INGRESS, b"m1", "x.y")
    run.run()
    assert run.publishes() == [] and run.sidecar.status()["exchanges"][0]["state"] == "blocked"
    rabbit.drop()
    rabbit.blocked = False  # a new connection is not blocked
    rabbit.ioloop.advance(2.0)
    assert [p.body for p in run.publishes()] == [b"m1"]
    assert run.sidecar.status()["exchanges"][0]["state"] == "running"
    rabbit.ack_all()
    run.run()
    assert run.acked() == [b"m1"] and run.no_unknown_tags()


def test_a_lost_connection_keeps_the_confirmed_acked_and_requeues_the_unconfirmed(monkeypatch):
    run = serve(monkeypatch)
    rabbit = run.rabbit
    for i in (1, 2, 3):
        rabbit.enqueue(INGRESS, f"m{i}".encode(), "x.y")
    run.run()
    rabbit.ack(run.publishes()[0])
    run.run()
    assert run.acked() == [b"m1"]
    rabbit.drop()
    run.run()
    assert [m.body for m in rabbit.queues[INGRESS].ready] == [b"m2", b"m3"]
    rabbit.ioloop.advance(2.0)
    again = run.publishes()[3:]
    assert [p.body for p in again] == [b"m2", b"m3"]  # at-least-once: republished
    rabbit.ack_all()
    run.run()
    assert run.acked() == [b"m1", b"m2", b"m3"] and run.no_unknown_tags()


def sharded(monkeypatch: pytest.MonkeyPatch) -> Running:
    return Running(monkeypatch, [ExchangeConfig(name="logs", bindings=BINDINGS, shards=2)])


SHARDS = ("rtroute.shard.logs.0", "rtroute.shard.logs.1")


def test_each_shard_is_consumed_on_its_own_channel_and_acked_there(monkeypatch):
    run = sharded(monkeypatch)
    rabbit = run.rabbit
    assert rabbit.exchanges["logs.shards"] == "x-consistent-hash"
    rabbit.enqueue(SHARDS[0], b"s0a", "a.*")
    rabbit.enqueue(SHARDS[1], b"s1a", "x.y")
    rabbit.enqueue(SHARDS[0], b"s0b", "x.y")
    run.run()
    channels = {m.body: m.channel for m in rabbit.unacked()}
    assert channels[b"s0a"] is channels[b"s0b"] is not channels[b"s1a"]
    published = {p.body: p for p in run.publishes()}
    assert set(published) == {b"s0a", b"s1a", b"s0b"}
    rabbit.ack(published[b"s1a"])
    rabbit.ack(published[b"s0b"])
    run.run()
    # shard 1's message is acked on its channel; shard 0's second waits for its first
    assert run.acked(SHARDS[1]) == [b"s1a"] and run.acked(SHARDS[0]) == []
    rabbit.ack(published[b"s0a"])
    run.run()
    assert run.acked(SHARDS[0]) == [b"s0a", b"s0b"] and run.no_unknown_tags()
    shards = run.sidecar.status()["exchanges"][0]["shards"]
    assert [s["received"] for s in shards] == [2, 1]


def test_a_lost_connection_requeues_shard_deliveries_read_but_not_yet_routed(monkeypatch):
    run = sharded(monkeypatch)
    rabbit = run.rabbit
    rabbit.enqueue(SHARDS[0], b"s0a", "a.*")
    rabbit.enqueue(SHARDS[1], b"s1a", "x.y")
    rabbit.ioloop.turn()
    assert len(rabbit.unacked()) == 2 and run.publishes() == []
    rabbit.drop()
    run.run()
    assert [m.body for m in rabbit.queues[SHARDS[0]].ready] == [b"s0a"]
    assert [m.body for m in rabbit.queues[SHARDS[1]].ready] == [b"s1a"]
    assert run.publishes() == []
    rabbit.ioloop.advance(2.0)
    assert sorted(p.body for p in run.publishes()) == [b"s0a", b"s1a"]
    rabbit.ack_all()
    run.run()
    assert run.acked(SHARDS[0]) == [b"s0a"] and run.acked(SHARDS[1]) == [b"s1a"]
    assert run.no_unknown_tags()


def test_a_graceful_stop_takes_nothing_more_and_closes_once_the_confirms_settled(monkeypatch):
    run = serve(monkeypatch)
    rabbit = run.rabbit
    for i in (1, 2):
        rabbit.enqueue(INGRESS, f"m{i}".encode(), "x.y")
    run.run()
    run.sidecar.stop(drain_timeout=30.0)  # (wall-clock seconds: service.py's own deadline)
    run.run()
    rabbit.enqueue(INGRESS, b"m3", "x.y")  # after the stop: no consumer takes it
    first, second = run.publishes()
    rabbit.ack(first)
    rabbit.ioloop.advance(0.1)
    assert run.acked() == [b"m1"] and rabbit.connection.is_open  # m2 still in flight
    rabbit.ack(second)
    rabbit.ioloop.advance(0.1)
    assert run.acked() == [b"m1", b"m2"] and not rabbit.connection.is_open
    assert rabbit.bodies(INGRESS) == [b"m3"] and len(run.publishes()) == 2
    assert run.sidecar.status()["exchanges"][0]["state"] == "stopped"


def test_an_exception_in_routing_dead_letters_that_message_and_its_batch_mates_go_on(
        monkeypatch):
    run = serve(monkeypatch)
    rabbit = run.rabbit
    router = run.sidecar.exchanges["logs"].router
    decide_many = router.decide_many

    def faulty(batch: list) -> list:  # a bug that only one routing key triggers
        if any(key == "boom" for key, _headers in batch):
            raise KeyError("injected fault")
        return decide_many(batch)

    monkeypatch.setattr(router, "decide_many", faulty)
    for key in ("x.y", "boom", "x.y"):
        rabbit.enqueue(INGRESS, key.encode(), key)
    run.run()
    assert [(p.exchange, p.body) for p in run.publishes()] == \
        [("logs.bindings", b"x.y"), ("rtroute.dead", b"boom"), ("logs.bindings", b"x.y")]
    dead = run.publishes("rtroute.dead")[0]
    assert "KeyError" in dead.properties.headers["x-rtroute-error"]
    rabbit.ack_all()
    run.run()
    assert run.acked() == [b"x.y", b"boom", b"x.y"]
    status = run.sidecar.status()
    assert status["internal_errors"] == 1 and "injected fault" in status["last_error"]
    assert status["exchanges"][0]["dead_lettered"] == 1


def test_unroutable_messages_are_logged_once_per_interval_and_listed_in_status(monkeypatch,
                                                                                caplog):
    run = serve(monkeypatch)
    for i in range(7):
        run.rabbit.enqueue(INGRESS, b"m", f"nobody.{i}")
    with caplog.at_level("WARNING", logger="rtroute.sidecar"):
        run.run()
    ex = run.sidecar.status()["exchanges"][0]
    assert ex["unroutable"] == 7 and run.publishes() == []
    assert [e["routing_key"] for e in ex["last_unroutable"]] == \
        [f"nobody.{i}" for i in range(2, 7)]
    lines = [r.getMessage() for r in caplog.records if "unroutable message(s)" in r.getMessage()]
    assert len(lines) == 1  # one line per 10 s, not one per message
    assert "'nobody.0'" in lines[0] and "alternate_exchange" in lines[0]
    assert run.acked() == [b"m"] * 7  # dropped, as the plugin drops them


def test_a_divert_to_a_missing_queue_dead_letters_its_copies_with_the_reason(monkeypatch):
    run = serve(monkeypatch, diverts=[DivertConfig(
        name="d", address="logs", forwarding_address="nowhere", routing_type="ANYCAST",
        exclusive=True)])
    rabbit = run.rabbit
    rabbit.enqueue(INGRESS, b"m1", "a.*")
    run.run()  # the copy went to a queue named "nowhere": RabbitMQ returns it
    (copy,) = run.publishes("")
    assert copy.routing_key == "nowhere" and run.publishes("logs.bindings") == []
    rabbit.ack(copy)
    run.run()
    (dead,) = run.publishes("rtroute.dead")
    assert dead.body == b"m1" and "nowhere" in dead.properties.headers["x-rtroute-error"]
    assert dead.properties.headers["x-rtroute-divert"] == "d"
    assert run.acked() == []
    rabbit.ack(dead)
    run.run()
    assert run.acked() == [b"m1"] and run.sidecar.status()["diverts"][0]["dead_lettered"] == 1


def test_a_divert_target_created_after_start_is_used_at_once(monkeypatch):
    run = serve(monkeypatch, diverts=[DivertConfig(
        name="d", address="logs", forwarding_address="later", routing_type="STRIP",
        exclusive=True)])
    rabbit = run.rabbit
    assert run.sidecar.status()["forwarding_addresses"]["later"] is None
    rabbit.declare_queue("later")  # made after the sidecar looked for it: no timer involved
    rabbit.enqueue(INGRESS, b"m1", "a.*")
    run.run()
    assert rabbit.bodies("later") == [b"m1"] and run.publishes("rtroute.dead") == []
    assert run.sidecar.status()["forwarding_addresses"]["later"] == "queue"
    rabbit.ack_all()
    run.run()
    assert run.acked() == [b"m1"]


def test_a_divert_target_still_missing_at_the_fresh_look_dead_letters_the_copy(monkeypatch):
    run = serve(monkeypatch, diverts=[DivertConfig(
        name="d", address="logs", forwarding_address="never", routing_type="STRIP",
        exclusive=True)])
    rabbit = run.rabbit
    rabbit.enqueue(INGRESS, b"m1", "a.*")
    run.run()
    (dead,) = run.publishes()
    assert dead.exchange == "rtroute.dead"
    assert "no exchange or queue of that name" in dead.properties.headers["x-rtroute-error"]
    rabbit.ack(dead)
    run.run()
    assert run.acked() == [b"m1"]
