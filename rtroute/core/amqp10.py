"""A stream chunk's AMQP 1.0 messages in their common shape, read without decoding the rest:
the native reader (``src_c/amqp10.c``) or its pure-Python twin.

The stream reader (:mod:`rtroute.spark.stream_protocol_reader`) turns every message of a chunk
into a row. Most messages a stream holds have one shape (an AMQP 0-9-1 publish as RabbitMQ
stores it: a header, message annotations holding only ``x-routing-key`` and ``x-exchange``,
one data section); for those :func:`scan_chunk` gives the fields a row needs with no per-message
Python, and marks every other message (properties, application properties, other annotations,
other body sections or encodings, anything malformed) as general: the reader decodes those
with :func:`rtroute.amqp.amqp10_message.decode_message`, which knows every rule. The exact
shape is written in ``src_c/amqp10.h``.

The twin (:func:`py_scan_chunk`) gives the same answers; it is used with the pure-Python core
and is the oracle of the differential tests (tests/core/test_amqp10_scan.py), beside the full
decoder.
"""
from __future__ import annotations

import struct
from typing import Any

from rtroute.core import IMPLEMENTATION

__all__ = ["CHUNK_COMPRESSED", "CHUNK_TRUNCATED", "py_scan_chunk", "scan_chunk"]

CHUNK_COMPRESSED, CHUNK_TRUNCATED = -1, -2
_U32 = struct.Struct(">I").unpack_from
_ABSENT = -1
_STRINGS = (0xA1, 0xA3)
_STRINGS32 = (0xB1, 0xB3)


class _General(Exception):
    """Not the common shape: the full decoder reads this message."""


def _compound(d: Any, at: int, code8: int, code32: int, empty: bool) -> tuple[int, int]:
    code = d[at]
    if code == code8:
        return d[at + 2], at + 3
    if code == code32:
        return _U32(d, at + 5)[0], at + 9
    if empty and code == 0x45:
        return 0, at + 1
    raise _General


def _text(d: Any, at: int) -> tuple[str, int]:
    code = d[at]
    if code in _STRINGS:
        n, at = d[at + 1], at + 2
    elif code in _STRINGS32:
        n, at = _U32(d, at + 1)[0], at + 5
    else:
        raise _General
    if at + n > len(d):
        raise _General
    return str(d[at:at + n], "utf-8", "replace"), at + n


def _header(d: Any, at: int, fields: list) -> int:
    count, at = _compound(d, at, 0xC0, 0xD0, True)
    if count > 5:
        raise _General
    fields[3:6] = [_ABSENT, _ABSENT, _ABSENT]
    for i in range(count):
        code = d[at]
        at += 1
        number = _ABSENT
        if code != 0x40:
            if i in (0, 3):
                if code in (0x41, 0x42):
                    number = int(code == 0x41)
                elif code == 0x56:
                    number, at = int(d[at] != 0), at + 1
                else:
                    raise _General
            elif i == 1:
                if code != 0x50:
                    raise _General
                number, at = d[at], at + 1
            elif code == 0x43:
                number = 0
            elif code == 0x52:
                number, at = d[at], at + 1
            elif code == 0x70:
                number, at = _U32(d, at)[0], at + 4
            else:
                raise _General
        if i < 3:
            fields[3 + i] = number
    return at


def _annotations(d: Any, at: int, fields: list) -> int:
    count, at = _compound(d, at, 0xC1, 0xD1, False)
    if count % 2:
        raise _General
    fields[0] = fields[1] = None
    for _ in range(count // 2):
        key, at = _text(d, at)
        value, at = _text(d, at)
        if key == "x-routing-key":
            fields[0] = value
        elif key == "x-exchange":
            fields[1] = value
        else:
            raise _General
    return at


def _scan(d: Any) -> list:
    """``[key, exchange, body, durable, priority, ttl]`` of a message in the common shape.

    Raises:
        _General: it is not.
    """
    fields: list = [None, None, b"", _ABSENT, _ABSENT, _ABSENT]
    at, end, bodies = 0, len(d), 0
    try:
        while at < end:
            if d[at] != 0 or d[at + 1] != 0x53:
                raise _General
            code = d[at + 2]
            at += 3
            if code == 0x70:
                at = _header(d, at, fields)
            elif code == 0x72:
                at = _annotations(d, at, fields)
            elif code == 0x75:
                bodies += 1
                if bodies > 1:
                    raise _General
                if d[at] == 0xA0:
                    n, at = d[at + 1], at + 2
                elif d[at] == 0xB0:
                    n, at = _U32(d, at + 1)[0], at + 5
                else:
                    raise _General
                if at + n > end:
                    raise _General
                fields[2] = bytes(d[at:at + n])
                at += n
            else:
                raise _General
            if at > end:
                raise _General
    except (IndexError, struct.error):
        raise _General from None
    return fields


def _entries(data: Any) -> Any:
    """The chunk's entries as ``(start, end)``, then ``(status, None)`` if it stops early."""
    at, end = 0, len(data)
    while at < end:
        if end - at < 4:
            yield CHUNK_TRUNCATED, None
            return
        stop = end
        if data[at] & 0x80:
            if end - at < 11:
                yield CHUNK_TRUNCATED, None
                return
            if (data[at] >> 4) & 0x7:
                yield CHUNK_COMPRESSED, None
                return
            (length,) = _U32(data, at + 7)
            at += 11
            if length > end - at:
                yield CHUNK_TRUNCATED, None
                return
            stop = at + length
            while at < stop:
                if stop - at < 4 or _U32(data, at)[0] > stop - at - 4:
                    yield CHUNK_TRUNCATED, None
                    return
                size = _U32(data, at)[0]
                yield at + 4, at + 4 + size
                at += 4 + size
            continue
        (size,) = _U32(data, at)
        if size > stop - at - 4:
            yield CHUNK_TRUNCATED, None
            return
        yield at + 4, at + 4 + size
        at += 4 + size


def py_scan_chunk(data: Any, skip: int, limit: int, keys: list, exchanges: list,
                  bodies: list, durables: list, priorities: list, ttls: list,
                  general: list) -> tuple[int, int]:
    """The pure-Python twin of the native ``scan_chunk`` (same arguments, appends and
    result): reads the chunk's entries, skips ``skip``, takes at most ``limit``; appends each
    taken message's routing key, exchange, body, durable, priority and ttl (-1 where absent),
    or None to each and ``(index, view)`` to ``general``. Returns ``(taken, status)``: 0, or
    :data:`CHUNK_COMPRESSED` / :data:`CHUNK_TRUNCATED` where the entries stopped."""
    taken = seen = 0
    for start, stop in _entries(data):
        if taken >= limit:
            break
        if stop is None:
            return taken, start
        seen += 1
        if seen <= skip:
            continue
        message = data[start:stop]
        try:
            key, exchange, body, durable, priority, ttl = _scan(message)
        except _General:
            key = exchange = body = durable = priority = ttl = None
            general.append((taken, message))
        keys.append(key)
        exchanges.append(exchange)
        bodies.append(body)
        durables.append(durable)
        priorities.append(priority)
        ttls.append(ttl)
        taken += 1
    return taken, 0


if IMPLEMENTATION == "native":
    from rtroute.core._native import scan_chunk
else:
    scan_chunk = py_scan_chunk
