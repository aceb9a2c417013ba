"""The stream protocol's pure parts: stream URIs, a chunk's messages, AMQP 1.0 sections."""
from __future__ import annotations

import struct

import pytest

from rtroute.amqp.amqp10_message import AMQP10DecodeError, decode_message
from rtroute.amqp.field_table import Int8, Int64, Timestamp, UInt8, UInt32, amqp_type
from rtroute.amqp.stream_protocol import (
    Chunk,
    StreamProtocolError,
    chunk_messages,
    parse_stream_uri,
    stream_uri_for,
)


def test_a_stream_uri_is_derived_from_the_amqp_uri_with_its_credentials_vhost_and_tls():
    assert stream_uri_for("amqp://u:p@h:5673/v%2Fx") == "rabbitmq-stream://u:p@h:5552/v%2Fx"
    assert stream_uri_for("amqps://u:p@h/%2F?cacertfile=/ca.pem") == \
        "rabbitmq-stream+tls://u:p@h:5551/%2F?cacertfile=/ca.pem"
    assert stream_uri_for("amqp://[::1]:5672/") == "rabbitmq-stream://[::1]:5552/"
    parsed = parse_stream_uri("rabbitmq-stream+tls://u:p@h/v?cacertfile=/ca.pem")
    assert (parsed.host, parsed.port, parsed.vhost, parsed.username) == ("h", 5551, "v", "u")
    assert parsed.tls is not None
    assert parse_stream_uri("rabbitmq-stream://h:6000/%2F").port == 6000
    assert parse_stream_uri("rabbitmq-stream://h/%2F").port == 5552
    with pytest.raises(ValueError, match="rabbitmq-stream://"):
        parse_stream_uri("amqp://h/")


def _simple(*messages: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(m)) + m for m in messages)


def test_a_chunk_gives_its_simple_and_sub_batch_entries_in_order():
    sub = _simple(b"c", b"dd")
    data = (_simple(b"a", b"") + struct.pack(">BHII", 0x80, 2, len(sub), len(sub)) + sub
            + _simple(b"e"))
    chunk = Chunk(10, 5, 4, 0, memoryview(data))
    assert [bytes(m) for m in chunk_messages(chunk)] == [b"a", b"", b"c", b"dd", b"e"]
    compressed = struct.pack(">BHII", 0x80 | 0x10, 1, 1, 1) + b"x"
    with pytest.raises(StreamProtocolError, match="compressed"):
        list(chunk_messages(Chunk(0, 1, 1, 0, memoryview(compressed))))


def _str8(text: str, code: int = 0xA1) -> bytes:
    raw = text.encode()
    return bytes([code, len(raw)]) + raw


def _map8(*items: bytes) -> bytes:
    body = b"".join(items)
    return bytes([0xC1, len(body) + 1, len(items)]) + body


def test_the_sections_of_a_stored_message_decode_with_their_types():
    annotations = b"\x00\x53\x72" + _map8(_str8("x-routing-key", 0xA3), _str8("k.a"),
                                          _str8("x-exchange", 0xA3), _str8("ex"))
    properties_list = (_str8("m1") + b"\xa0\x05guest" + b"\x40\x40" + _str8("r") + b"\x40"
                       + _str8("text/plain", 0xA3) + b"\x40\x40" + b"\x83"
                       + struct.pack(">q", 1_700_000_000_000))
    properties = b"\x00\x53\x73" + bytes([0xC0, len(properties_list) + 1, 10]) + properties_list
    application = b"\x00\x53\x74" + _map8(_str8("b"), b"\x51\xfd", _str8("u"), b"\x50\x07",
                                          _str8("i"), b"\x54\x05", _str8("l"),
                                          b"\x81" + struct.pack(">q", 2**40), _str8("n"),
                                          b"\x52\x09", _str8("t"), b"\x41")
    body = b"\x00\x53\x75\xa0\x03\x00\x01\xff" + b"\x00\x53\x75\xa0\x01z"
    message = decode_message(annotations + properties + application + body)
    assert message.message_annotations == {"x-routing-key": "k.a", "x-exchange": "ex"}
    assert message.properties[:7] == ["m1", b"guest", None, None, "r", None, "text/plain"]
    assert message.properties[9] == 1_700_000_000_000
    assert isinstance(message.properties[9], Timestamp)
    values = message.application_properties
    assert values == {"b": -3, "u": 7, "i": 5, "l": 2**40, "n": 9, "t": True}
    assert [type(values[k]) for k in ("b", "u", "l", "n")] == [Int8, UInt8, Int64, UInt32]
    assert amqp_type(values["i"]) == "I"
    assert message.body == b"\x00\x01\xffz"
    assert message.header is None


def test_a_truncated_message_is_a_decode_error():
    with pytest.raises(AMQP10DecodeError):
        decode_message(b"\x00\x53\x75\xa0\x09ab")
    with pytest.raises(AMQP10DecodeError, match="unknown constructor"):
        decode_message(b"\x00\x53\x77\x01")
