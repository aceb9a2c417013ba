"""Moving messages: ack modes, pass-through, overrides, destinations, declarations, URIs."""
from __future__ import annotations

import time

import pika
import pytest

from rtroute.shovel.status import ShovelState

from ..conftest import BROKER_URI, DEFAULT_URI, broker_uri_for, wait_for
from .conftest import (
    bodies,
    declare_queue,
    depth,
    drain,
    publish,
    toml_shovel,
    wait_depth,
    wait_state,
)

LOCAL = BROKER_URI


@pytest.mark.parametrize("ack_mode", ["on_confirm", "on_publish", "no_ack"])
def test_each_ack_mode_moves_every_message_in_order(ack_mode, names, shovels):
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src, durable=True)
    declare_queue(LOCAL, dst, durable=True)
    publish(LOCAL, src, 3000)
    worker = shovels.start(toml_shovel(
        f"mode-{ack_mode}", LOCAL, LOCAL,
        f'queue = "{src}"\ndest-queue = "{dst}"\nack_mode = "{ack_mode}"\nprefetch_count = 50'))
    wait_depth(LOCAL, dst, 3000)
    assert bodies(LOCAL, dst) == list(range(3000))
    wait_for(lambda: depth(LOCAL, src) == 0)
    counters = worker.status.counters
    assert counters["moved"] == 3000
    assert counters["acked"] == (0 if ack_mode == "no_ack" else 3000)


def test_properties_exchange_and_key_pass_through_between_two_vhosts(vhosts, shovels):
    """Nothing set: every basic property, the exchange and the routing key go through as
    published, here from vhost A to vhost B of one broker."""
    a, b = broker_uri_for(vhosts[0]), broker_uri_for(vhosts[1])
    exchange = "rtroute.pass"
    declare = (f'[{{ method = "exchange.declare", exchange = "{exchange}", type = "topic" }},'
               f' {{ method = "queue.declare", queue = "in", durable = true }},'
               f' {{ method = "queue.bind", exchange = "{exchange}", routing_key = "#" }}]')
    worker = shovels.start(toml_shovel(
        "pass", a, b, 'queue = "in"', src_declarations=declare,
        dst_declarations=declare.replace('queue = "in"', 'queue = "out"')))
    wait_state(worker, ShovelState.RUNNING)
    props = pika.BasicProperties(
        content_type="application/json", content_encoding="gzip",
        headers={"h": "v", "n": 7, "nested": {"a": [1, "x"]}}, delivery_mode=2, priority=3,
        correlation_id="corr", reply_to="replies", expiration="600000", message_id="m-1",
        timestamp=1_700_000_000, type="kind", user_id="guest", app_id="app",
        cluster_id="cluster")
    publish(a, "a.b.c", 1, exchange=exchange, properties=props)
    wait_depth(b, "out", 1)
    ((method, got, body),) = drain(b, "out")
    assert (method.exchange, method.routing_key, body) == (exchange, "a.b.c", b"0")
    for name in ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
                 "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
                 "user_id", "app_id", "cluster_id"):
        assert getattr(got, name) == getattr(props, name), name


def test_publish_properties_override_every_basic_property(names, shovels):
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    overrides = (
        'publish_properties = { content_type = "text/plain", content_encoding = "utf-8", '
        'headers = { set = "yes" }, delivery_mode = 2, priority = 9, correlation_id = "c2", '
        'reply_to = "r2", expiration = "5000000", message_id = "m2", timestamp = 42, '
        'type = "t2", user_id = "guest", app_id = "a2", cluster_id = "k2" }')
    shovels.start(toml_shovel("override", LOCAL, LOCAL,
                              f'queue = "{src}"\ndest-queue = "{dst}"\n{overrides}'))
    publish(LOCAL, src, 1, properties=pika.BasicProperties(
        content_type="x/y", headers={"old": 1}, priority=1, message_id="m1"))
    wait_depth(LOCAL, dst, 1)
    ((_m, got, _b),) = drain(LOCAL, dst)
    assert (got.content_type, got.content_encoding, got.headers, got.delivery_mode,
            got.priority, got.correlation_id, got.reply_to, got.expiration, got.message_id,
            got.timestamp, got.type, got.user_id, got.app_id, got.cluster_id) == (
        "text/plain", "utf-8", {"set": "yes"}, 2, 9, "c2", "r2", "5000000", "m2", 42, "t2",
        "guest", "a2", "k2")


def test_publish_fields_set_exchange_and_routing_key(names, shovels):
    src, dst = names.queue("src"), names.queue("dst")
    exchange = names.exchange("fields")
    declare_queue(LOCAL, src)
    decl = (f'[{{ method = "exchange.declare", exchange = "{exchange}", type = "direct" }}, '
            f'{{ method = "queue.declare", queue = "{dst}", durable = true }}, '
            f'{{ method = "queue.bind", exchange = "{exchange}", routing_key = "from_shovel" }}]')
    shovels.start(toml_shovel(
        "fields", LOCAL, LOCAL,
        f'queue = "{src}"\npublish_fields = {{ exchange = "{exchange}", '
        'routing_key = "from_shovel" }', dst_declarations=decl))
    publish(LOCAL, src, 5)
    wait_depth(LOCAL, dst, 5)
    got = drain(LOCAL, dst)
    assert {(m.exchange, m.routing_key) for m, _p, _b in got} == {(exchange, "from_shovel")}


def test_dest_exchange_keeps_the_routing_key_unless_dest_exchange_key_is_set(names, shovels):
    src1, src2 = names.queue("src1"), names.queue("src2")
    exchange = names.exchange("dx")
    q_orig, q_set = names.queue("orig"), names.queue("set")
    for queue in (src1, src2):
        declare_queue(LOCAL, queue)
    decl = (f'[{{ method = "exchange.declare", exchange = "{exchange}", type = "direct" }}, '
            f'{{ method = "queue.declare", queue = "{q_orig}", durable = true }}, '
            f'{{ method = "queue.bind", exchange = "{exchange}", routing_key = "{src1}" }}, '
            f'{{ method = "queue.declare", queue = "{q_set}", durable = true }}, '
            f'{{ method = "queue.bind", exchange = "{exchange}", routing_key = "k" }}]')
    shovels.start(toml_shovel("dx1", LOCAL, LOCAL,
                              f'queue = "{src1}"\ndest-exchange = "{exchange}"',
                              dst_declarations=decl))
    shovels.start(toml_shovel("dx2", LOCAL, LOCAL,
                              f'queue = "{src2}"\ndest-exchange = "{exchange}"\n'
                              'dest-exchange-key = "k"', dst_declarations=decl))
    publish(LOCAL, src1, 3)   # published to "" with the queue name as key: the key stays
    publish(LOCAL, src2, 4)
    wait_depth(LOCAL, q_orig, 3)
    wait_depth(LOCAL, q_set, 4)


def test_declarations_and_the_most_recently_declared_queue(names, shovels):
    """A server-named queue declared, bound and consumed via "" (the plugin's classic
    example, exclusive as RabbitMQ 4.x wants it); the destination side declares its
    exchange-to-exchange binding."""
    src_x, dst_x, dst_x2 = names.exchange("sx"), names.exchange("dx"), names.exchange("dx2")
    dst = names.queue("dst")
    src_decl = (f'[{{ method = "exchange.declare", exchange = "{src_x}", type = "fanout" }}, '
                '{ method = "queue.declare", exclusive = true }, '
                f'{{ method = "queue.bind", queue = "", exchange = "{src_x}" }}]')
    dst_decl = (f'[{{ method = "exchange.declare", exchange = "{dst_x}", type = "fanout" }}, '
                f'{{ method = "exchange.declare", exchange = "{dst_x2}", type = "fanout" }}, '
                f'{{ method = "exchange.bind", destination = "{dst_x2}", source = "{dst_x}" }}, '
                f'{{ method = "queue.declare", queue = "{dst}", durable = true }}, '
                f'{{ method = "queue.bind", exchange = "{dst_x2}" }}]')
    worker = shovels.start(toml_shovel("recent", LOCAL, LOCAL,
                                       f'queue = ""\ndest-exchange = "{dst_x}"',
                                       src_declarations=src_decl, dst_declarations=dst_decl))
    wait_state(worker, ShovelState.RUNNING)
    publish(LOCAL, "any", 10, exchange=src_x)
    wait_depth(LOCAL, dst, 10)
    assert bodies(LOCAL, dst) == list(range(10))


def test_src_exchange_and_key_consume_through_a_private_queue(names, shovels):
    src_x, dst = names.exchange("sx"), names.queue("dst")
    decl = f'[{{ method = "exchange.declare", exchange = "{src_x}", type = "topic" }}]'
    worker = shovels.start(toml_shovel(
        "srcx", LOCAL, LOCAL, f'src-exchange = "{src_x}"\nsrc-exchange-key = "a.*"\n'
        f'dest-queue = "{dst}"', src_declarations=decl,
        dst_declarations=f'[{{ method = "queue.declare", queue = "{dst}", durable = true }}]'))
    wait_state(worker, ShovelState.RUNNING)
    publish(LOCAL, "a.b", 3, exchange=src_x)
    publish(LOCAL, "b.b", 3, exchange=src_x, start=100)
    wait_depth(LOCAL, dst, 3)
    time.sleep(0.3)
    assert bodies(LOCAL, dst) == [0, 1, 2]


def test_prefetch_count_is_the_consumers_window(names, shovels, mgmt):
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    worker = shovels.start(toml_shovel("prefetch", LOCAL, LOCAL,
                                       f'queue = "{src}"\ndest-queue = "{dst}"\n'
                                       "prefetch_count = 7"))
    wait_state(worker, ShovelState.RUNNING)

    def prefetch():
        rows = [c for c in mgmt.request("GET", "consumers") if c["queue"]["name"] == src]
        return rows and rows[0]["prefetch_count"]

    assert wait_for(prefetch, 10) == 7


def test_rabbitmq_uri_query_keys_are_translated_and_an_empty_host_is_local(names, shovels,
                                                                          mgmt):
    """heartbeat, frame_max, channel_max and connection_timeout reach the connection; a
    frame_max smaller than the source's makes the shovel re-frame big bodies."""
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    query = "heartbeat=7&frame_max=8192&channel_max=16&connection_timeout=5000"
    # an empty host is 127.0.0.1:5672, which is the broker under test only by default
    uri = f"amqp://?{query}" if LOCAL == DEFAULT_URI else broker_uri_for(query=query)
    worker = shovels.start(toml_shovel("uri", LOCAL, uri, f'queue = "{src}"\n'
                                       f'dest-queue = "{dst}"'),
                           connection_name="rtroute-test-uri-keys")
    wait_state(worker, ShovelState.RUNNING)
    big = b"x" * 50_000
    publish(LOCAL, src, 3, body=lambda i: big + str(i).encode())
    wait_depth(LOCAL, dst, 3)
    assert [body for _m, _p, body in drain(LOCAL, dst)] == [big + b"0", big + b"1", big + b"2"]

    def connections():
        # both ends carry the one name, as the plugin's ("Shovel NAME" by default)
        rows = [c for c in mgmt.connections()
                if (c.get("client_properties") or {}).get("connection_name")
                == "rtroute-test-uri-keys"]
        return len(rows) == 2 and rows

    rows = wait_for(connections, 15)
    (row,) = [r for r in rows if r["frame_max"] == 8192]   # the destination's
    assert (row["timeout"], row["frame_max"], row["channel_max"]) == (7, 8192, 16)
