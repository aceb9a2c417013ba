"""Every property of a content header, read without loss, and edits that keep the bytes of
whatever they do not change: ContentHeader (the shovel's rewrites), dead_letter_header."""
from __future__ import annotations

import struct

import pika.spec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pika import frame as pika_frame

from rtroute.amqp.content_header import (
    FLAG_HEADERS,
    FLAGS_OFFSET,
    PROPERTY_NAMES,
    BasicProperties,
    ContentHeader,
    content_header_frame,
    dead_letter_header,
    decode_properties,
    headers_span,
    table_entries,
    with_headers_table,
)
from rtroute.amqp.field_table import FieldTable, FieldTableError, Float32, Timestamp

from ..hypothesis_profiles import examples
from .test_field_table import TABLE_ENTRIES, entry, sized

EVERY_OTHER = {
    "content_type": "application/json", "content_encoding": "gzip", "delivery_mode": 2,
    "priority": 7, "correlation_id": "corr-1", "reply_to": "r", "expiration": "60000",
    "message_id": "m-ü-1", "timestamp": 1_700_000_000, "type": "t", "user_id": "guest",
    "app_id": "a", "cluster_id": "c1",
}
PRICE = entry("price", b"d" + struct.pack(">d", 10.7))
RATIO = entry("ratio", b"f" + struct.pack(">f", 1.5))
SHORT = entry("small", b"s" + struct.pack(">h", -2))
MS_TIMESTAMP = entry("sent", b"T" + struct.pack(">Q", 1_700_000_000_123))  # Date.now()


def pika_header(channel=1, body_size=0, **properties) -> bytes:
    return pika_frame.Header(channel, body_size,
                             pika.spec.BasicProperties(**properties)).marshal()


def raw_header(entries: bytes, channel=1, body_size=0, **properties) -> bytes:
    """A content header frame with ``properties`` and a headers table of exactly
    ``entries``."""
    frame = pika_header(channel, body_size, **properties)
    return with_headers_table(frame, channel, headers_span(frame), entries)


def table_bytes(frame: bytes) -> bytes:
    start, end = headers_span(frame)
    return frame[start + 4:end]


def outside_headers(frame: bytes) -> tuple[bytes, bytes, bytes]:
    """(class, weight and body size; properties before the table; properties after it)."""
    start, end = headers_span(frame)
    return frame[7:FLAGS_OFFSET], frame[FLAGS_OFFSET + 2:start], frame[end:-1]


# -- decode_properties ------------------------------------------------------------------------
def test_every_property_decodes_as_pika_decodes_it_when_pika_can():
    frame = pika_header(3, 9, headers={"a": "b", "n": [1, True]}, **EVERY_OTHER)
    props = decode_properties(frame)
    assert props.present(headers=False) == EVERY_OTHER
    assert props.headers == {"a": "b", "n": [1, True]}
    assert isinstance(props.headers, FieldTable)


def test_values_pika_cannot_decode_come_back_typed():
    frame = raw_header(PRICE + RATIO + SHORT + MS_TIMESTAMP, timestamp=1_700_000_000_123)
    props = decode_properties(frame)
    assert props.headers == {"price": 10.7, "ratio": 1.5, "small": -2,
                             "sent": 1_700_000_000_123}
    assert type(props.headers["ratio"]) is Float32
    assert type(props.headers["sent"]) is Timestamp
    assert props.timestamp == 1_700_000_000_123  # a property timestamp: a plain int too


def test_a_frame_without_properties_decodes_to_none_everywhere():
    assert decode_properties(pika_header()) == BasicProperties()


@pytest.mark.parametrize("cut", [20, 22, 30])
def test_a_truncated_frame_is_a_value_error(cut):
    frame = pika_header(headers={"a": "b"}, message_id="mmmmmmmmmm", app_id="x")
    with pytest.raises(ValueError):
        decode_properties(frame[:cut] + b"\xce")


# -- content_header_frame ---------------------------------------------------------------------
@pytest.mark.parametrize("properties", [
    {}, EVERY_OTHER, {"headers": {"x": 1, "y": ["a"], "z": {"n": None}}, "priority": 0},
    {"headers": {}}, {"delivery_mode": 1, "app_id": ""},
])
def test_content_header_frame_writes_what_pika_writes(properties):
    assert content_header_frame(4, 123, properties) == pika_header(4, 123, **properties)
    assert content_header_frame(4, 123, BasicProperties(**properties)) == \
        pika_header(4, 123, **properties)


def test_content_header_frame_refuses_what_the_broker_would_not_take():
    with pytest.raises(ValueError, match="255"):
        content_header_frame(1, 0, {"message_id": "m" * 256})
    with pytest.raises(ValueError, match="unknown"):
        content_header_frame(1, 0, {"messageid": "m"})
    with pytest.raises(FieldTableError, match="541"):
        content_header_frame(1, 0, {"headers": {"x": float("nan")}})
    with pytest.raises(FieldTableError, match="541"):
        content_header_frame(1, 0, {"headers": {"x": [Float32("inf")]}})


# -- ContentHeader ------------------------------------------------------------------------------
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=TABLE_ENTRIES, channel=st.integers(0, 65535))
def test_an_unedited_content_header_is_the_same_frame(entries, channel):
    frame = raw_header(entries, channel, 77, **EVERY_OTHER)
    assert ContentHeader(frame).frame(channel) == frame


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=TABLE_ENTRIES, value=st.text(max_size=5))
def test_setting_one_header_keeps_every_other_entry_byte_for_byte(entries, value):
    frame = raw_header(entries, 1, 5, **EVERY_OTHER)
    edited = ContentHeader(frame)
    edited.set_header("x-shovelled-timestamp", value)
    out = edited.frame(2)
    kept = [frame[s:e] for n, s, e in table_entries(frame, headers_span(frame))
            if n != "x-shovelled-timestamp"]
    got = [out[s:e] for n, s, e in table_entries(out, headers_span(out))
           if n != "x-shovelled-timestamp"]
    assert got == kept
    assert decode_properties(out).headers["x-shovelled-timestamp"] == value
    assert outside_headers(out) == outside_headers(frame)


def test_a_header_replaced_in_place_and_one_appended():
    frame = raw_header(PRICE + RATIO + SHORT, delivery_mode=2)
    edited = ContentHeader(frame)
    assert edited.header("ratio") == 1.5 and edited.header("absent", "d") == "d"
    edited.set_header("ratio", [edited.header("ratio"), "more"])
    edited.set_header("new", 1)
    out = edited.frame(1)
    assert table_bytes(out) == PRICE + entry("ratio", sized(
        b"A", b"f" + struct.pack(">f", 1.5) + sized(b"S", b"more"))) + SHORT + \
        entry("new", b"I" + struct.pack(">i", 1))


def test_properties_are_set_removed_and_the_table_replaced():
    frame = raw_header(PRICE, **EVERY_OTHER)
    edited = ContentHeader(frame)
    edited.set("delivery_mode", 1)
    edited.set("app_id", None)
    edited.set("message_id", "new")
    assert edited.get("message_id") == "new" and edited.get("app_id") is None
    out = edited.frame(1)
    props = decode_properties(out)
    expected = dict(EVERY_OTHER, delivery_mode=1, message_id="new")
    del expected["app_id"]
    assert props.present(headers=False) == expected
    assert table_bytes(out) == PRICE  # untouched
    edited.set("headers", {"only": "this"})
    assert decode_properties(edited.frame(1)).headers == {"only": "this"}
    edited.set("headers", None)
    assert decode_properties(edited.frame(1)).headers is None
    edited.set_header("back", True)
    assert decode_properties(edited.frame(1)).headers == {"back": True}


def test_a_header_added_to_a_message_without_headers_creates_the_table():
    frame = pika_header(body_size=3, **{k: v for k, v in EVERY_OTHER.items()})
    edited = ContentHeader(frame)
    edited.set_header("x-shovelled", [{"shovel-name": "s"}])
    out = edited.frame(1)
    assert struct.unpack_from(">H", out, FLAGS_OFFSET)[0] & FLAG_HEADERS
    assert decode_properties(out).headers == {"x-shovelled": [{"shovel-name": "s"}]}
    assert decode_properties(out).present(headers=False) == EVERY_OTHER


def test_unknown_properties_are_refused():
    with pytest.raises(KeyError):
        ContentHeader(pika_header()).set("priorty", 1)


# -- dead letters -----------------------------------------------------------------------------
REASONS = {"x-rtroute-error": "no binding", "x-rtroute-exchange": "prices"}


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=TABLE_ENTRIES)
def test_a_dead_letter_keeps_every_property_and_entry_byte_for_byte(entries):
    frame = raw_header(entries, 1, 10, **EVERY_OTHER)
    out = dead_letter_header(frame, 5, REASONS)
    assert outside_headers(out) == outside_headers(frame)
    assert struct.unpack_from(">H", out, 1)[0] == 5
    expected = []
    for name, start, end in table_entries(frame, headers_span(frame)):
        encoded = frame[start:end]
        if name in ("CC", "BCC") and encoded[len(name) + 1] != ord("A"):
            new_name = f"x-rtroute-invalid-{name}"  # RabbitMQ would refuse it: renamed
            encoded = bytes((len(new_name),)) + new_name.encode() + encoded[len(name) + 1:]
        expected.append(encoded)
    expected += [entry(name, sized(b"S", value.encode())) for name, value in REASONS.items()]
    assert table_bytes(out) == b"".join(expected)


def test_a_dead_letter_of_values_pika_cannot_read():
    entries = PRICE + RATIO + MS_TIMESTAMP + entry("x-rtroute-error", sized(b"S", b"old"))
    frame = raw_header(entries, 1, 4, **EVERY_OTHER)
    out = dead_letter_header(frame, 9, REASONS)
    assert table_bytes(out) == PRICE + RATIO + MS_TIMESTAMP + \
        entry("x-rtroute-error", sized(b"S", b"no binding")) + \
        entry("x-rtroute-exchange", sized(b"S", b"prices"))
    assert struct.unpack_from(">H", out, 1)[0] == 9


def test_a_cc_that_is_not_an_array_is_renamed_with_its_value_kept():
    frame = raw_header(entry("CC", sized(b"S", b"k")) + PRICE)
    out = dead_letter_header(frame, 1, REASONS)
    assert table_bytes(out).startswith(entry("x-rtroute-invalid-CC", sized(b"S", b"k")) + PRICE)


def test_an_unreadable_header_gets_one_of_its_own_with_the_original_properties():
    frame = raw_header(PRICE, 1, 42, message_id="m")
    broken = frame.replace(b"\x05priced", b"\x05priceU")
    out = dead_letter_header(broken, 3, REASONS)
    props = decode_properties(out)
    assert props.present(headers=False) == {}
    assert props.headers["x-rtroute-error"] == "no binding"
    assert props.headers["x-rtroute-original-properties"] == broken[FLAGS_OFFSET:-1]
    assert struct.unpack_from(">Q", out, 11)[0] == 42


def test_a_dead_letter_that_would_outgrow_the_frame_keeps_only_its_reasons():
    frame = raw_header(entry("big", sized(b"S", b"x" * 1000)), message_id="m")
    out = dead_letter_header(frame, 1, REASONS, frame_max=len(frame) + 10)
    assert decode_properties(out).headers == REASONS
    assert len(out) <= len(frame) + 10


def test_property_names_are_in_flag_order():
    assert PROPERTY_NAMES[0] == "content_type" and PROPERTY_NAMES[2] == "headers"
    assert PROPERTY_NAMES[-1] == "cluster_id" and len(PROPERTY_NAMES) == 14


def test_publish_frames_become_a_dead_letter_with_their_body_frames_untouched():
    from rtroute.amqp import frames
    from rtroute.amqp.content_header import dead_letter_frames

    header = raw_header(PRICE + MS_TIMESTAMP, 4, 6000, message_id="m")
    bodies = [struct.pack(">BHI", 3, 4, n) + b"x" * n + b"\xce" for n in (4000, 2000)]
    publish = frames.publish_frame(4, frames.shortstr("fwd"), frames.shortstr("k"), True)
    dead_method = frames.publish_frame(4, frames.shortstr("rtroute.dead"),
                                       frames.shortstr("k"), True)
    data, count = dead_letter_frames(publish + header + b"".join(bodies), dead_method, REASONS)
    assert count == 4
    assert data.startswith(dead_method) and data.endswith(b"".join(bodies))
    out = data[len(dead_method):len(data) - sum(map(len, bodies))]
    assert out == dead_letter_header(header, 4, REASONS)
    assert table_bytes(out).startswith(PRICE + MS_TIMESTAMP)
