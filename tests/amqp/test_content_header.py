"""The headers table of a content header frame, read and edited as bytes, checked against pika
(for the values pika round-trips)."""
from __future__ import annotations

import struct

import pika.spec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pika import data as pika_data
from pika import frame as pika_frame

from rtroute.amqp.content_header import (
    bcc_entry,
    decode_headers,
    headers_span,
    table_entries,
    with_headers_table,
    without_entries,
)
from rtroute.amqp.frames import decode_properties

from ..hypothesis_profiles import examples

FLAGS_AT = 19
FLAG_HEADERS = 1 << 13
OTHER_PROPERTIES = ("content_type", "content_encoding", "delivery_mode", "priority",
                    "correlation_id", "reply_to", "expiration", "message_id", "timestamp",
                    "type", "user_id", "app_id", "cluster_id")
EVERY_OTHER = {
    "content_type": "application/json",
    "content_encoding": "gzip",
    "delivery_mode": 2,
    "priority": 7,
    "correlation_id": "corr-1",
    "reply_to": "amq.rabbitmq.reply-to",
    "expiration": "60000",
    "message_id": "m-ü-1",
    "timestamp": 1_700_000_000,
    "type": "order.created",
    "user_id": "guest",
    "app_id": "rtroute-test",
    "cluster_id": "c1",
}


def header(channel=1, body_size=0, **properties):
    return pika_frame.Header(channel, body_size, pika.spec.BasicProperties(**properties)).marshal()


def others(frame):
    properties = decode_properties(frame)
    return {name: getattr(properties, name) for name in OTHER_PROPERTIES}


def encoded_table(headers):
    pieces = []
    pika_data.encode_table(pieces, headers)
    return b"".join(pieces)


def entry(name, kind, value):
    """A hand-encoded table entry; ``name`` as bytes so that it need not be UTF-8."""
    return bytes((len(name),)) + name + kind + value


def raw_header(content, channel=1, body_size=0, **properties):
    """A content header frame whose headers table holds exactly the encoded ``content``."""
    base = header(channel, body_size, headers={}, **properties)
    at = FLAGS_AT + 2 + sum(1 + len(properties[name].encode())
                            for name in ("content_type", "content_encoding") if name in properties)
    assert base[at:at + 4] == b"\x00\x00\x00\x00"
    payload = base[7:at] + struct.pack(">I", len(content)) + content + base[at + 4:-1]
    return b"\x02" + struct.pack(">HI", channel, len(payload)) + payload + b"\xce"


def table_content(frame):
    start, end = headers_span(frame)
    assert start != end
    return frame[start + 4:end]


# Entries pika cannot round-trip: it decodes f, d (and s) to an int and re-encodes as l.
FLOAT = entry(b"ratio", b"f", struct.pack(">f", 1.5))
DOUBLE = entry(b"pi", b"d", struct.pack(">d", 3.14159))
SHORT = entry(b"small", b"s", struct.pack(">h", -2))
ALIAS = entry(b"x-rtroute-bcc", b"S", struct.pack(">I", 5) + b"k.one")
TEXT = entry(b"trace", b"S", struct.pack(">I", 3) + b"abc")


def test_a_frame_without_properties_has_an_empty_span_right_after_the_flags():
    frame = header()
    assert headers_span(frame) == (21, 21)
    assert decode_headers(frame, headers_span(frame)) is None
    assert table_entries(frame, headers_span(frame)) == []


def test_the_span_starts_after_content_type_and_content_encoding():
    headers = {"a": "b", "n": 5}
    frame = header(content_type="text/plain", content_encoding="gzip", headers=headers,
                   delivery_mode=2)
    start, end = headers_span(frame)
    assert start == 21 + 1 + len("text/plain") + 1 + len("gzip")
    assert frame[start:end] == encoded_table(headers)
    assert frame[end] == 2  # delivery_mode follows the table


@pytest.mark.parametrize("properties, expected", [
    ({"delivery_mode": 1}, 21),
    ({"content_type": "text/plain", "message_id": "m"}, 21 + 11),
    ({"content_encoding": "br", "priority": 3}, 21 + 3),
    ({"content_type": "a", "content_encoding": "bc", "app_id": "x"}, 21 + 2 + 3),
])
def test_without_headers_the_span_is_empty_where_the_table_would_go(properties, expected):
    frame = header(**properties)
    assert headers_span(frame) == (expected, expected)


def test_an_empty_table_spans_its_four_size_bytes():
    frame = header(headers={}, content_type="text/plain")
    start, end = headers_span(frame)
    assert end - start == 4
    assert frame[start:end] == b"\x00\x00\x00\x00"
    assert decode_headers(frame, (start, end)) == {}
    assert table_entries(frame, (start, end)) == []


def test_a_continued_flag_word_is_refused():
    frame = bytearray(header(headers={"a": 1}))
    frame[FLAGS_AT + 1] |= 1
    with pytest.raises(ValueError, match="continued"):
        headers_span(bytes(frame))


def test_a_frame_cut_anywhere_from_the_flags_to_the_end_of_its_table_is_refused():
    frame = header(content_type="text/plain", content_encoding="gzip",
                   headers={"a": "b", "list": [1, "x"]}, message_id="m")
    _, end = headers_span(frame)
    for cut in range(FLAGS_AT + 2, end + 1):  # end + 1 - 1: the table ends the frame, no 0xCE
        with pytest.raises(ValueError):
            headers_span(frame[:cut])


def test_a_table_claiming_more_bytes_than_the_frame_holds_is_refused():
    frame = bytearray(header(headers={"a": "b"}, message_id="m"))
    struct.pack_into(">I", frame, 21, 1000)
    with pytest.raises(ValueError, match="headers table"):
        headers_span(bytes(frame))


def test_a_frame_cut_before_its_flag_word_is_refused():
    with pytest.raises(ValueError):
        headers_span(header(headers={"a": "b"})[:20])


def test_a_frame_cut_inside_content_type_without_headers_is_refused():
    frame = header(content_type="text/plain")
    with pytest.raises(ValueError):
        headers_span(frame[:25])  # 3 of the 10 bytes of content_type


@pytest.mark.parametrize("properties", [{}, {"content_type": "text/plain", "priority": 1}])
def test_decode_headers_is_none_without_headers(properties):
    frame = header(**properties)
    assert decode_headers(frame, headers_span(frame)) is None


@pytest.mark.parametrize("headers", [
    {},
    {"a": "b"},
    {"BCC": ["k1", "k2"], "x-rtroute-bcc": ["k3"], "n": -5, "big": 2**40, "flag": True},
    {"nested": {"inner": {"deep": [1, "two", False]}}, "ü": "ünïcode", "none": None},
])
def test_decode_headers_gives_what_pika_decodes(headers):
    frame = header(content_type="text/plain", content_encoding="utf-8", headers=headers,
                   message_id="m")
    decoded = decode_headers(frame, headers_span(frame))
    assert decoded == decode_properties(frame).headers == headers


def test_table_entries_name_each_entry_with_its_exact_extent():
    headers = {"a": "x", "BCC": ["k"], "nested": {"n": 1}, "ü-key": True}
    frame = header(content_type="text/plain", headers=headers, reply_to="r")
    span = headers_span(frame)
    entries = table_entries(frame, span)
    assert [name for name, _, _ in entries] == list(headers)
    assert entries[0][1] == span[0] + 4
    assert entries[-1][2] == span[1]
    for (_, _, end), (_, start, _) in zip(entries, entries[1:]):
        assert end == start
    assert b"".join(frame[s:e] for _, s, e in entries) == frame[span[0] + 4:span[1]]
    for name, s, e in entries:
        assert frame[s:e] == encoded_table({name: headers[name]})[4:]


def test_table_entries_walk_value_types_pika_cannot_encode():
    content = FLOAT + DOUBLE + SHORT + TEXT
    frame = raw_header(content, content_encoding="gzip")
    span = headers_span(frame)
    entries = table_entries(frame, span)
    assert [name for name, _, _ in entries] == ["ratio", "pi", "small", "trace"]
    assert [frame[s:e] for _, s, e in entries] == [FLOAT, DOUBLE, SHORT, TEXT]
    decoded = decode_headers(frame, span)
    assert decoded == {"ratio": 1.5, "pi": 3.14159, "small": -2, "trace": "abc"}
    assert [type(v).__name__ for v in decoded.values()] == ["Float32", "float", "Int16", "str"]


def test_a_name_that_is_not_utf8_comes_back_as_bytes():
    odd = entry(b"\xff\xfe", b"t", b"\x01")
    frame = raw_header(odd + TEXT)
    assert [name for name, _, _ in table_entries(frame, headers_span(frame))] == [
        b"\xff\xfe", "trace"]


def test_without_entries_drops_the_named_entries_and_keeps_the_others_in_order():
    headers = {"first": "1", "BCC": ["a"], "middle": {"x": [1, 2]},
               "x-rtroute-bcc": ["b", "c"], "last": False}
    frame = header(content_type="text/plain", headers=headers, priority=4)
    kept = without_entries(frame, headers_span(frame), {"BCC", "x-rtroute-bcc"})
    assert kept == encoded_table({"first": "1", "middle": {"x": [1, 2]}, "last": False})[4:]


def test_without_entries_keeps_other_entries_byte_for_byte():
    frame = raw_header(FLOAT + ALIAS + DOUBLE + entry(b"BCC", b"A", b"\x00" * 4) + SHORT)
    kept = without_entries(frame, headers_span(frame), ("BCC", "x-rtroute-bcc"))
    assert kept == FLOAT + DOUBLE + SHORT


def test_without_entries_drops_every_entry_of_a_repeated_name():
    frame = raw_header(ALIAS + TEXT + ALIAS)
    assert without_entries(frame, headers_span(frame), ["x-rtroute-bcc"]) == TEXT


def test_without_entries_returns_the_table_content_unchanged_when_nothing_matches():
    frame = raw_header(FLOAT + TEXT + SHORT, content_type="text/plain")
    span = headers_span(frame)
    assert without_entries(frame, span, {"BCC", "x-rtroute-bcc"}) == frame[span[0] + 4:span[1]]
    assert without_entries(frame, span, ()) == FLOAT + TEXT + SHORT


def test_without_entries_of_every_entry_is_empty():
    frame = raw_header(ALIAS + entry(b"BCC", b"V", b""))
    assert without_entries(frame, headers_span(frame), {"BCC", "x-rtroute-bcc"}) == b""


@pytest.mark.parametrize("properties", [{}, {"message_id": "m"}, {"headers": {}}])
def test_without_entries_is_empty_without_a_table(properties):
    frame = header(**properties)
    assert without_entries(frame, headers_span(frame), {"BCC"}) == b""


def test_bcc_entry_layout():
    assert bcc_entry(["ab"]) == b"\x03BCCA\x00\x00\x00\x07S\x00\x00\x00\x02ab"
    assert bcc_entry([]) == b"\x03BCCA\x00\x00\x00\x00"


@pytest.mark.parametrize("keys", [
    [],
    ["route.one"],
    ["a", "b", "a"],
    ["clé", "日本.キー", "emoji-🐇", ""],
])
def test_a_table_made_of_bcc_entry_decodes_to_the_keys(keys):
    entry_bytes = bcc_entry(keys)
    table = struct.pack(">I", len(entry_bytes)) + entry_bytes
    assert pika_data.decode_table(table, 0) == ({"BCC": keys}, len(table))


def test_the_frame_moves_to_another_channel_with_its_body_size():
    frame = header(channel=1, body_size=12345, headers={"a": "b"}, message_id="m")
    out = with_headers_table(frame, 7, headers_span(frame), b"")
    consumed, decoded = pika_frame.decode_frame(out)
    assert consumed == len(out)
    assert isinstance(decoded, pika_frame.Header)
    assert decoded.channel_number == 7
    assert decoded.body_size == 12345


@pytest.mark.parametrize("body_size", [0, 1, 2**31, 2**64 - 1])
@pytest.mark.parametrize("entries", [b"", bcc_entry(["k"] * 50), FLOAT + DOUBLE])
def test_the_size_field_matches_the_new_payload(body_size, entries):
    frame = header(body_size=body_size, headers={"drop": "x" * 300}, **EVERY_OTHER)
    out = with_headers_table(frame, 3, headers_span(frame), entries)
    assert struct.unpack_from(">I", out, 3)[0] == len(out) - 8
    assert out[-1:] == b"\xce"
    following = pika_frame.Body(3, b"body").marshal()
    consumed, decoded = pika_frame.decode_frame(out + following)
    assert consumed == len(out)
    assert decoded.body_size == body_size
    assert table_content(out) == entries


@pytest.mark.parametrize("headers", [None, {}, {"BCC": ["old"], "keep": 1}])
def test_every_other_property_is_kept(headers):
    frame = header(body_size=9, headers=headers, **EVERY_OTHER)
    span = headers_span(frame)
    out = with_headers_table(frame, 2, span, without_entries(frame, span, {"BCC"})
                             + bcc_entry(["new"]))
    assert others(out) == EVERY_OTHER
    assert decode_properties(out).headers == {**(headers or {}), "BCC": ["new"]}
    assert pika_frame.decode_frame(out)[1].body_size == 9


def test_other_properties_are_kept_byte_for_byte():
    frame = header(headers={"a": "b"}, **EVERY_OTHER)
    start, end = headers_span(frame)
    out = with_headers_table(frame, 1, (start, end), FLOAT)
    new_start, new_end = headers_span(out)
    assert new_start == start
    assert out[7:start] == frame[7:start]
    assert out[new_end:] == frame[end:]


def test_rewriting_the_same_entries_on_the_same_channel_gives_the_same_frame():
    frame = raw_header(FLOAT + SHORT + TEXT, channel=5, body_size=77, **EVERY_OTHER)
    span = headers_span(frame)
    assert with_headers_table(frame, 5, span, frame[span[0] + 4:span[1]]) == frame


@pytest.mark.parametrize("properties", [{}, EVERY_OTHER,
                                        {"content_type": "text/plain", "user_id": "u"}])
def test_adding_bcc_to_a_message_without_headers_sets_the_headers_flag(properties):
    frame = header(body_size=4, **properties)
    assert not struct.unpack_from(">H", frame, FLAGS_AT)[0] & FLAG_HEADERS
    span = headers_span(frame)
    out = with_headers_table(frame, 1, span, without_entries(frame, span, {"BCC"})
                             + bcc_entry(["k.1", "k.2"]))
    assert struct.unpack_from(">H", out, FLAGS_AT)[0] & FLAG_HEADERS
    assert decode_properties(out).headers == {"BCC": ["k.1", "k.2"]}
    assert others(out) == others(frame)
    assert out == header(body_size=4, headers={"BCC": ["k.1", "k.2"]}, **properties)


@pytest.mark.parametrize("headers", [None, {}, {"BCC": ["k"]}])
def test_empty_entries_leave_an_empty_table(headers):
    frame = header(headers=headers, **EVERY_OTHER)
    out = with_headers_table(frame, 1, headers_span(frame), b"")
    assert decode_properties(out).headers == {}
    assert others(out) == EVERY_OTHER
    assert out == header(headers={}, **EVERY_OTHER)


def test_values_pika_cannot_round_trip_survive_dropping_and_adding_entries():
    frame = raw_header(FLOAT + ALIAS + DOUBLE + SHORT + TEXT, channel=1, body_size=3,
                       **EVERY_OTHER)
    span = headers_span(frame)
    entries = without_entries(frame, span, {"BCC", "x-rtroute-bcc"}) + bcc_entry(["k.one"])
    out = with_headers_table(frame, 9, span, entries)
    assert table_content(out) == FLOAT + DOUBLE + SHORT + TEXT + bcc_entry(["k.one"])
    assert decode_properties(out).headers == {
        "ratio": 1, "pi": 3, "small": -2, "trace": "abc", "BCC": ["k.one"]}
    assert others(out) == EVERY_OTHER
    assert pika_frame.decode_frame(out)[0] == len(out)


# -- property test against pika's own decode and encode --------------------------------------

short_text = st.text(max_size=12)
header_values = st.recursive(
    st.text(max_size=10) | st.integers(-2**63, 2**63 - 1) | st.booleans()
    | st.lists(st.text(max_size=8), max_size=4),
    lambda children: st.dictionaries(short_text, children, max_size=3),
    max_leaves=8,
)
basic_properties = st.fixed_dictionaries({}, optional={
    **{name: st.text(max_size=20) for name in (
        "content_type", "content_encoding", "correlation_id", "reply_to", "expiration",
        "message_id", "type", "user_id", "app_id", "cluster_id")},
    "headers": st.none() | st.dictionaries(short_text, header_values, max_size=6),
    "delivery_mode": st.integers(0, 255),
    "priority": st.integers(0, 255),
    "timestamp": st.integers(0, 2**64 - 1),
})


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(properties=basic_properties, channel=st.integers(0, 65535),
       body_size=st.integers(0, 2**64 - 1), data=st.data())
def test_dropping_and_adding_bcc_matches_the_same_edit_done_by_pika(properties, channel,
                                                                     body_size, data):
    frame = header(1, body_size, **properties)
    original = decode_properties(frame).headers
    candidates = sorted({*(original or {}), "BCC", "x-rtroute-bcc", "absent"})
    drop = data.draw(st.frozensets(st.sampled_from(candidates)), label="drop")
    keys = data.draw(st.none() | st.lists(st.text(max_size=10), max_size=4), label="keys")

    span = headers_span(frame)
    assert decode_headers(frame, span) == original
    entries = without_entries(frame, span, drop)
    if keys is not None:
        entries += bcc_entry(keys)
    out = with_headers_table(frame, channel, span, entries)

    expected = {name: value for name, value in (original or {}).items() if name not in drop}
    if keys is not None:
        expected["BCC"] = keys
    consumed, decoded = pika_frame.decode_frame(out)
    assert consumed == len(out)
    assert decoded.channel_number == channel
    assert decoded.body_size == body_size
    assert decoded.properties.headers == expected
    assert others(out) == others(frame)
    if "BCC" in drop or "BCC" not in (original or {}) or keys is None:
        # No repeated BCC entry: the very bytes pika writes for the edited dict.
        edited = {**{name: getattr(decode_properties(frame), name) for name in OTHER_PROPERTIES},
                  "headers": expected}
        assert out == header(channel, body_size, **edited)
