"""Header values pika cannot read, through the real broker and a real `rtroute run` process:
a divert filter sees a double as a double, copies and dead letters keep every property and
header entry byte for byte, and an odd timestamp or a deep table never dead-letters.

Publishes are hand-built frames (pika cannot encode floats), read back at the frame level.
"""
from __future__ import annotations

import struct
import time
import uuid
from typing import Any

import pika
import pytest

from rtroute.amqp import frames
from rtroute.amqp.content_header import (
    content_header_frame,
    decode_properties,
    headers_span,
    table_entries,
    with_headers_table,
)

from ..conftest import wait_for
from .conftest import depth, wait_depth

pytestmark = pytest.mark.broker


def entry(name: str, value: bytes) -> bytes:
    return bytes((len(name.encode()),)) + name.encode() + value


def sized(tag: bytes, content: bytes) -> bytes:
    return tag + struct.pack(">I", len(content)) + content


def double(v: float) -> bytes:
    return b"d" + struct.pack(">d", v)


def deep_table(levels: int) -> bytes:
    value = sized(b"F", b"")
    for i in range(levels):
        value = sized(b"F", entry(f"k{i % 7}", value))
    return value


MS_TIMESTAMP = 1_700_000_000_123  # Date.now() of a Node.js client, sent as an AMQP timestamp
ODD = entry("sent", b"T" + struct.pack(">Q", MS_TIMESTAMP)) + entry("deep", deep_table(1000))
PROPERTIES = {"content_type": "application/json", "delivery_mode": 2, "priority": 3,
              "message_id": "m-1", "timestamp": MS_TIMESTAMP, "app_id": "node-app",
              "expiration": "600000"}


def publish_raw(uri: str, exchange: str, routing_key: str, entries: bytes, body: bytes,
                **properties: Any) -> None:
    """basic.publish, then a content header whose table holds exactly ``entries``, then the
    body; returns once the broker took it (a synchronous method answered after it)."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        n = ch.channel_number
        header = content_header_frame(n, len(body), {**properties, "headers": {}})
        header = with_headers_table(header, n, headers_span(header), entries)
        data = b"".join((frames.publish_frame(n, frames.shortstr(exchange),
                                              frames.shortstr(routing_key), False),
                         header, struct.pack(">BHI", frames.FRAME_BODY, n, len(body)), body,
                         frames.FRAME_END))
        frames.emit(conn._impl, data, 3)
        ch.exchange_declare(exchange, passive=True)  # raises if the publish closed the channel
    finally:
        conn.close()


def raw_consume(uri: str, queue: str, expected: int) -> list[tuple[bytes, list[bytes]]]:
    """(routing key, frames) of every delivery from ``queue``, frames as delivered."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        got: list[tuple[bytes, list[bytes]]] = []
        reader = frames.install(conn._impl)
        reader.intercept(ch.channel_number,
                         lambda _tag, _exchange, key, parts: got.append((key[1:], parts)))
        ch.basic_consume(queue, lambda *_: None, auto_ack=True)

        def enough() -> bool:
            conn.process_data_events(0.05)
            return len(got) >= expected

        wait_for(enough, 15)
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            conn.process_data_events(0.05)
        return got
    finally:
        conn.close()


def entries_of(header: bytes) -> dict[Any, bytes]:
    """Each header entry (name -> encoded entry) of a content header frame (4.x sorts the
    top-level entries, so compare by name)."""
    return {name: header[s:e] for name, s, e in table_entries(header, headers_span(header))}


def test_a_double_price_is_diverted_by_price_above_ten_and_a_half(run_config, channel,
                                                                   managed, objects,
                                                                   broker_uri):
    prices = managed("lossless")
    forwarding = objects.queue(f"{prices}.expensive")
    sc = run_config([{"name": prices, "kind": "topic"}],
                    [{"name": f"{prices}-d", "address": prices,
                      "forwarding_address": forwarding, "filter": "price > 10.5",
                      "exclusive": True, "routing_type": "STRIP"}])
    local = objects.queue(f"{prices}.local", bind=(f"{prices}.bindings", "#"))
    sent = {
        b"d-10.7": entry("price", double(10.7)),
        b"d-10.2": entry("price", double(10.2)),
        b"f-10.7": entry("price", b"f" + struct.pack(">f", 10.7)),
        b"d-10.7-odd": entry("price", double(10.7)) + ODD,
        b"odd-no-price": ODD,
    }
    for body, entries in sent.items():
        publish_raw(broker_uri, prices, "price.update", entries, body, **PROPERTIES)
    wait_depth(channel, forwarding, 3)
    wait_depth(channel, local, 2)
    assert (depth(channel, forwarding), depth(channel, local)) == (3, 2)
    assert sc.exchange(prices).get("dead_lettered") == 0

    moved = raw_consume(broker_uri, forwarding, 3)
    assert sorted(frames.body_of(parts) for _, parts in moved) == \
        [b"d-10.7", b"d-10.7-odd", b"f-10.7"]
    for key, parts in moved:
        body = frames.body_of(parts)
        got = entries_of(parts[0])
        published = entries_of(_frame(sent[body]))
        for name, encoded in published.items():
            assert got[name] == encoded, (body, name)  # the original's entry, byte for byte
        assert set(got) - set(published) == {  # no routing type, so no _AMQ_ORIG_ROUTING_TYPE
            "_AMQ_ORIG_ADDRESS", "_AMQ_ORIG_QUEUE", "_AMQ_ORIG_MESSAGE_ID", "x-rtroute-hops"}
        props = decode_properties(parts[0])
        assert props.timestamp == MS_TIMESTAMP and props.app_id == "node-app"
        assert props.headers["_AMQ_ORIG_MESSAGE_ID"] == "m-1" and props.message_id != "m-1"
        assert key == forwarding.encode()  # STRIP to a queue: the default exchange
    stayed = raw_consume(broker_uri, local, 2)
    assert sorted(frames.body_of(parts) for _, parts in stayed) == [b"d-10.2", b"odd-no-price"]
    for _, parts in stayed:
        body = frames.body_of(parts)
        assert entries_of(parts[0]) == entries_of(_frame(sent[body]))


def _frame(entries: bytes) -> bytes:
    header = content_header_frame(1, 0, {"headers": {}})
    return with_headers_table(header, 1, headers_span(header), entries)


def test_a_dead_letter_keeps_every_property_and_header_byte_for_byte(run_config, channel,
                                                                     managed, objects,
                                                                     broker_uri):
    name = managed("deadfid")
    dead = objects.dead_letters()
    sc = run_config([{"name": name, "kind": "rtopic"}])
    entries = (entry("price", double(10.7)) + ODD
               + entry("x-rtroute-bcc", sized(b"S", b"not-an-array")))  # the fault
    marker = f"dead-{uuid.uuid4().hex}"
    properties = dict(PROPERTIES, message_id=marker)
    publish_raw(broker_uri, name, "a.b", entries, b"dead body", **properties)
    try:
        wait_depth(channel, dead, 1)
        ((key, parts),) = raw_consume(broker_uri, dead, 1)
    finally:
        take_from_shared_dead_letters(broker_uri, marker)
    assert frames.body_of(parts) == b"dead body" and key == b"a.b"
    got = entries_of(parts[0])
    for entry_name, encoded in entries_of(_frame(entries)).items():
        assert got[entry_name] == encoded, entry_name
    props = decode_properties(parts[0])
    assert props.headers["x-rtroute-exchange"] == name
    assert "x-rtroute-bcc" in props.headers["x-rtroute-error"]
    assert props.present(headers=False) == properties
    assert sc.exchange(name).get("dead_lettered") == 1


def take_from_shared_dead_letters(uri: str, message_id: str) -> None:
    """Removes the dead letter ``message_id`` from the shared ``rtroute.dead`` queue, which
    other tests read with pika (whose decoder fails on its timestamp and its nesting); the
    other messages there go back unacked."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=10_000)
        seen: list[tuple[int, bytes]] = []
        reader = frames.install(conn._impl)
        reader.intercept(ch.channel_number,
                         lambda tag, _exchange, _key, parts: seen.append((tag, parts[0])))
        ch.basic_consume("rtroute.dead", lambda *_: None, auto_ack=False)
        deadline = time.monotonic() + 2
        found = False
        while not found and time.monotonic() < deadline:
            conn.process_data_events(0.05)
            for tag, header in seen:
                if decode_properties(header).message_id == message_id:
                    ch.basic_ack(tag)
                    found = True
    finally:
        conn.close()  # the others are requeued


def test_an_anycast_divert_to_a_queue_made_a_second_before_moves_a_double_above_the_filter(
        run_config, channel, managed, objects, broker_uri):
    """Issue 13's case: an exclusive ANYCAST divert with ``price > 10.5`` whose target queue
    is created 1 s before the publish moves 10.7 (intact) there and lets 10.2 through."""
    prices = managed("anycast-late")
    target = f"{prices}.late"
    sc = run_config([{"name": prices, "kind": "topic"}],
                    [{"name": f"{prices}-d", "address": prices, "forwarding_address": target,
                      "filter": "price > 10.5", "exclusive": True,
                      "routing_type": "ANYCAST"}])
    local = objects.queue(f"{prices}.local", bind=(f"{prices}.bindings", "#"))
    objects.queue(target)
    time.sleep(1)
    publish_raw(broker_uri, prices, "k", entry("price", double(10.7)), b"10.7")
    publish_raw(broker_uri, prices, "k", entry("price", double(10.2)), b"10.2")
    wait_depth(channel, target, 1)
    wait_depth(channel, local, 1)
    ((_, moved),) = raw_consume(broker_uri, target, 1)
    assert frames.body_of(moved) == b"10.7"
    assert entries_of(moved[0])["price"] == entry("price", double(10.7))
    ((_, stayed),) = raw_consume(broker_uri, local, 1)
    assert frames.body_of(stayed) == b"10.2"
    assert sc.exchange(prices)["dead_lettered"] == 0
