"""A diverted copy carries its original's header entries byte for byte, plus Artemis's
``_AMQ_ORIG_*`` entries, and its publish and dead-letter frames are built without pika."""
from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from pika import frame as pika_frame

from rtroute.amqp import frames
from rtroute.amqp.content_header import (
    decode_properties,
    headers_span,
    table_entries,
    with_headers_table,
)
from rtroute.amqp.field_table import FieldTable, Float32, Timestamp
from rtroute.config.rtroute_toml import DivertConfig
from rtroute.divert import (
    HDR_ORIG_MESSAGE_ID,
    HDR_ORIG_ROUTING_TYPE,
    HDR_ORIGINAL_ADDRESS,
    HDR_ORIGINAL_QUEUE,
    HDR_ROUTING_TYPE,
    HOPS_HEADER,
    Divert,
    Message,
    make_copy,
    publish_fields,
)

from ..amqp.test_field_table import TABLE_ENTRIES, entry, sized
from ..hypothesis_profiles import examples

ADDED = {HOPS_HEADER, HDR_ORIGINAL_QUEUE, HDR_ORIGINAL_ADDRESS, HDR_ORIG_MESSAGE_ID,
         HDR_ORIG_ROUTING_TYPE, HDR_ROUTING_TYPE}
PROPERTIES = {"message_id": "m-1", "expiration": "60000", "delivery_mode": 2,
              "timestamp": 1_700_000_000_123}  # a Node.js client's milliseconds


def divert(routing_type="MULTICAST", **kw):
    return Divert(DivertConfig(name="d", address="prices", forwarding_address="fwd",
                               routing_name="d", routing_type=routing_type, **kw))


def delivered(entries: bytes, body: bytes = b"body") -> Message:
    """The original as the sidecar builds it from a delivery whose headers table holds
    exactly ``entries``."""
    header = pika_frame.Header(1, len(body), _pika_props()).marshal()
    header = with_headers_table(header, 1, headers_span(header), entries)
    return Message.from_amqp("prices", "price.eu", decode_properties(header), body)


def _pika_props():
    import pika

    return pika.BasicProperties(**PROPERTIES)


def header_of(data: bytes) -> bytes:
    """The content header frame in publish frames (method frame first)."""
    method_end = 8 + struct.unpack_from(">I", data, 3)[0]
    return data[method_end:method_end + 8 + struct.unpack_from(">I", data, method_end + 3)[0]]


METHOD = frames.publish_frame(3, frames.shortstr("fwd"), frames.shortstr("price.eu"), True)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=TABLE_ENTRIES)
def test_a_copy_carries_every_original_entry_byte_for_byte(entries):
    original = delivered(entries)
    copy = make_copy(original, divert(), "fwd", "prices", 16)
    assert copy.error is None
    try:
        _, _, headers = publish_fields(copy.message, "exchange", "x-rtroute-bcc")
        data, count = copy.message.publish_frames(3, METHOD, 131072, headers)
    except ValueError:  # a CC or alias that is no array, a NaN: the copy is dead-lettered
        return
    header = header_of(data)
    got = [(n, header[s:e]) for n, s, e in table_entries(header, headers_span(header))]
    dropped = ADDED | {"BCC", "x-rtroute-bcc"}
    frame = _frame_with(entries)
    kept = [frame[s:e] for n, s, e in table_entries(frame, headers_span(frame))
            if n not in dropped]
    assert [e for n, e in got if n not in ADDED and n != "BCC"] == kept  # BCC: the alias
    props = decode_properties(header)
    assert props.headers[HDR_ORIGINAL_QUEUE] == "d" and props.headers[HOPS_HEADER] == 1
    assert props.timestamp == PROPERTIES["timestamp"]
    assert count == 3


def _frame_with(entries: bytes) -> bytes:
    header = pika_frame.Header(1, 0, _pika_props()).marshal()
    return with_headers_table(header, 1, headers_span(header), entries)


PRICE = entry("price", b"d" + struct.pack(">d", 10.7))
RATIO = entry("ratio", b"f" + struct.pack(">f", 1.5))
SENT = entry("sent", b"T" + struct.pack(">Q", 1_700_000_000_123))


def test_a_copy_of_floats_and_millisecond_timestamps():
    original = delivered(PRICE + RATIO + SENT)
    assert original.headers["price"] == 10.7
    assert type(original.headers["ratio"]) is Float32
    assert type(original.headers["sent"]) is Timestamp
    copy = make_copy(original, divert(), "fwd", "prices", 16)
    _, _, headers = publish_fields(copy.message, "exchange", "x-rtroute-bcc")
    data, _ = copy.message.publish_frames(3, METHOD, 131072, headers)
    header = header_of(data)
    start, end = headers_span(header)
    assert header[start + 4:end].startswith(PRICE + RATIO + SENT)


def test_a_transformer_s_plain_dict_and_typed_values_both_encode():
    message = Message(b"x", "k", {"n": 1, "f": 1.5, "l": [Float32(2.5)]},
                      {"message_id": "m"}, "fwd")
    data, _count = message.publish_frames(1, METHOD, 131072)
    props = decode_properties(header_of(data))
    assert props.headers == {"n": 1, "f": 1.5, "l": [2.5]} and props.message_id == "m"


def test_a_body_is_cut_to_the_frame_size():
    message = Message(bytes(range(256)) * 40, "k", FieldTable(), {}, "fwd")
    data, count = message.publish_frames(1, METHOD, 4096)
    assert count == 2 + 3
    assert frames.body_of([b""] + _body_frames(data)) == message.body


def _body_frames(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        end = pos + 8 + struct.unpack_from(">I", data, pos + 3)[0]
        if data[pos] == 3:
            out.append(data[pos:end])
        pos = end
    return out


def test_an_unencodable_value_is_a_value_error_and_the_dead_letter_drops_the_properties():
    message = Message(b"x", "k", {"bad": float("nan")}, {"message_id": "m"}, "fwd")
    try:
        message.publish_frames(1, METHOD, 131072)
    except ValueError as exc:
        assert "541" in str(exc)
    else:
        raise AssertionError("a NaN header was encoded")
    data, _ = message.dead_letter_frames(1, METHOD, {"x-rtroute-error": "why"}, 131072)
    props = decode_properties(header_of(data))
    assert props.headers == {"x-rtroute-error": "why"} and props.message_id is None


def test_a_dead_letter_of_a_copy_keeps_its_headers_and_renames_a_bad_cc():
    message = Message(b"x", "k", FieldTable({"CC": "not-an-array", "price": 10.7}),
                      {"message_id": "m"}, "fwd")
    data, _ = message.dead_letter_frames(1, METHOD, {"x-rtroute-error": "why"}, 131072)
    header = header_of(data)
    start, end = headers_span(header)
    assert header[start + 4:end] == (
        entry("x-rtroute-invalid-CC", sized(b"S", b"not-an-array")) + PRICE
        + entry("x-rtroute-error", sized(b"S", b"why")))
    assert decode_properties(header).message_id == "m"


def _padded(payload: int) -> Message:
    """A message whose content header frame carries exactly ``payload`` bytes."""
    base = len(Message(b"", "k", {"p": ""}, {}, "fwd").publish_frames(1, METHOD, 0)[0])
    return Message(b"", "k", {"p": "x" * (payload - (base - len(METHOD) - 8))}, {}, "fwd")


def test_a_header_frame_of_a_payload_of_frame_max_is_taken_one_byte_more_is_not():
    message = _padded(4096)
    data, _ = message.publish_frames(1, METHOD, 4096)
    assert len(header_of(data)) == 4096 + 8  # RabbitMQ takes it
    try:
        _padded(4097).publish_frames(1, METHOD, 4096)
    except ValueError as exc:
        assert "frame_max (4096)" in str(exc)
    else:
        raise AssertionError("a header of frame_max + 1 payload bytes was taken")
