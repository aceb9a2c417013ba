"""Sharded ingress, the pure parts: who gives shards away, the layout declared, the config key,
and the clear error when the broker lacks the consistent hash exchange."""
from __future__ import annotations

import pytest

from rtroute.config.rtroute_toml import ConfigError, ExchangeConfig, loads
from rtroute.sidecar.layout import declarations_for, missing_plugin
from rtroute.sidecar.shards import replica_of, shards_to_release

QUEUES = [f"rtroute.shard.x.{i}" for i in range(4)]


def view(**active_by_replica: list[int]) -> list[tuple[str, str, bool]]:
    """Every replica consumes every shard; ``active_by_replica`` says where it is active."""
    rows = []
    for n, (replica, active) in enumerate(sorted(active_by_replica.items())):
        for i, queue in enumerate(QUEUES):
            rows.append((queue, f"rtroute.{replica}.{n * 10 + i}", i in active))
    return rows


@pytest.mark.parametrize("active, me, expected", [
    ({"a": [0, 1, 2, 3]}, "a", 0),                          # alone: keeps every shard
    ({"a": [0, 1, 2, 3], "b": []}, "a", 2),                 # 4 shards, 2 replicas: gives 2
    ({"a": [0, 1, 2, 3], "b": []}, "b", 0),
    ({"a": [0, 1, 2], "b": [3]}, "a", 1),
    ({"a": [0, 1], "b": [2, 3]}, "a", 0),                   # balanced
    ({"a": [0, 1, 2, 3], "b": [], "c": []}, "a", 2),        # down to ceil(4/3) = 2 at once
    ({"a": [0, 1], "b": [2, 3], "c": []}, "a", 1),          # c has none: the first 2-holder
    ({"a": [0, 1], "b": [2, 3], "c": []}, "b", 0),          # ... and only it, gives one
    ({"a": [0, 1], "b": [2], "c": [3]}, "a", 0),            # 2/1/1 is as good as it gets
    ({"a": [0], "b": [1], "c": [2], "d": [3], "e": []}, "a", 0),  # more replicas than shards
])
def test_who_gives_shards_away(active, me, expected):
    assert shards_to_release(view(**active), QUEUES, me) == expected


def test_other_consumers_and_other_queues_are_not_replicas():
    rows = view(a=[0, 1, 2, 3]) + [(QUEUES[0], "amq.ctag-xyz", False),
                                   ("rtroute.shard.y.0", "rtroute.b.1", False)]
    assert shards_to_release(rows, QUEUES, "a") == 0


def test_replica_of_a_consumer_tag():
    assert replica_of("rtroute.0a1b2c.7") == "0a1b2c"
    assert replica_of("amq.ctag-abc") is None
    assert replica_of("rtroute.x") is None


def test_sharded_layout():
    spec = ExchangeConfig(name="x", shards=3, ingress_queue_type="quorum")
    decls = declarations_for(spec)
    methods = [(d["method"], d.get("queue") or d.get("exchange") or d.get("destination"))
               for d in decls]
    assert ("exchange.declare", "x.shards") in methods
    shards_exchange = next(d for d in decls if d.get("exchange") == "x.shards")
    assert shards_exchange["type"] == "x-consistent-hash"
    assert {"method": "exchange.bind", "destination": "x.shards", "source": "x",
            "routing_key": ""} in decls
    # the unsharded ingress queue is unbound (switched to shards), never declared
    assert ("queue.unbind", "rtroute.ingress.x") in methods
    assert ("queue.declare", "rtroute.ingress.x") not in methods
    # unbound last: a broker refusing x.shards leaves x bound to the queue it had
    assert decls[-1] == {"method": "queue.unbind", "queue": "rtroute.ingress.x",
                         "exchange": "x", "routing_key": ""}
    for i in range(3):
        queue = f"rtroute.shard.x.{i}"
        declare = next(d for d in decls if d["method"] == "queue.declare" and
                       d["queue"] == queue)
        assert declare["arguments"]["x-single-active-consumer"] is True
        assert declare["arguments"]["x-queue-type"] == "quorum"
        assert {"method": "queue.bind", "queue": queue, "exchange": "x.shards",
                "routing_key": "1"} in decls
    assert spec.ingress_queues == [f"rtroute.shard.x.{i}" for i in range(3)]


def test_unsharded_layout_unbinds_a_former_shards_exchange():
    decls = declarations_for(ExchangeConfig(name="x"))
    unbind = {"method": "exchange.unbind", "destination": "x.shards", "source": "x",
              "routing_key": ""}
    assert unbind in decls
    # after the ingress queue is bound: x is never bound to nothing
    bind = {"method": "queue.bind", "queue": "rtroute.ingress.x", "exchange": "x",
            "routing_key": ""}
    assert decls.index(unbind) > decls.index(bind)
    assert not any(d.get("exchange") == "x.shards" for d in decls)


def test_shards_in_the_config_file():
    config = loads('[[exchange]]\nname = "x"\nshards = 4\n')
    assert config.exchanges[0].shards == 4
    assert loads('[[exchange]]\nname = "x"\n').exchanges[0].shards == 0
    with pytest.raises(ConfigError, match=r"toml:3: .*shards must be between 0 and 256"):
        loads('[[exchange]]\nname = "x"\nshards = 1000\n')


def test_missing_plugin_is_named_with_the_command_that_enables_it():
    reason = "(503, \"COMMAND_INVALID - unknown exchange type 'x-consistent-hash'\")"
    message = missing_plugin(reason)
    assert message is not None
    assert "rabbitmq-plugins enable rabbitmq_consistent_hash_exchange" in message
    assert missing_plugin("(503, \"COMMAND_INVALID - unknown exchange type 'x-rtopic'\")") \
        is None
    assert missing_plugin("(320, 'CONNECTION_FORCED')") is None


def test_the_frame_reader_takes_deliveries_of_several_channels(monkeypatch):
    """Each shard's channel is intercepted; deliveries carry their consumer tag; a channel
    no longer intercepted goes back to pika."""
    import pika.frame
    import pika.spec

    from rtroute.amqp import frames, pika_internals

    class Connection:
        bytes_received = 0

    to_pika: list = []
    monkeypatch.setattr(pika_internals, "frame_processor", lambda _c: to_pika.append)
    monkeypatch.setattr(pika_internals, "unparsed", lambda _c: b"")
    monkeypatch.setattr(pika_internals, "set_unparsed", lambda _c, _b: None)
    reader = frames.FrameReader(Connection())

    def message(channel: int, tag: int, consumer: str) -> bytes:
        return b"".join((
            pika.frame.Method(channel, pika.spec.Basic.Deliver(consumer, tag, False, "x",
                                                               "k")).marshal(),
            pika.frame.Header(channel, 2, pika.spec.BasicProperties()).marshal(),
            pika.frame.Body(channel, b"hi").marshal()))

    got: list = []

    def on_delivery(tag, _exchange, _key, _parts, consumer, _redelivered):
        got.append((consumer, tag))

    reader.intercept(2, on_delivery, detailed=True)
    reader.intercept(3, on_delivery, detailed=True)
    reader(message(2, 1, "rtroute.a.1") + message(3, 1, "rtroute.a.2") +
           message(2, 2, "rtroute.a.1"))
    assert got == [("rtroute.a.1", 1), ("rtroute.a.2", 1), ("rtroute.a.1", 2)]
    reader.stop_intercepting(3)
    reader(message(3, 2, "rtroute.a.2"))
    assert len(got) == 3 and len(to_pika) == 3  # method, header, body

    # a delivery on channel 3 before channel 2's content is complete: the stream is torn down
    # (a reconnect redelivers), never one delivery silently replacing the other
    torn: list = []
    monkeypatch.setattr(pika_internals, "terminate_stream", lambda _c, error: torn.append(error))
    reader.intercept(3, on_delivery, detailed=True)
    first, second = message(2, 3, "rtroute.a.1"), message(3, 3, "rtroute.a.2")
    method_end = len(pika.frame.Method(2, pika.spec.Basic.Deliver(
        "rtroute.a.1", 3, False, "x", "k")).marshal())
    reader(first[:method_end] + second)
    assert len(got) == 3
    assert torn and "interleaved" in str(torn[0])
