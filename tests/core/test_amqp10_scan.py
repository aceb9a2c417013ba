"""Reading a stream chunk's messages in their common shape (rtroute.core.amqp10): the native
reader and its pure-Python twin give the same answers on random and mutated chunks, and
wherever they read a message, the full decoder (rtroute.amqp.amqp10_message) reads the same
fields from it. src_c/test_amqp10.c checks the C side on its own, under the sanitizers too.
The rows a reader builds either way are compared in tests/spark/test_stream_protocol_rows.py."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtroute.amqp.amqp10_message import AMQP10DecodeError, decode_message
from rtroute.core.amqp10 import CHUNK_COMPRESSED, CHUNK_TRUNCATED, py_scan_chunk

from ..hypothesis_profiles import examples
from .conftest import NATIVE

SCANNERS = [pytest.param(py_scan_chunk, id="twin")]
SCANNERS.append(pytest.param(getattr(NATIVE, "scan_chunk", None), id="native",
                             marks=() if NATIVE else pytest.mark.skip("extension not built")))


def text(value: str, code: int = 0xA1) -> bytes:
    raw = value.encode()
    if code in (0xB1, 0xB3):
        return bytes([code]) + struct.pack(">I", len(raw)) + raw
    return bytes([code, len(raw)]) + raw


def compound(code: int, items: list[bytes]) -> bytes:
    body = b"".join(items)
    if code in (0xC0, 0xC1):
        return bytes([code, len(body) + 1, len(items)]) + body
    return bytes([code]) + struct.pack(">II", len(body) + 4, len(items)) + body


def section(code: int, value: bytes) -> bytes:
    return b"\x00\x53" + bytes([code]) + value


def entries(*messages: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(m)) + m for m in messages)


def scan(scanner, data, skip=0, limit=10**9):
    lists = [[] for _ in range(7)]
    result = scanner(memoryview(data), skip, limit, *lists)
    lists[6] = [(i, bytes(m)) for i, m in lists[6]]
    return result, lists


STORED = (section(0x70, compound(0xC0, [b"\x42", b"\x40", b"\x52\x05", b"\x41", b"\x43"]))
          + section(0x72, compound(0xC1, [text("x-routing-key", 0xA3), text("a.b"),
                                          text("x-exchange", 0xA3), text("ex")]))
          + section(0x75, b"\xa0\x02hi"))


@pytest.mark.parametrize("scanner", SCANNERS)
def test_a_stored_publish_is_read_and_anything_else_is_left_to_the_decoder(scanner):
    cc = section(0x72, compound(0xC1, [text("x-routing-key", 0xA3), text("k"),
                                       text("x-cc", 0xA3), compound(0xC0, [text("c")])]))
    application = section(0x74, compound(0xC1, [text("n"), b"\x54\x05"])) + section(
        0x75, b"\xa0\x00")
    data = entries(STORED, cc, application)
    (taken, status), lists = scan(scanner, data)
    assert (taken, status) == (3, 0)
    keys, exchanges, bodies, durables, priorities, ttls, general = lists
    assert (keys[0], exchanges[0], bodies[0], durables[0], priorities[0], ttls[0]) == (
        "a.b", "ex", b"hi", 0, -1, 5)
    assert keys[1:] == [None, None] and [i for i, _ in general] == [1, 2]
    assert [m for _, m in general] == [cc, application]
    # skip and limit count entries
    (taken, _), lists = scan(scanner, data, skip=1, limit=1)
    assert taken == 1 and lists[6] == [(0, cc)]


@pytest.mark.parametrize("scanner", SCANNERS)
def test_sub_batches_compression_and_truncation(scanner):
    sub = entries(b"", STORED)
    data = entries(STORED) + struct.pack(">BHII", 0x80, 2, len(sub), len(sub)) + sub
    (taken, status), lists = scan(scanner, data)
    assert (taken, status) == (3, 0) and lists[1] == ["ex", None, "ex"] and lists[2][1] == b""
    compressed = struct.pack(">BHII", 0x90, 1, 1, 1) + b"x"
    assert scan(scanner, entries(STORED) + compressed)[0] == (1, CHUNK_COMPRESSED)
    assert scan(scanner, entries(STORED)[:-1])[0] == (0, CHUNK_TRUNCATED)
    assert scan(scanner, entries(STORED) + b"\x00\x00")[0] == (1, CHUNK_TRUNCATED)
    assert scan(scanner, entries(STORED) + b"\x00\x00", limit=1)[0] == (1, 0)


_DURABLE = st.sampled_from([b"\x40", b"\x41", b"\x42", b"\x56\x00", b"\x56\x07", b"\x50\x01"])
_PRIORITY = st.sampled_from([b"\x40", b"\x50\x09", b"\x51\x09", b"\x41"])
_UINT = st.sampled_from([b"\x40", b"\x43", b"\x52\x05", b"\x70\x00\x01\x00\x00", b"\x44"])
_NAMES = st.sampled_from(["x-routing-key", "x-exchange", "x-cc", "x-basic-type", "other"])
_STRING_CODES = st.sampled_from([0xA1, 0xA3, 0xB1, 0xB3])


@st.composite
def messages(draw) -> bytes:
    parts = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["header", "annotations", "data", "data32", "properties",
                                     "application", "value", "footer", "raw"]))
        if kind == "header":
            fields = [draw(_DURABLE), draw(_PRIORITY), draw(_UINT), draw(_DURABLE),
                      draw(_UINT), b"\x40"][:draw(st.integers(0, 6))]
            code = draw(st.sampled_from([0xC0, 0xD0]))
            parts.append(section(0x70, compound(code, fields) if fields or code == 0xD0
                                 else draw(st.sampled_from([b"\x45", compound(0xC0, [])]))))
        elif kind == "annotations":
            items = []
            for _ in range(draw(st.integers(0, 3))):
                items.append(text(draw(_NAMES), draw(_STRING_CODES)))
                items.append(draw(st.one_of(
                    st.builds(text, st.text(max_size=20), _STRING_CODES),
                    st.sampled_from([b"\x40", b"\x50\x01", compound(0xC0, [text("c")])]))))
            parts.append(section(0x72, compound(draw(st.sampled_from([0xC1, 0xD1])), items)))
        elif kind in ("data", "data32"):
            body = draw(st.binary(max_size=300 if kind == "data32" else 200))
            parts.append(section(0x75, (b"\xa0" + bytes([len(body)]) if kind == "data"
                                        else b"\xb0" + struct.pack(">I", len(body))) + body))
        elif kind == "properties":
            parts.append(section(0x73, compound(0xC0, [text("m1"), b"\x40"])))
        elif kind == "application":
            parts.append(section(0x74, compound(0xC1, [text("n"), b"\x54\x05"])))
        elif kind == "value":
            parts.append(section(0x77, text("v")))
        elif kind == "footer":
            parts.append(section(0x78, compound(0xC1, [])))
        else:
            parts.append(draw(st.binary(max_size=8)))
    message = bytearray(b"".join(parts))
    for _ in range(draw(st.integers(0, 2))):
        if message:
            message[draw(st.integers(0, len(message) - 1))] = draw(st.integers(0, 255))
    if message and draw(st.booleans()):
        del message[draw(st.integers(0, len(message))):]
    return bytes(message)


@settings(max_examples=examples(1500))
@given(st.lists(messages(), max_size=6), st.integers(0, 3), st.integers(0, 8))
def test_the_twin_and_the_native_reader_agree_and_match_the_decoder(batch, skip, limit):
    data = entries(*batch)
    twin = scan(py_scan_chunk, data, skip, limit)
    if NATIVE:
        assert scan(NATIVE.scan_chunk, data, skip, limit) == twin
    (taken, status), (keys, exchanges, bodies, durables, priorities, ttls, general) = twin
    assert status == 0 and taken == max(0, min(limit, len(batch) - skip))
    general_at = {i for i, _ in general}
    for i in range(taken):
        if i in general_at:
            continue
        message = decode_message(batch[skip + i])  # the common shape always decodes
        annotations = message.message_annotations or {}
        assert (keys[i], exchanges[i]) == (annotations.get("x-routing-key"),
                                           annotations.get("x-exchange"))
        assert bodies[i] == message.body and message.body_value is None
        assert message.properties is None and message.application_properties is None
        header = (message.header or []) + [None] * 3
        assert durables[i] == (-1 if header[0] is None else int(bool(header[0])))
        assert priorities[i] == (-1 if header[1] is None else header[1])
        assert ttls[i] == (-1 if header[2] is None else header[2])


def test_malformed_messages_are_left_to_the_decoder_which_reports_them():
    truncated = STORED[:-1]
    (_, _), lists = scan(py_scan_chunk, entries(truncated))
    assert lists[6] == [(0, truncated)]
    with pytest.raises(AMQP10DecodeError):
        decode_message(truncated)
