"""The ``headers`` property of an AMQP 0-9-1 content header frame, read and edited as bytes.

A proxy that republishes a message with one header more or less (the sidecar adds ``BCC`` and
drops its alias) need not decode and re-encode every property: pika's decoder is lossy (a
``float`` or ``double`` header comes back as an ``int``, a short ``s`` is re-encoded as a long
``I``) and its encoder refuses floats. Here the other properties and every untouched header
entry are copied byte for byte; only the entries named are dropped or appended.

Layout of a content header frame (``rtroute.amqp.frames`` has the frame itself)::

    type 2 | channel (2) | size (4) | class (2) | weight (2) | body size (8) | flags (2)
    | properties, in flag order: content_type (shortstr), content_encoding (shortstr),
      headers (table: size (4) + entries), delivery_mode, ... | 0xCE

A table entry is ``name (shortstr) | type (1) | value``.
"""
from __future__ import annotations

import struct
from collections.abc import Collection, Sequence
from typing import Any

from pika.data import decode_table, decode_value

__all__ = [
    "HeadersSpan",
    "bcc_entry",
    "decode_headers",
    "headers_span",
    "table_entries",
    "with_headers_table",
    "without_entries",
]

FLAGS_OFFSET = 19  # frame head (7) + class, weight, body size (12)
FLAG_CONTENT_TYPE = 1 << 15
FLAG_CONTENT_ENCODING = 1 << 14
FLAG_HEADERS = 1 << 13
FLAG_CONTINUATION = 1
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_HEAD = struct.Struct(">BHI")  # frame type, channel, payload size

# (start, end) of the headers field (its 4-byte size included) in the frame; start == end when
# the message has no headers, and is then where the field would go.
HeadersSpan = tuple[int, int]


def headers_span(header: bytes) -> HeadersSpan:
    """Where the ``headers`` property lies in the content header frame ``header``.

    Raises:
        ValueError: not a basic content header this module can edit (a second flag word, which
            no basic property needs, or a frame shorter than its properties).
    """
    last = len(header) - 1  # the frame-end octet
    if last < FLAGS_OFFSET + 2:
        raise ValueError("content header frame shorter than its property flags")
    flags = _U16.unpack_from(header, FLAGS_OFFSET)[0]
    if flags & FLAG_CONTINUATION:
        raise ValueError("content header with a continued property-flags word")
    pos = FLAGS_OFFSET + 2
    if flags & FLAG_CONTENT_TYPE and pos < last:
        pos += 1 + header[pos]
    if flags & FLAG_CONTENT_ENCODING and pos < last:
        pos += 1 + header[pos]
    if pos > last:
        raise ValueError("content header frame shorter than its properties")
    if not flags & FLAG_HEADERS:
        return pos, pos
    end = pos + 4 + _U32.unpack_from(header, pos)[0] if pos + 4 <= last else last + 1
    if end > last:
        raise ValueError("content header frame shorter than its headers table")
    return pos, end


def decode_headers(header: bytes, span: HeadersSpan) -> dict[Any, Any] | None:
    """The headers as pika decodes them, or None when the message has none."""
    start, end = span
    if start == end:
        return None
    return decode_table(header, start)[0]


def table_entries(header: bytes, span: HeadersSpan) -> list[tuple[Any, int, int]]:
    """Each entry of the headers table as ``(name, start, end)``, in order.

    ``name`` is a ``str`` (``bytes`` if it is not UTF-8); ``header[start:end]`` is the whole
    encoded entry, name included.
    """
    start, end = span
    if start == end:
        return []
    entries = []
    pos = start + 4
    while pos < end:
        entry_start = pos
        length = header[pos]
        name: Any = header[pos + 1:pos + 1 + length]
        try:
            name = name.decode("utf-8")
        except UnicodeDecodeError:
            pass
        _, pos = decode_value(header, pos + 1 + length)
        entries.append((name, entry_start, pos))
    return entries


def without_entries(header: bytes, span: HeadersSpan, names: Collection[str]) -> bytes:
    """The encoded entries of the headers table except those called one of ``names``."""
    start, end = span
    if start == end:
        return b""
    entries = table_entries(header, span)
    if not any(name in names for name, _, _ in entries):
        return header[start + 4:end]
    return b"".join(header[s:e] for name, s, e in entries if name not in names)


def bcc_entry(keys: Sequence[str]) -> bytes:
    """A ``BCC`` table entry: an array of long strings."""
    items = []
    for key in keys:
        data = key.encode("utf-8")
        items.append(b"S" + _U32.pack(len(data)) + data)
    array = b"".join(items)
    return b"\x03BCCA" + _U32.pack(len(array)) + array


def with_headers_table(header: bytes, channel: int, span: HeadersSpan, entries: bytes) -> bytes:
    """``header`` moved to ``channel``, its headers table holding exactly ``entries``.

    Every other property, and the body size, is kept as is; the headers flag is set (an empty
    table stays a table).
    """
    start, end = span
    size = len(header) - 8 + len(entries) - (end - start - 4)
    return b"".join((_HEAD.pack(2, channel, size), header[7:FLAGS_OFFSET],
                     bytes((header[FLAGS_OFFSET] | FLAG_HEADERS >> 8, header[FLAGS_OFFSET + 1])),
                     header[FLAGS_OFFSET + 2:start], _U32.pack(len(entries)), entries,
                     header[end:]))
