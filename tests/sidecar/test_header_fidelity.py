"""Header fidelity over the real broker: what a consumer gets is what the publisher sent.

The sidecar republishes each ingress message from the frames as received, editing only the
headers table at the byte level (``rtroute.amqp.content_header``). Header values pika cannot
round-trip (float ``f``, double ``d``, short ``s``, decimal ``D``, byte array ``x``, void
``V``, timestamp ``T``, nested table ``F``, arrays ``A``) must therefore reach consumers
exactly as published, every other basic property unchanged, and only the BCC alias header
removed (RabbitMQ strips the ``BCC`` the sidecar adds).

The publish is written as hand-built frames (pika refuses to encode floats), and what arrived
is read twice: through the management API (``/api/queues/VHOST/Q/get``, which shows values as
the broker decoded them) and with a frame-level consumer (the content header frame as
delivered, compared byte for byte with the one published).

What "exactly as published" means depends on the broker's version (see
:func:`as_delivered_by`): RabbitMQ 3.x delivers the top-level entries of the headers table in
publish order, 4.x sorts them by name; each entry arrives byte-identical on both.
"""
from __future__ import annotations

import base64
import struct
import time
import urllib.parse
from typing import Any

import pika
import pika.frame
import pytest

from rtroute.amqp import frames
from rtroute.amqp.content_header import (
    FLAG_HEADERS,
    FLAGS_OFFSET,
    headers_span,
    table_entries,
    with_headers_table,
)

from ..conftest import wait_for
from .conftest import depth, wait_depth

pytestmark = pytest.mark.broker

ALIAS = "x-rtroute-bcc"


# -- hand encoding of AMQP 0-9-1 field values (RabbitMQ's dialect) -------------------------
def _long(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def entry(name: str, value: bytes) -> bytes:
    """One table entry: ``name`` (short string) + ``value`` (type octet + encoding)."""
    return frames.shortstr(name) + value


def longstr(text: str | bytes) -> bytes:
    return b"S" + _long(text.encode("utf-8") if isinstance(text, str) else text)


def table(*entries: bytes) -> bytes:
    return b"F" + _long(b"".join(entries))


def array(*values: bytes) -> bytes:
    return b"A" + _long(b"".join(values))


def double(v: float) -> bytes:
    return b"d" + struct.pack(">d", v)


def float32(v: float) -> bytes:
    return b"f" + struct.pack(">f", v)


def short(v: int) -> bytes:
    return b"s" + struct.pack(">h", v)


def decimal(scale: int, v: int) -> bytes:
    return b"D" + struct.pack(">BI", scale, v)


def timestamp(v: int) -> bytes:
    return b"T" + struct.pack(">Q", v)


def byte_array(data: bytes) -> bytes:
    return b"x" + _long(data)


VOID = b"V"

# Every entry as published, in order; the alias sits mid-table so that removing it must keep
# the entries on both sides (and their order) intact.
PUBLISHED_ENTRIES = [
    ("dbl", entry("dbl", double(1.5))),
    ("flt", entry("flt", float32(2.25))),
    ("shrt", entry("shrt", short(-7))),
    ("dec", entry("dec", decimal(2, 12345))),                    # 123.45
    ("ts", entry("ts", timestamp(1_700_000_123))),
    ("bin", entry("bin", byte_array(b"\x00\x01\xfe\xff"))),
    ("void", entry("void", VOID)),
    (ALIAS, entry(ALIAS, array(longstr("fid.bcc")))),
    ("nested", entry("nested", table(
        entry("inner-d", double(-0.25)),
        entry("inner-s", short(300)),
        entry("inner-S", longstr("hé")),
        entry("inner-A", array(float32(0.5), VOID)),
    ))),
    ("arr", entry("arr", array(
        float32(0.5), double(3.75), short(-2), longstr("txt"), VOID, b"t\x01",
        b"b" + struct.pack(">b", -3), b"B\xfa", b"u" + struct.pack(">H", 65000),
        b"i" + struct.pack(">I", 4_000_000_000), b"l" + struct.pack(">q", -(2 ** 40)),
        b"I" + struct.pack(">i", -5), timestamp(1), decimal(1, 15), byte_array(b"\x00"),
        table(entry("k", longstr("v"))),
    ))),
    ("CC", entry("CC", array(longstr("fid.cc")))),
    ("keep", entry("keep", longstr("me"))),
]

PROPERTIES = {
    "content_type": "application/x-test", "content_encoding": "gzip", "delivery_mode": 2,
    "priority": 4, "correlation_id": "corr-42", "reply_to": "replies.here",
    "expiration": "600000", "message_id": "msg-42", "timestamp": 1_700_000_000,
    "type": "fidelity", "user_id": "guest", "app_id": "rtroute-tests",
}

# What the management API shows for the published headers once the alias is gone. Its JSON
# rendering has quirks of its own (RabbitMQ's, whatever the publisher): a decimal {scale,
# value} is printed as "scale.value" (scale 2, value 12345 shows as 2.12345), void as the
# string "undefined", bytes that are not UTF-8 as a base64 note. The frame-level check in
# the test compares the encoded entries themselves.
EXPECTED_MGMT_HEADERS = {
    "dbl": 1.5,
    "flt": 2.25,
    "shrt": -7,
    "dec": 2.12345,
    "ts": 1_700_000_123,
    "bin": "Not UTF-8, base64 is: AAH+/w==",
    "void": "undefined",
    "nested": {"inner-d": -0.25, "inner-s": 300, "inner-S": "hé",
               "inner-A": [0.5, "undefined"]},
    "arr": [0.5, 3.75, -2, "txt", "undefined", True, -3, 250, 65000, 4_000_000_000,
            -(2 ** 40), -5, 1, 1.15, "\x00", {"k": "v"}],
    "CC": ["fid.cc"],
    "keep": "me",
}


def as_delivered_by(broker_version: tuple[int, ...], entries: list[tuple[str, bytes]]
                    ) -> bytes:
    """The encoded top-level ``entries`` (name, encoded entry) of a published headers table as
    a RabbitMQ of ``broker_version`` delivers them.

    3.x (seen on 3.10.8): as published, in publish order, duplicates included. 4.x (seen on
    4.0.5): sorted by name as bytes (UTF-8; a name before its extensions: ``a``, ``a-b``,
    ``aa``; upper case before lower case), and of entries with equal names only the first
    published. Each entry itself is byte-identical in both, so nested tables and arrays keep
    their own order.
    """
    if broker_version < (4,):
        return b"".join(encoded for _name, encoded in entries)
    first: dict[bytes, bytes] = {}
    for name, encoded in entries:
        first.setdefault(name.encode(), encoded)
    return b"".join(first[name] for name in sorted(first))


# -- publishing hand-built frames ------------------------------------------------------------
def hand_built_header(channel: int, body: bytes, entries: bytes | None,
                      **properties: Any) -> bytes:
    """A content header frame with ``properties`` and, unless None, a headers table holding
    exactly the encoded ``entries``."""
    header = pika.frame.Header(channel, len(body), pika.BasicProperties(**properties)).marshal()
    if entries is None:
        return header
    return with_headers_table(header, channel, headers_span(header), entries)


def publish_raw(connection: pika.BlockingConnection, ch: Any, exchange: str, routing_key: str,
                header: bytes, body: bytes) -> None:
    """Writes basic.publish + ``header`` + one body frame, then makes sure the broker took it
    (a synchronous method on the same channel is answered only after the publish)."""
    data = b"".join((
        frames.publish_frame(ch.channel_number, frames.shortstr(exchange),
                             frames.shortstr(routing_key), False),
        header,
        struct.pack(">BHI", frames.FRAME_BODY, ch.channel_number, len(body)), body,
        frames.FRAME_END,
    ))
    frames.emit(connection._impl, data, 3)
    connection.process_data_events(0)
    ch.exchange_declare(exchange, passive=True)  # raises if the publish closed the channel


# -- reading what arrived --------------------------------------------------------------------
def mgmt_peek(mgmt, queue: str, count: int = 5) -> list[dict]:
    """The messages in ``queue`` as the broker decodes them, left in the queue (requeued) so
    that the frame-level consumer reads the same message afterwards."""
    return mgmt.request("POST", f"queues/%2F/{urllib.parse.quote(queue, safe='')}/get", {
        "count": count, "ackmode": "ack_requeue_true", "encoding": "base64"})


def raw_consume(broker_uri: str, queue: str, expected: int, settle: float = 0.3
                ) -> list[tuple[str, bytes, list[bytes]]]:
    """Every delivery from ``queue`` at the frame level: (exchange, routing key, parts), where
    ``parts`` are the content header frame and the body frames exactly as delivered."""
    conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        ch = conn.channel()
        got: list[tuple[str, bytes, list[bytes]]] = []
        reader = frames.install(conn._impl)
        reader.intercept(ch.channel_number, lambda _tag, exchange, key, parts: got.append(
            (exchange[1:].decode(), key[1:], parts)))
        ch.basic_consume(queue, lambda *_: None, auto_ack=True)

        def enough() -> bool:
            conn.process_data_events(0.05)
            return len(got) >= expected

        wait_for(enough, 10)
        deadline = time.monotonic() + settle  # duplicates would land now
        while time.monotonic() < deadline:
            conn.process_data_events(0.05)
        return got
    finally:
        conn.close()


def properties_outside_headers(header: bytes) -> tuple[bytes, int, bytes, bytes]:
    """(class/weight/body size, flags, bytes before the headers field, bytes after it)."""
    start, end = headers_span(header)
    flags = struct.unpack_from(">H", header, FLAGS_OFFSET)[0]
    return header[7:FLAGS_OFFSET], flags, header[FLAGS_OFFSET + 2:start], header[end:-1]


def bind_queues(channel, managed, name: str, bindings: list[tuple[str, str]]) -> dict[str, str]:
    queues = {}
    for dest, key in bindings:
        queues[dest] = f"{name}.{dest}"
        channel.queue_declare(queues[dest], durable=True)
        managed.queues.append(queues[dest])
        channel.queue_bind(queues[dest], f"{name}.bindings", key)
    return queues


# -- the tests ---------------------------------------------------------------------------------
def test_the_broker_orders_top_level_entries_as_its_version_does(channel, managed, broker_uri,
                                                                  broker_version):
    """:func:`as_delivered_by` without the sidecar: names whose order a sort could get wrong
    (case, punctuation, prefixes, UTF-8, digits), a repeated name, a nested table."""
    names = ["b", "B", "a", "ab", "a-b", "A", "é", "e", "_x", "1", "aa", "a", "Z~"]
    entries = [(n, entry(n, longstr(f"v{i}"))) for i, n in enumerate(names)]
    entries.append(("nest", entry("nest", table(entry("z", short(1)), entry("y", short(2))))))
    name = managed("order")
    queue = f"{name}.q"
    channel.exchange_declare(name, "fanout")
    channel.queue_declare(queue, durable=True)
    managed.queues.append(queue)
    channel.queue_bind(queue, name)
    conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        ch = conn.channel()
        published = hand_built_header(ch.channel_number, b"x", b"".join(e for _, e in entries),
                                      content_type="text/plain")
        publish_raw(conn, ch, name, "", published, b"x")
    finally:
        conn.close()
    ((_exchange, _key, parts),) = raw_consume(broker_uri, queue, 1)
    start, end = headers_span(parts[0])
    assert parts[0][start + 4:end] == as_delivered_by(broker_version, entries)


def test_unencodable_header_values_and_every_property_reach_consumers_byte_for_byte(
        sidecars, channel, managed, mgmt, broker_uri, broker_version):
    name = managed("fidelity")
    sc = sidecars("--rtopic", name)
    sc.wait_running(name)
    queues = bind_queues(channel, managed, name, [
        ("main", "fid.main"),  # matched by the routing key "*.main"
        ("bcc", "fid.bcc"),    # reached only through the alias header
        ("cc", "fid.cc"),      # reached through CC
        ("none", "fid.none"),  # matched by nothing
    ])
    sc.wait_running(name, bindings=4)

    body = b"\x00binary body \xff" * 3
    routing_key = "*.main"
    conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        ch = conn.channel()
        entries = b"".join(e for _, e in PUBLISHED_ENTRIES)
        published = hand_built_header(ch.channel_number, body, entries, **PROPERTIES)
        # the hand-built frame holds exactly the entries meant (sanity of the encoding above)
        assert [n for n, _, _ in table_entries(published, headers_span(published))] == \
            [n for n, _ in PUBLISHED_ENTRIES]
        publish_raw(conn, ch, name, routing_key, published, body)
    finally:
        conn.close()

    delivered_to = ("main", "bcc", "cc")
    for dest in delivered_to:
        wait_depth(channel, queues[dest], 1)
    assert depth(channel, queues["none"]) == 0
    ex = sc.exchange(name)
    assert (ex.get("dead_lettered"), ex.get("unroutable")) == (0, 0), ex

    # 1. as the broker decodes the delivered message
    for dest in delivered_to:
        (msg,) = mgmt_peek(mgmt, queues[dest])
        assert base64.b64decode(msg["payload"]) == body, dest
        assert msg["routing_key"] == routing_key, dest  # as published
        props = dict(msg["properties"])
        headers = props.pop("headers")
        assert headers == EXPECTED_MGMT_HEADERS, dest  # alias gone, CC kept, no BCC
        assert props == PROPERTIES, dest  # every other property as published

    # 2. the content header frame as delivered, byte for byte (in the broker's order)
    expected_entries = as_delivered_by(broker_version,
                                       [(n, e) for n, e in PUBLISHED_ENTRIES if n != ALIAS])
    for dest in delivered_to:
        (got,) = raw_consume(broker_uri, queues[dest], 1)  # exactly one copy per queue
        _exchange, key, parts = got
        assert key == routing_key.encode(), dest
        assert frames.body_of(parts) == body, dest
        delivered = parts[0]
        start, end = headers_span(delivered)
        assert delivered[start + 4:end] == expected_entries, dest
        assert properties_outside_headers(delivered) == properties_outside_headers(published), \
            dest
    assert depth(channel, queues["none"]) == 0


def test_message_without_headers_keeps_its_properties(sidecars, channel, managed, mgmt,
                                                       broker_uri):
    name = managed("noheaders")
    sc = sidecars("--rtopic", name)
    sc.wait_running(name)
    queues = bind_queues(channel, managed, name, [("q", "plain.one"), ("none", "plain.two.x")])
    sc.wait_running(name, bindings=2)

    properties = {"content_type": "text/plain", "delivery_mode": 1,
                  "message_id": "no-headers-1", "timestamp": 1_650_000_000,
                  "app_id": "rtroute-tests"}
    body = b"no headers here"
    conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        ch = conn.channel()
        published = hand_built_header(ch.channel_number, body, None, **properties)
        assert headers_span(published)[0] == headers_span(published)[1]  # no headers field
        publish_raw(conn, ch, name, "plain.*", published, body)
    finally:
        conn.close()

    wait_depth(channel, queues["q"], 1)
    assert depth(channel, queues["none"]) == 0

    (msg,) = mgmt_peek(mgmt, queues["q"])
    assert base64.b64decode(msg["payload"]) == body
    assert msg["routing_key"] == "plain.*"
    props = dict(msg["properties"])
    # What actually happens: the sidecar must add a BCC header to reach the matched binding,
    # and RabbitMQ, stripping BCC on delivery, keeps the table BCC came in. So the consumer
    # sees an empty headers table ({}) where the publisher sent no headers property at all (a
    # plugin routing inside the broker would add nothing and deliver none). That is the one
    # difference an unmodified RabbitMQ imposes, and it is what is asserted, here and in the
    # frame below.
    assert props.pop("headers") == {}
    assert props == properties

    ((_exchange, key, parts),) = raw_consume(broker_uri, queues["q"], 1)
    assert key == b"plain.*"
    assert frames.body_of(parts) == body
    delivered = parts[0]
    start, end = headers_span(delivered)
    assert delivered[start:end] == b"\x00\x00\x00\x00"  # an empty table, as said above
    got_layout = properties_outside_headers(delivered)
    want_layout = properties_outside_headers(published)
    assert got_layout[1] == want_layout[1] | FLAG_HEADERS  # only the headers flag added
    assert (got_layout[0], got_layout[2], got_layout[3]) == \
        (want_layout[0], want_layout[2], want_layout[3])
