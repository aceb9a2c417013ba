"""A shovel that filters and rewrites headers keeps what it does not change byte for byte:
a selector sees a double as a double, and the x-shovelled and timestamp entries are added to
a table pika could not even decode (a millisecond timestamp, 1,000 levels of nesting)."""
from __future__ import annotations

import time

import pika
import pytest

from rtroute.amqp import frames
from rtroute.amqp.content_header import (
    decode_properties,
    headers_span,
    table_entries,
)
from rtroute.amqp.field_table import FieldTable, Float32, Int64, Timestamp

from ..conftest import BROKER_URI, publish_frames, wait_for
from .conftest import declare_queue, depth, toml_shovel, wait_depth

pytestmark = pytest.mark.broker

MS = 1_700_000_000_123  # Date.now() of a Node.js client, sent as an AMQP timestamp


def deep(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


def raw_consume(uri: str, queue: str, expected: int) -> list[list[bytes]]:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        got: list[list[bytes]] = []
        reader = frames.install(conn._impl)
        reader.intercept(ch.channel_number, lambda _t, _e, _k, parts: got.append(parts))
        ch.basic_consume(queue, lambda *_: None, auto_ack=True)

        def enough() -> bool:
            conn.process_data_events(0.05)
            return len(got) >= expected

        wait_for(enough, 15)
        return got
    finally:
        conn.close()


def entries(header: bytes) -> dict:
    return {name: header[s:e] for name, s, e in table_entries(header, headers_span(header))}


def test_a_filtering_forwarding_shovel_keeps_every_other_header_byte_for_byte(names, shovels):
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(BROKER_URI, src)
    declare_queue(BROKER_URI, dst)
    shovels.start(toml_shovel(
        "lossless", BROKER_URI, BROKER_URI,
        f'queue = "{src}"\ndest-queue = "{dst}"\nadd_forward_headers = true\n'
        'dest_add_timestamp_header = true\nfilter = { selector = "price > 10.5" }'))
    odd = {"ratio": Float32(1.5), "sent": Timestamp(MS), "deep": deep(1000)}
    moved = publish_frames(BROKER_URI, src, b"10.7", {
        "headers": FieldTable({"price": 10.7, **odd}), "message_id": "m-1", "timestamp": MS})
    publish_frames(BROKER_URI, src, b"10.2", {"headers": FieldTable({"price": 10.2, **odd})})
    before = time.time()
    wait_depth(BROKER_URI, dst, 1)
    wait_for(lambda: depth(BROKER_URI, src) == 0)
    ((parts,),) = [raw_consume(BROKER_URI, dst, 1)]
    assert frames.body_of(parts) == b"10.7"
    got = entries(parts[0])
    for name, encoded in entries(moved).items():
        assert got[name] == encoded, name  # untouched, byte for byte
    props = decode_properties(parts[0])
    assert props.message_id == "m-1" and props.timestamp == MS
    (forward,) = props.headers["x-shovelled"]
    assert forward["shovel-name"] == "lossless"
    stamp = props.headers["x-shovelled-timestamp"]
    assert type(stamp) is Int64 and before - 5 <= stamp <= time.time() + 5  # the plugin's long
