"""AMQP 0-9-1 field-table entries of plain Python values, in one pass: the native encoder
(``encode_plain_entries`` in rtroute/core/_native.pyx) or its pure-Python twin here.

The publisher encodes each message's own headers (a sequence number, a timestamp: a new
table per message) into its content header frame; the general encoder
(:func:`rtroute.amqp.field_table.encode_entries`) knows every AMQP type and every refusal but
costs several microseconds per table in Python. Most tables hold only ``str`` names and
values of the exact types str, bool, int (64 bits), float, None, bytes, dict, list and tuple:
those the native encoder writes in one C pass. Anything else -- a subclass, a typed value, a
Decimal or datetime, a name or value with no encoding, a NaN or infinity when
``finite_floats``, a table over 64 deep -- answers None, and the general encoder encodes it
(or says why it cannot). Both give the general encoder's bytes wherever they answer
(tests/core/test_plain_table.py: random tables, differential).

:func:`plain_header_frame` builds the publisher's whole content header frame the same way,
when every property set is plain (else None: the general encoder builds it), and
:func:`publish_frames` the publisher's whole frames of a run of publishes (method, content
header with the ``BCC`` or the key as published, body) into one ``bytes``, in one call per
batch.
"""
from __future__ import annotations

import math
import struct
from typing import Any

from rtroute.core import IMPLEMENTATION

__all__ = ["encode_plain_entries", "plain_header_frame", "publish_frames",
           "py_encode_plain_entries", "py_plain_header_frame", "py_publish_frames"]

_DEPTH = 64
_U32 = struct.Struct(">I").pack
_I32 = struct.Struct(">i").pack
_I64 = struct.Struct(">q").pack
_F64 = struct.Struct(">d").pack


class _General(Exception):
    """Not a plain table: the general encoder takes it."""


def _value(value: Any, finite: bool, depth: int) -> bytes:
    cls = type(value)
    if cls is str:
        try:
            raw = value.encode("utf-8")
        except UnicodeEncodeError:
            raise _General from None
        return b"S" + _U32(len(raw)) + raw
    if cls is bool:
        return b"t\x01" if value else b"t\x00"
    if cls is int:
        if -(1 << 31) <= value < 1 << 31:
            return b"I" + _I32(value)
        if -(1 << 63) <= value < 1 << 63:
            return b"l" + _I64(value)
        raise _General
    if cls is float:
        if finite and not math.isfinite(value):
            raise _General
        return b"d" + _F64(value)
    if value is None:
        return b"V"
    if cls is bytes:
        return b"x" + _U32(len(value)) + value
    if cls is dict or cls is list or cls is tuple:
        if depth >= _DEPTH:
            raise _General
        inside = _entries(value, finite, depth + 1) if cls is dict else \
            b"".join(_value(item, finite, depth + 1) for item in value)
        return (b"F" if cls is dict else b"A") + _U32(len(inside)) + inside
    raise _General


def _entries(table: dict, finite: bool, depth: int) -> bytes:
    parts = []
    for name, value in table.items():
        parts.append(_short(name) + _value(value, finite, depth))
    return b"".join(parts)


def py_encode_plain_entries(table: Any, finite_floats: bool = False) -> bytes | None:
    """The encoded entries of a plain ``table`` (without the table's size), or None (see the
    module docstring)."""
    if type(table) is not dict:
        return None
    try:
        return _entries(table, finite_floats, 0)
    except _General:
        return None


# the basic properties in flag order (bit 15 first): 0 a short string, 1 an octet, 2 a
# timestamp, 3 the headers table
_PROPERTY_KINDS = (
    ("content_type", 0), ("content_encoding", 0), ("headers", 3), ("delivery_mode", 1),
    ("priority", 1), ("correlation_id", 0), ("reply_to", 0), ("expiration", 0),
    ("message_id", 0), ("timestamp", 2), ("type", 0), ("user_id", 0), ("app_id", 0),
    ("cluster_id", 0))
_FRAME_HEAD = struct.Struct(">BHIHHQH")  # type, channel, size; class, weight, body, flags


def _property(value: Any, kind: int) -> bytes:
    cls = type(value)
    if kind == 0:
        if cls is str:
            try:
                value = value.encode("utf-8")
            except UnicodeEncodeError:
                raise _General from None
        elif cls is not bytes:
            raise _General
        if len(value) > 255:
            raise _General
        return bytes((len(value),)) + value
    if kind == 3:
        if cls is not dict:
            raise _General
        entries = _entries(value, True, 0)
        return _U32(len(entries)) + entries
    if cls is not int or not 0 <= value <= (255 if kind == 1 else (1 << 64) - 1):
        raise _General
    return bytes((value,)) if kind == 1 else struct.pack(">Q", value)


def py_plain_header_frame(channel: int, body_size: int, properties: Any,
                          headers: dict | None) -> bytes | None:
    """The content header frame of a ``body_size``-byte body on ``channel`` with the
    properties of ``properties`` (an object with pika's attribute names, or None) and
    ``headers`` instead of its own (None: no table), when every property set is plain (a
    short string as str or bytes, an octet or timestamp as an int in range, the headers a
    plain table, floats finite); else None (the general encoder,
    :func:`rtroute.amqp.content_header.content_header_frame_with`, builds it)."""
    flags = 0
    parts = []
    try:
        for bit, (name, kind) in zip(range(15, 1, -1), _PROPERTY_KINDS):
            value = headers if kind == 3 else \
                (None if properties is None else getattr(properties, name, None))
            if value is not None:
                parts.append(_property(value, kind))
                flags |= 1 << bit
    except _General:
        return None
    properties_bytes = b"".join(parts)
    return _FRAME_HEAD.pack(2, channel, 14 + len(properties_bytes), 60, 0, body_size,
                            flags) + properties_bytes + b"\xce"


_PUBLISH_HEAD = struct.Struct(">BHIIH")  # type, channel, size; basic.publish, ticket
_BODY_HEAD = struct.Struct(">BHI")


def _short(text: Any) -> bytes:
    if type(text) is not str:
        raise _General
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        raise _General from None
    if len(raw) > 255:
        raise _General
    return bytes((len(raw),)) + raw


def _publish(channel: int, part: Any, headers: Any, properties: Any, body: Any,
             frame_max: int, key_header: str | None) -> tuple[bytes, int]:
    if type(body) is not bytes or (headers is not None and type(headers) is not dict):
        raise _General
    fields = _short(part.exchange) + _short(part.routing_key) + b"\x00"
    method = _PUBLISH_HEAD.pack(1, channel, 6 + len(fields), 0x3C0028, 0) + fields + b"\xce"
    if part.bcc:
        extra: tuple[str, Any] | None = ("BCC", part.bcc)
    elif key_header is not None and part.published_key is not None:
        extra = (key_header, part.published_key)
    else:
        extra = None
    table = headers or None
    if extra is not None:
        if headers is not None and extra[0] in headers:
            raise _General  # the entry replaces one in place: the general path
        table = {**(headers or {}), extra[0]: extra[1]}
    header = py_plain_header_frame(channel, len(body), properties, table)
    if header is None or len(header) - 8 > frame_max:
        raise _General
    chunk = frame_max - 8
    pieces = [_BODY_HEAD.pack(3, channel, len(piece)) + piece + b"\xce"
              for piece in (body[at:at + chunk] for at in range(0, len(body), chunk))]
    return method + header + b"".join(pieces), 2 + len(pieces)


def py_publish_frames(channel: int, publishes: list, start: int, frame_max: int,
                      key_header: str | None) -> tuple[bytes, int, int]:
    """The frames of ``publishes[start:]``, each ``(part, headers, properties, body)`` (a
    :class:`~rtroute.routing.delivery_plan.Publish`, the message's headers as a dict or None,
    its ``pika.BasicProperties`` or None, its body as bytes), as the publisher writes them,
    in one ``bytes``: a non-mandatory ``basic.publish`` of ``part.exchange`` with
    ``part.routing_key``; the content header frame of the properties with ``headers`` for a
    table (none when empty), ``BCC`` (``part.bcc``) or ``key_header`` (``part.published_key``;
    None: no such header) after its entries; the body in frames of at most ``frame_max - 8``
    bytes (``frame_max`` at least 4,096, else nothing is written).

    Stops before the first publish it cannot write (a property or header that is not plain,
    see :func:`py_plain_header_frame`; a name over 255 bytes; a header frame over
    ``frame_max``; the added entry's name already in the headers): the general encoder takes
    that one. Returns ``(frames, frame_count, end)``: ``publishes[start:end]`` were written.
    """
    if frame_max < 4096:
        return b"", 0, start
    parts, count, index = [], 0, start
    for index in range(start, len(publishes)):
        part, headers, properties, body = publishes[index]
        try:
            data, frames = _publish(channel, part, headers, properties, body, frame_max,
                                    key_header)
        except _General:
            break
        parts.append(data)
        count += frames
    else:
        index = len(publishes)
    return b"".join(parts), count, index


if IMPLEMENTATION == "native":
    from rtroute.core._native import encode_plain_entries, plain_header_frame, publish_frames
else:
    encode_plain_entries = py_encode_plain_entries
    plain_header_frame = py_plain_header_frame
    publish_frames = py_publish_frames
