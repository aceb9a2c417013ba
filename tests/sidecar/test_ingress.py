"""IngressMessage: a delivery as frames, decoded only as far as routing needs (CC, BCC, the
alias), republished and dead-lettered as frames with only the headers table edited."""
from __future__ import annotations

import struct

import pika
import pika.spec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pika import frame as pika_frame

from rtroute.amqp import frames
from rtroute.amqp.content_header import (
    bcc_entry,
    headers_span,
    table_entries,
    with_headers_table,
)
from rtroute.amqp.field_table import encode_value
from rtroute.sidecar.ingress import IngressMessage

from ..amqp.test_field_table import TABLE_ENTRIES
from ..hypothesis_profiles import examples

DROP = ("x-rtroute-bcc", "BCC")


def delivery(body: bytes, props: pika.BasicProperties, channel: int = 1,
             frame_max: int = 131072) -> list[bytes]:
    parts = [pika_frame.Header(channel, len(body), props).marshal()]
    step = frame_max - 8
    parts += [pika_frame.Body(channel, body[i:i + step]).marshal()
              for i in range(0, len(body), step)]
    return parts


def decoded(data: bytes) -> list:
    out, pos = [], 0
    while pos < len(data):
        consumed, value = pika_frame.decode_frame(data[pos:])
        out.append(value)
        pos += consumed
    return out


def republish(message: IngressMessage, bcc, channel: int = 7) -> list:
    method = frames.publish_frame(channel, frames.shortstr("x.bindings"),
                                  frames.shortstr("a.*"), True)
    data, count = message.republish_frames(channel, method, DROP, bcc)
    values = decoded(data)
    assert len(values) == count
    assert {v.channel_number for v in values} == {channel}
    return values


def test_routing_key_and_headers_are_decoded_and_nothing_else_until_asked():
    props = pika.BasicProperties(headers={"CC": ["c.d"]}, message_id="m1")
    m = IngressMessage("ex", 5, True, frames.shortstr("a.*"), delivery(b"hello", props))
    assert (m.tag, m.redelivered, m.routing_key, m.headers) == (5, True, "a.*", {"CC": ["c.d"]})
    assert m._props is None and m._body is None
    assert m.props.message_id == "m1" and m.body == b"hello" and m.body_size == 5


def test_a_routing_key_that_is_not_utf8_stays_bytes_as_pika_gives_it():
    m = IngressMessage("ex", 1, False, b"\x02\xff\xfe", delivery(b"", pika.BasicProperties()))
    assert m.routing_key == b"\xff\xfe"


def test_republish_adds_bcc_drops_the_alias_and_keeps_the_rest():
    props = pika.BasicProperties(content_type="text/plain", delivery_mode=2, priority=3,
                                 headers={"x-rtroute-bcc": ["k.1"], "keep": "yes"})
    m = IngressMessage("ex", 1, False, frames.shortstr("a.*"), delivery(b"body", props))
    method, header, body = republish(m, ("k.1", "k.2"))
    assert method.method.NAME == "Basic.Publish"
    assert (method.method.exchange, method.method.routing_key) == ("x.bindings", "a.*")
    assert method.method.mandatory
    assert header.properties.headers == {"keep": "yes", "BCC": ["k.1", "k.2"]}
    assert (header.properties.content_type, header.properties.delivery_mode,
            header.properties.priority) == ("text/plain", 2, 3)
    assert header.body_size == 4 and body.fragment == b"body"


def test_republish_without_bcc_or_headers_moves_the_frames_unchanged():
    props = pika.BasicProperties(message_id="m")
    parts = delivery(b"", props)
    m = IngressMessage("ex", 1, False, frames.shortstr("a.b"), parts)
    _method, header = republish(m, ())
    assert header.properties.headers is None and header.properties.message_id == "m"
    assert header.body_size == 0


def test_a_body_of_several_frames_is_republished_frame_for_frame():
    body = bytes(range(256)) * 100
    m = IngressMessage("ex", 1, False, frames.shortstr("a"),
                       delivery(body, pika.BasicProperties(), frame_max=4096))
    values = republish(m, ("k",))
    assert len(values) == 2 + len(m.parts) - 1
    assert b"".join(v.fragment for v in values[2:]) == body
    assert m.body == body


def test_a_headers_table_that_cannot_be_decoded_is_an_error_not_an_exception():
    parts = delivery(b"x", pika.BasicProperties(headers={"a": "b"}))
    header = parts[0]
    broken = header.replace(b"\x01aS", b"\x01aZ")  # an unknown field type
    m = IngressMessage("ex", 1, False, frames.shortstr("k"), [broken, parts[1]])
    assert m.error is not None and "cannot decode the message's headers" in m.error
    assert m.headers is None and m.routing_key == "k"


# -- lossless headers -------------------------------------------------------------------------
def raw_delivery(entries: bytes, body: bytes = b"b", **properties) -> list[bytes]:
    """Frames of a delivery whose headers table holds exactly the encoded ``entries``."""
    parts = delivery(body, pika.BasicProperties(**properties))
    header = parts[0]
    return [with_headers_table(header, 1, headers_span(header), entries), *parts[1:]]


def _entry(name: str, value: bytes) -> bytes:
    return bytes((len(name),)) + name.encode() + value


def _sized(tag: bytes, content: bytes) -> bytes:
    return tag + struct.pack(">I", len(content)) + content


CC = _entry("CC", _sized(b"A", _sized(b"S", b"c.d")))
ALIAS = _entry("x-rtroute-bcc", _sized(b"A", _sized(b"S", b"k.1")))
PRICE = _entry("price", b"d" + struct.pack(">d", 10.7))
MS_TIMESTAMP = _entry("sent", b"T" + struct.pack(">Q", 1_700_000_000_123))  # Node.js Date.now()


def deep(levels: int) -> bytes:
    value = _sized(b"F", b"")
    for _ in range(levels):
        value = _sized(b"F", _entry("k", value))
    return _entry("deep", value)


def test_only_cc_bcc_and_the_alias_are_decoded_at_delivery():
    entries = PRICE + CC + MS_TIMESTAMP + deep(1000) + ALIAS
    m = IngressMessage("ex", 1, False, frames.shortstr("a.b"), raw_delivery(entries))
    assert m.error is None
    assert m.routing_headers == {"CC": ["c.d"], "x-rtroute-bcc": ["k.1"]}
    assert m.routing_headers.wire_size == 4 + len(entries)
    assert m._headers is not None and m._props is None  # not decoded yet
    assert m.headers["price"] == 10.7 and m.headers["sent"] == 1_700_000_000_123
    assert m.props.headers["price"] > 10.5


def test_the_alias_is_the_exchange_s_own():
    class Spec:
        bcc_alias_header = "x-my-bcc"

    class Exchange:
        spec = Spec()

    entries = _entry("x-my-bcc", _sized(b"A", _sized(b"S", b"z"))) + ALIAS
    m = IngressMessage(Exchange(), 1, False, frames.shortstr("a"), raw_delivery(entries))
    assert m.routing_headers == {"x-my-bcc": ["z"]}


def test_a_table_without_routing_entries_still_has_its_size():
    m = IngressMessage("ex", 1, False, frames.shortstr("a"), raw_delivery(PRICE))
    assert m.routing_headers == {} and m.routing_headers.wire_size == 4 + len(PRICE)
    plain = IngressMessage("ex", 1, False, frames.shortstr("a"),
                           delivery(b"", pika.BasicProperties()))
    assert plain.routing_headers is None and plain.headers is None


def test_a_structure_error_deep_inside_an_unselected_entry_is_found_at_delivery():
    broken = deep(50).replace(b"\x01kF\x00\x00\x00\x00", b"\x01kZ\x00\x00\x00\x00")
    m = IngressMessage("ex", 1, False, frames.shortstr("a"), raw_delivery(CC + broken))
    assert m.error is not None and "unknown field type 'Z'" in m.error


def test_republishing_keeps_values_pika_cannot_read_byte_for_byte():
    entries = PRICE + ALIAS + MS_TIMESTAMP + deep(600)
    m = IngressMessage("ex", 1, False, frames.shortstr("a.*"), raw_delivery(entries))
    data, _count = m.republish_frames(7, b"", DROP, ("k.1",))
    header = data[:data.index(b"\xce", 7 + struct.unpack_from(">I", data, 3)[0]) + 1]
    start, end = headers_span(header)
    assert header[start + 4:end] == PRICE + MS_TIMESTAMP + deep(600) + bcc_entry(["k.1"])


def test_a_dead_letter_keeps_every_property_and_header_and_adds_the_reason():
    entries = PRICE + ALIAS + MS_TIMESTAMP
    parts = raw_delivery(entries, b"body", message_id="m-1", delivery_mode=2,
                         timestamp=1_700_000_000_123)
    m = IngressMessage("ex", 1, False, frames.shortstr("a"), parts)
    method = frames.publish_frame(3, frames.shortstr("rtroute.dead"), frames.shortstr("a"),
                                  True)
    data, count = m.dead_letter_frames(3, method, {"x-rtroute-error": "bad alias"}, 131072)
    assert count == 3 and data.startswith(method)
    header = data[len(method):len(data) - len(parts[1])]
    start, end = headers_span(header)
    assert header[start + 4:end] == entries + _entry("x-rtroute-error",
                                                     _sized(b"S", b"bad alias"))
    original_end = headers_span(parts[0])[1]
    assert header[7:start] == parts[0][7:start] and header[end:] == parts[0][original_end:]
    assert data.endswith(frames.on_channel(parts[1], 3))


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=TABLE_ENTRIES, bcc=st.none() | st.tuples(st.text(max_size=5)))
def test_every_table_is_republished_byte_for_byte_but_alias_and_bcc(entries, bcc):
    m = IngressMessage("ex", 1, False, frames.shortstr("a"), raw_delivery(entries))
    assert m.error is None
    full = m.headers
    for name in ("CC", "BCC", "x-rtroute-bcc"):  # the routing view: each name's first entry
        if name in full:
            assert encode_value(m.routing_headers[name]) == encode_value(full[name])
    data, _count = m.republish_frames(9, b"", DROP, bcc)
    header = data[:8 + struct.unpack_from(">I", data, 3)[0]]
    start, end = headers_span(header)
    original = raw_delivery(entries)[0]
    kept = [original[s:e] for n, s, e in table_entries(original, headers_span(original))
            if n not in DROP]
    assert header[start + 4:end] == b"".join(kept) + (bcc_entry(bcc) if bcc else b"")
