"""AMQP 1.0 messages as a stream stores them: the sections of one encoded message, decoded.

A RabbitMQ stream keeps every message in AMQP 1.0 encoding, whatever protocol published it (an
AMQP 0-9-1 publish is converted on the way in; docs/rabbitmq-versions.md says what each version
keeps). A message is a sequence of sections, each a described value: header (a list), delivery
and message annotations (maps), properties (a list), application properties (a map), the body
(data sections of bytes, an amqp-sequence or an amqp-value) and a footer (a map).

:func:`decode_message` gives them as Python values: strings and symbols as ``str``, binaries
as ``bytes``, described values as their value, lists and arrays as ``list``, maps as ``dict``,
decimals and uuids as ``bytes``; numbers keep their width as the field types of
:mod:`rtroute.amqp.field_table` that RabbitMQ converts them to for an AMQP 0-9-1 consumer
(``byte`` :class:`Int8`, ``ubyte`` :class:`UInt8`, ``short`` :class:`Int16`, ``ushort``
:class:`UInt16`, ``uint`` :class:`UInt32`, ``int`` a plain ``int``, ``long`` and ``ulong``
:class:`Int64`, ``float`` :class:`Float32`, ``double`` a ``float``), and a ``timestamp`` is
:class:`Timestamp` in milliseconds since the epoch. Pure functions, no I/O.
"""
from __future__ import annotations

import struct
from typing import Any

from rtroute.amqp.field_table import Float32, Int8, Int16, Int64, Timestamp, UInt8, UInt16, UInt32

__all__ = ["AMQP10DecodeError", "Message", "decode_message"]

_HEADER, _DELIVERY_ANNOTATIONS, _MESSAGE_ANNOTATIONS = 0x70, 0x71, 0x72
_PROPERTIES, _APPLICATION_PROPERTIES = 0x73, 0x74
_DATA, _SEQUENCE, _VALUE, _FOOTER = 0x75, 0x76, 0x77, 0x78
_SECTION_NAMES = {"amqp:header:list": _HEADER, "amqp:delivery-annotations:map":
                  _DELIVERY_ANNOTATIONS, "amqp:message-annotations:map": _MESSAGE_ANNOTATIONS,
                  "amqp:properties:list": _PROPERTIES,
                  "amqp:application-properties:map": _APPLICATION_PROPERTIES,
                  "amqp:data:binary": _DATA, "amqp:amqp-sequence:list": _SEQUENCE,
                  "amqp:amqp-value:*": _VALUE, "amqp:footer:map": _FOOTER}

_u8 = struct.Struct(">B").unpack_from
_u16 = struct.Struct(">H").unpack_from
_u32 = struct.Struct(">I").unpack_from
_u64 = struct.Struct(">Q").unpack_from
_i8 = struct.Struct(">b").unpack_from
_i16 = struct.Struct(">h").unpack_from
_i32 = struct.Struct(">i").unpack_from
_i64 = struct.Struct(">q").unpack_from
_f32 = struct.Struct(">f").unpack_from
_f64 = struct.Struct(">d").unpack_from


class AMQP10DecodeError(ValueError):
    """The bytes are not an AMQP 1.0 message (a truncated or unknown encoding)."""


class Message:
    """The sections of one AMQP 1.0 message (``None`` where a section is absent).

    Attributes:
        header: the header list (durable, priority, ttl, first-acquirer, delivery-count).
        message_annotations: the message annotations map.
        properties: the properties list (message-id, user-id, to, subject, reply-to,
            correlation-id, content-type, content-encoding, absolute-expiry-time,
            creation-time, group-id, group-sequence, reply-to-group-id).
        application_properties: the application properties map.
        body: the data sections' bytes joined (``b""`` when the body is not data sections).
        body_value: an amqp-value or amqp-sequence body (``None`` for data sections).
    """

    __slots__ = (
        "application_properties",
        "body",
        "body_value",
        "header",
        "message_annotations",
        "properties",
    )

    def __init__(self) -> None:
        self.header: list | None = None
        self.message_annotations: dict | None = None
        self.properties: list | None = None
        self.application_properties: dict | None = None
        self.body = b""
        self.body_value: Any = None


def _fixed(size: int, unpack: Any, kind: Any = None) -> Any:
    if kind is None:
        def read(data: Any, at: int) -> tuple[Any, int]:
            return unpack(data, at)[0], at + size
    else:
        def read(data: Any, at: int) -> tuple[Any, int]:
            return kind(unpack(data, at)[0]), at + size
    return read


def _variable(width: int, text: bool) -> Any:
    length = _u8 if width == 1 else _u32

    def read(data: Any, at: int) -> tuple[Any, int]:
        (n,) = length(data, at)
        at += width
        if text:
            return str(data[at:at + n], "utf-8", "replace"), at + n
        return bytes(data[at:at + n]), at + n
    return read


def _compound(width: int, is_map: bool) -> Any:
    length = _u8 if width == 1 else _u32

    def read(data: Any, at: int) -> tuple[Any, int]:
        (count,) = length(data, at + width)
        at += 2 * width
        items = []
        append = items.append
        for _ in range(count):
            code = data[at]
            if code == 0xA1 or code == 0xA3:  # str8, sym8: most names and values
                n = data[at + 1]
                append(str(data[at + 2:at + 2 + n], "utf-8", "replace"))
                at += 2 + n
            elif code == 0x40:
                append(None)
                at += 1
            else:
                value, at = _READERS[code](data, at + 1)
                append(value)
        if is_map:
            return dict(zip(items[::2], items[1::2])), at
        return items, at
    return read


def _array(width: int) -> Any:
    length = _u8 if width == 1 else _u32

    def read(data: Any, at: int) -> tuple[Any, int]:
        (size,) = length(data, at)
        (count,) = length(data, at + width)
        end = at + width + size
        at += 2 * width
        constructor = data[at]
        if constructor == 0:  # a described element type: the values are what is read
            _, at = _decode(data, at + 1)
            constructor = data[at]
        at += 1
        read_one = _READERS.get(constructor)
        if read_one is None:
            raise AMQP10DecodeError(f"unknown constructor 0x{constructor:02x} in an array")
        items = []
        for _ in range(count):
            value, at = read_one(data, at)
            items.append(value)
        return items, end
    return read


def _constant(value: Any) -> Any:
    def read(_data: Any, at: int) -> tuple[Any, int]:
        return value, at
    return read


def _described(data: Any, at: int) -> tuple[Any, int]:
    _, at = _decode(data, at)
    return _decode(data, at)


_READERS: dict[int, Any] = {
    0x00: _described,
    0x40: _constant(None), 0x41: _constant(True), 0x42: _constant(False),
    0x43: _constant(UInt32(0)), 0x44: _constant(Int64(0)), 0x45: _constant([]),
    0x56: lambda d, a: (d[a] != 0, a + 1),
    0x50: _fixed(1, _u8, UInt8), 0x51: _fixed(1, _i8, Int8), 0x52: _fixed(1, _u8, UInt32),
    0x53: _fixed(1, _u8, Int64), 0x54: _fixed(1, _i8), 0x55: _fixed(1, _i8, Int64),
    0x60: _fixed(2, _u16, UInt16), 0x61: _fixed(2, _i16, Int16),
    0x70: _fixed(4, _u32, UInt32), 0x71: _fixed(4, _i32), 0x72: _fixed(4, _f32, Float32),
    0x73: _fixed(4, _u32),
    0x74: lambda d, a: (bytes(d[a:a + 4]), a + 4),
    0x80: _fixed(8, _u64, Int64), 0x81: _fixed(8, _i64, Int64), 0x82: _fixed(8, _f64),
    0x83: _fixed(8, _i64, Timestamp),
    0x84: lambda d, a: (bytes(d[a:a + 8]), a + 8),
    0x94: lambda d, a: (bytes(d[a:a + 16]), a + 16),
    0x98: lambda d, a: (bytes(d[a:a + 16]), a + 16),
    0xA0: _variable(1, False), 0xB0: _variable(4, False),
    0xA1: _variable(1, True), 0xB1: _variable(4, True),
    0xA3: _variable(1, True), 0xB3: _variable(4, True),
    0xC0: _compound(1, False), 0xD0: _compound(4, False),
    0xC1: _compound(1, True), 0xD1: _compound(4, True),
    0xE0: _array(1), 0xF0: _array(4),
}


def _decode(data: Any, at: int) -> tuple[Any, int]:
    try:
        read = _READERS[data[at]]
    except KeyError:
        raise AMQP10DecodeError(f"unknown constructor 0x{data[at]:02x} at byte {at}") from None
    return read(data, at + 1)


def _section_code(data: Any, at: int) -> tuple[int, int]:
    """The section's descriptor as its code (0x70-0x78) and where its value starts."""
    if data[at] != 0:
        raise AMQP10DecodeError(f"byte {at}: not a described section")
    if data[at + 1] == 0x53:
        return data[at + 2], at + 3
    descriptor, at = _decode(data, at + 1)
    if isinstance(descriptor, str):
        descriptor = _SECTION_NAMES.get(descriptor, -1)
    return descriptor, at


def decode_message(data: Any) -> Message:
    """The sections of one encoded AMQP 1.0 message (bytes or a memoryview).

    Raises:
        AMQP10DecodeError: not a well-formed message.
    """
    message = Message()
    at, end = 0, len(data)
    body = []
    try:
        while at < end:
            code, at = _section_code(data, at)
            if code == _DATA:
                raw, at = _decode(data, at)
                body.append(raw)
                continue
            value, at = _decode(data, at)
            if code == _APPLICATION_PROPERTIES:
                message.application_properties = value
            elif code == _MESSAGE_ANNOTATIONS:
                message.message_annotations = value
            elif code == _PROPERTIES:
                message.properties = value
            elif code == _HEADER:
                message.header = value
            elif code in (_VALUE, _SEQUENCE):
                message.body_value = value
    except (IndexError, struct.error) as exc:
        raise AMQP10DecodeError(f"truncated message: {exc}") from None
    if at > end:  # a slice past the end is short, not an error: the lengths say so
        raise AMQP10DecodeError(f"truncated message: {end} bytes, the encoding needs {at}")
    message.body = body[0] if len(body) == 1 else b"".join(body)
    return message
