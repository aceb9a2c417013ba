"""The properties of an AMQP 0-9-1 content header frame, read and edited as bytes.

A proxy that republishes a message with one header more or less (the sidecar adds ``BCC`` and
drops its alias; a dead letter adds its reason; a shovel its ``x-shovelled`` entry) need not
decode and re-encode every property: here the other properties and every untouched header
entry are copied byte for byte; only the entries named are dropped, replaced or appended.
Values are read with the lossless codec of :mod:`rtroute.amqp.field_table` (pika's decoder
turns a ``float`` into an ``int``, a short ``s`` into a long ``I``, and fails on timestamps
outside the years 1-9999 and on deep nesting).

- :func:`headers_span`, :func:`table_entries`, :func:`without_entries`, :func:`bcc_entry`,
  :func:`with_headers_table`: the sidecar's republish path, at the byte level.
- :func:`decode_properties` (every property, lossless) and :func:`content_header_frame`
  (a frame from properties given as values; :func:`content_header_frame_with`, the
  publisher's per message, from a properties object and the headers to send).
- :class:`ContentHeader`: change some properties and some header entries of a frame, keep the
  bytes of everything else (the shovel's ``publish_properties`` and forward headers).
- :func:`dead_letter_header`: the frame of a dead letter (every property and header entry of
  the message, plus the reason entries); :func:`dead_letter_frames` for a whole publish.

Layout of a content header frame (``rtroute.amqp.frames`` has the frame itself)::

    type 2 | channel (2) | size (4) | class (2) | weight (2) | body size (8) | flags (2)
    | properties, in flag order: content_type (shortstr), content_encoding (shortstr),
      headers (table: size (4) + entries), delivery_mode, ... | 0xCE

A table entry is ``name (shortstr) | type (1) | value``.

Size: a little over 600 lines: reading, encoding and editing share the property layout and
its encoders (``_encode_property``, the spans); split it by direction if it grows further.
"""
from __future__ import annotations

import calendar
import datetime
import struct
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from rtroute.amqp.field_table import (
    FieldTable,
    FieldTableError,
    decode_table,
    decode_value,
    encode_entries,
    encode_value,
    encoded_name,
    entry_spans,
)
from rtroute.amqp.frame_codec import frame_fits

__all__ = [
    "PROPERTY_NAMES",
    "BasicProperties",
    "ContentHeader",
    "HeadersSpan",
    "bcc_entry",
    "content_header_frame",
    "content_header_frame_with",
    "dead_letter_frames",
    "dead_letter_header",
    "decode_headers",
    "decode_properties",
    "encode_properties",
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


def _property_flags(header: bytes) -> tuple[int, int]:
    """``(property flags, index of the frame-end octet)`` of the content header frame ``header``.

    Raises:
        ValueError: a frame shorter than its flags, or a continued flag word (which no basic
            property needs).
    """
    last = len(header) - 1  # the frame-end octet
    if last < FLAGS_OFFSET + 2:
        raise ValueError("content header frame shorter than its property flags")
    flags = _U16.unpack_from(header, FLAGS_OFFSET)[0]
    if flags & FLAG_CONTINUATION:
        raise ValueError("content header with a continued property-flags word")
    return flags, last


def headers_span(header: bytes) -> HeadersSpan:
    """Where the ``headers`` property lies in the content header frame ``header``.

    Raises:
        ValueError: not a basic content header this module can edit (a second flag word, which
            no basic property needs, or a frame shorter than its properties).
    """
    flags, last = _property_flags(header)
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


def decode_headers(header: bytes, span: HeadersSpan) -> FieldTable | None:
    """The headers table, decoded without loss, or None when the message has none.

    Raises:
        FieldTableError: the table is not one in RabbitMQ's dialect.
    """
    start, end = span
    if start == end:
        return None
    return decode_table(header, start + 4, end)


def table_entries(header: bytes, span: HeadersSpan) -> list[tuple[Any, int, int]]:
    """Each entry of the headers table as ``(name, start, end)``, in order.

    ``name`` is a ``str`` (``bytes`` if it is not UTF-8); ``header[start:end]`` is the whole
    encoded entry, name included.
    """
    start, end = span
    if start == end:
        return []
    return entry_spans(header, start + 4, end)


def without_entries(header: bytes, span: HeadersSpan, names: Collection[str]) -> bytes:
    """The encoded entries of the headers table except those called one of ``names``."""
    start, end = span
    if start == end:
        return b""
    entries = entry_spans(header, start + 4, end, check=False)  # copied, not decoded
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


# -- every property ----------------------------------------------------------------------------
PROPERTY_NAMES = (
    "content_type", "content_encoding", "headers", "delivery_mode", "priority",
    "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type", "user_id",
    "app_id", "cluster_id",
)
"""The basic properties in flag order (bit 15 down to bit 2), by their pika names."""

_SHORTSTR, _TABLE, _OCTET, _TIMESTAMP = "shortstr", "table", "octet", "timestamp"
_KINDS = {name: _SHORTSTR for name in PROPERTY_NAMES}
_KINDS.update(headers=_TABLE, delivery_mode=_OCTET, priority=_OCTET, timestamp=_TIMESTAMP)
_FLAGS = {name: 1 << (15 - i) for i, name in enumerate(PROPERTY_NAMES)}
_U64 = struct.Struct(">Q")


class BasicProperties:
    """The basic properties of a message, decoded without loss (:func:`decode_properties`).

    Attribute names as pika's ``BasicProperties``; an absent property is None. Short strings
    are ``str`` (``bytes`` when not UTF-8), ``delivery_mode``/``priority`` ``int``,
    ``timestamp`` the ``int`` of seconds as sent (never a ``datetime``), ``headers`` a
    :class:`~rtroute.amqp.field_table.FieldTable`.
    """

    __slots__ = PROPERTY_NAMES
    # the slots, for the type checker (the types as decoded: see the class docstring)
    content_type: str | bytes | None
    content_encoding: str | bytes | None
    headers: Any
    delivery_mode: int | None
    priority: int | None
    correlation_id: str | bytes | None
    reply_to: str | bytes | None
    expiration: str | bytes | None
    message_id: str | bytes | None
    timestamp: int | None
    type: str | bytes | None
    user_id: str | bytes | None
    app_id: str | bytes | None
    cluster_id: str | bytes | None

    def __init__(self, **properties: Any) -> None:
        for name in PROPERTY_NAMES:
            setattr(self, name, properties.pop(name, None))
        if properties:
            raise TypeError(f"unknown properties {sorted(properties)}")

    def present(self, headers: bool = True) -> dict[str, Any]:
        """The properties that are present, by name, in flag order (``headers``: with the
        headers table)."""
        return {name: value for name in PROPERTY_NAMES
                if (value := getattr(self, name)) is not None and (headers or name != "headers")}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BasicProperties):
            return NotImplemented
        return self.present() == other.present()

    def __repr__(self) -> str:
        inside = ", ".join(f"{name}={value!r}" for name, value in self.present().items())
        return f"BasicProperties({inside})"


def _property_spans(header: bytes) -> dict[str, tuple[int, int]]:
    """Where each property present in the content header frame ``header`` is encoded.

    Raises:
        ValueError: a continued flag word, or a frame shorter than its properties.
    """
    flags, last = _property_flags(header)
    spans = {}
    pos = FLAGS_OFFSET + 2
    for name in PROPERTY_NAMES:
        if not flags & _FLAGS[name]:
            continue
        kind = _KINDS[name]
        if pos >= last:
            raise ValueError(f"content header frame shorter than its properties ({name})")
        if kind == _SHORTSTR:
            end = pos + 1 + header[pos]
        elif kind == _TABLE:
            end = pos + 4 + _U32.unpack_from(header, pos)[0] if pos + 4 <= last else last + 1
        else:
            end = pos + (1 if kind == _OCTET else 8)
        if end > last:
            raise ValueError(f"content header frame shorter than its properties ({name})")
        spans[name] = (pos, end)
        pos = end
    return spans


def _decode_property(header: bytes, name: str, start: int, end: int) -> Any:
    kind = _KINDS[name]
    if kind == _SHORTSTR:
        raw = header[start + 1:end]
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw
    if kind == _TABLE:
        return decode_table(header, start + 4, end)
    if kind == _OCTET:
        return header[start]
    return _U64.unpack_from(header, start)[0]


def decode_properties(header: bytes) -> BasicProperties:
    """Every basic property of the content header frame ``header``, without loss.

    Raises:
        ValueError: not a content header this module can read (a continued flag word, a
            frame shorter than its properties, a headers table that is not one:
            :class:`~rtroute.amqp.field_table.FieldTableError`).
    """
    properties = BasicProperties()
    for name, (start, end) in _property_spans(header).items():
        setattr(properties, name, _decode_property(header, name, start, end))
    return properties


def _encode_property(name: str, value: Any) -> bytes:
    kind = _KINDS[name]
    if kind == _SHORTSTR:
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        if len(raw) > 255:
            raise ValueError(f"property {name} of {len(raw)} bytes (a short string: at most "
                             "255)")
        return bytes((len(raw),)) + raw
    if kind == _TABLE:
        entries = encode_entries(value, finite_floats=True)
        return _U32.pack(len(entries)) + entries
    if kind == _OCTET:
        if not 0 <= int(value) <= 255:
            raise ValueError(f"property {name} must be between 0 and 255, not {value!r}")
        return bytes((int(value),))
    if isinstance(value, datetime.datetime):
        value = calendar.timegm(value.utctimetuple())
    if not 0 <= int(value) < 1 << 64:
        raise ValueError(f"property timestamp must fit 64 unsigned bits, not {value!r}")
    return _U64.pack(int(value))


def _properties_of(properties: Any) -> Iterable[tuple[str, Any]]:
    if properties is None:
        return ()
    if isinstance(properties, Mapping):
        unknown = set(properties) - set(PROPERTY_NAMES)
        if unknown:
            raise ValueError(f"unknown properties {sorted(unknown)}")
        return ((name, properties.get(name)) for name in PROPERTY_NAMES)
    return ((name, getattr(properties, name, None)) for name in PROPERTY_NAMES)


def encode_properties(properties: Any) -> bytes:
    """The property flags and properties of a content header, from ``properties``: a mapping
    by pika name or an object with those attributes (None: absent).

    Raises:
        ValueError: a property that has no encoding (a short string over 255 bytes, an
            octet out of range, a header value: :class:`FieldTableError`), or an unknown name.
    """
    flags = 0
    parts = []
    for name, value in _properties_of(properties):
        if value is not None:
            flags |= _FLAGS[name]
            parts.append(_encode_property(name, value))
    return _U16.pack(flags) + b"".join(parts)


_CLASS_BASIC = b"\x00\x3c\x00\x00"  # class 60, weight 0


def content_header_frame(channel: int, body_size: int, properties: Any) -> bytes:
    """A content header frame for a body of ``body_size`` bytes (see
    :func:`encode_properties`).

    Raises:
        ValueError: as :func:`encode_properties`.
    """
    payload = _CLASS_BASIC + _U64.pack(body_size) + encode_properties(properties)
    return _HEAD.pack(2, channel, len(payload)) + payload + b"\xce"


_IN_ORDER = tuple((name, _FLAGS[name], name == "headers") for name in PROPERTY_NAMES)


def content_header_frame_with(channel: int, body_size: int, properties: Any,
                              headers: Mapping[str, Any] | None) -> bytes:
    """:func:`content_header_frame` of ``properties`` (an object with pika's attribute names,
    or None) with ``headers`` instead of its own (None: no headers table), in one pass (the
    publisher's per-message header frame: no mapping of the properties built first).

    Raises:
        ValueError: as :func:`encode_properties`.
    """
    flags = 0
    parts = []
    for name, flag, is_headers in _IN_ORDER:
        value = headers if is_headers else \
            (None if properties is None else getattr(properties, name, None))
        if value is not None:
            flags |= flag
            parts.append(_encode_property(name, value))
    payload = _CLASS_BASIC + _U64.pack(body_size) + _U16.pack(flags) + b"".join(parts)
    return _HEAD.pack(2, channel, len(payload)) + payload + b"\xce"


# -- editing some properties of a frame ---------------------------------------------------------
class ContentHeader:
    """A content header frame to change property by property and header entry by header
    entry; whatever is not changed keeps its bytes.

    Args:
        frame: the content header frame as received.

    Raises:
        ValueError: not a content header this module can read (see :func:`decode_properties`).
    """

    __slots__ = ("_changed", "_entries", "_frame", "_spans")

    def __init__(self, frame: bytes) -> None:
        self._frame = frame
        self._spans = _property_spans(frame)
        self._changed: dict[str, bytes | None] = {}  # property -> encoded (None: removed)
        # the headers table's entries as (name, encoded entry), once edited; None: unchanged
        self._entries: list[tuple[Any, bytes]] | None = None

    @property
    def body_size(self) -> int:
        return _U64.unpack_from(self._frame, 11)[0]

    def get(self, name: str) -> Any:
        """The property ``name`` as it now is (None: absent); ``headers`` decoded in full."""
        if name == "headers" and self._entries is not None:
            table = b"".join(encoded for _, encoded in self._entries)
            return decode_table(table, 0, len(table)) if self._has_headers() else None
        if name in self._changed:
            encoded = self._changed[name]
            return None if encoded is None else \
                _decode_property(encoded, name, 0, len(encoded))
        if name not in _KINDS:
            raise KeyError(name)
        span = self._spans.get(name)
        return None if span is None else _decode_property(self._frame, name, *span)

    def set(self, name: str, value: Any) -> None:
        """Sets the property ``name`` (None removes it); ``headers`` replaces the whole table.

        Raises:
            KeyError: no such property.
            ValueError: ``value`` has no encoding.
        """
        if name not in _KINDS:
            raise KeyError(name)
        if name == "headers":
            if value is None:
                self._entries = []
                self._changed["headers"] = None
            else:
                pairs = value.entries() if isinstance(value, FieldTable) else value.items()
                self._entries = [(n, encoded_name(n) + encode_value(v, finite_floats=True))
                                 for n, v in pairs]
                self._changed.pop("headers", None)
                self._spans.setdefault("headers", (0, 0))  # present, even if empty
            return
        self._changed[name] = None if value is None else _encode_property(name, value)

    def _has_headers(self) -> bool:
        return "headers" in self._spans and self._changed.get("headers", b"") is not None

    def _table(self) -> list[tuple[Any, bytes]]:
        entries = self._entries
        if entries is None:
            span = self._spans.get("headers")
            frame = self._frame
            entries = self._entries = [] if span is None else [
                (name, frame[s:e]) for name, s, e in entry_spans(frame, span[0] + 4, span[1])]
        return entries

    def header(self, name: Any, default: Any = None) -> Any:
        """The value of the header entry ``name`` (its first entry), decoded; ``default`` when
        there is none."""
        for entry_name, encoded in self._table():
            if entry_name == name:
                return decode_value(encoded, encoded[0] + 1)[0]
        return default

    def set_header(self, name: Any, value: Any) -> None:
        """Sets the header entry ``name``: its first entry is replaced in place (later ones
        dropped), else it is appended; the headers table is created if absent.

        Raises:
            ValueError: ``name`` or ``value`` has no encoding (:class:`FieldTableError`; a
                NaN or infinite float included, which RabbitMQ would not take).
        """
        self.set_encoded_header(name, encoded_name(name) + encode_value(value, finite_floats=True))

    def set_encoded_header(self, name: Any, encoded: bytes) -> None:
        """As :meth:`set_header`, with the whole entry already encoded (name included)."""
        entries = self._table()
        kept = []
        placed = False
        for entry_name, old in entries:
            if entry_name == name:
                if not placed:
                    kept.append((name, encoded))
                    placed = True
            else:
                kept.append((entry_name, old))
        if not placed:
            kept.append((name, encoded))
        self._entries = kept
        self._changed.pop("headers", None)
        self._spans.setdefault("headers", (0, 0))

    def drop_headers(self, names: Collection[Any]) -> None:
        """Removes every entry called one of ``names`` (the table stays, even if empty)."""
        self._entries = [(n, e) for n, e in self._table() if n not in names]

    def header_entries(self) -> list[tuple[Any, bytes]]:
        """Each header entry as ``(name, encoded entry)``, edits included."""
        return list(self._table())

    def frame(self, channel: int) -> bytes:
        """The edited content header frame, on ``channel``."""
        frame = self._frame
        flags = 0
        parts = []
        for name in PROPERTY_NAMES:
            if name == "headers" and self._entries is not None:
                if not self._has_headers():
                    continue
                entries = b"".join(encoded for _, encoded in self._entries)
                encoded: bytes | None = _U32.pack(len(entries)) + entries
            elif name in self._changed:
                encoded = self._changed[name]
            else:
                span = self._spans.get(name)
                encoded = None if span is None else frame[span[0]:span[1]]
            if encoded is not None:
                flags |= _FLAGS[name]
                parts.append(encoded)
        payload = b"".join((frame[7:FLAGS_OFFSET], _U16.pack(flags), *parts))
        return _HEAD.pack(2, channel, len(payload)) + payload + b"\xce"


def _renamed(name: Any, entry: bytes) -> tuple[Any, bytes]:
    """The encoded ``entry`` under another name, its value kept byte for byte."""
    return name, encoded_name(name) + entry[entry[0] + 1:]


# -- dead letters --------------------------------------------------------------------------------
ROUTING_HEADERS = ("CC", "BCC")
INVALID_PREFIX = "x-rtroute-invalid-"
ORIGINAL_PROPERTIES_HEADER = "x-rtroute-original-properties"
_ARRAY = ord("A")


def dead_letter_header(header: bytes, channel: int, reasons: Mapping[str, Any] |
                       Sequence[tuple[str, Any]], frame_max: int = 131072) -> bytes:
    """The content header frame of the dead letter of a message whose content header frame
    is ``header``: every property and every header entry kept byte for byte, and the
    ``reasons`` entries set (replacing entries of the same names).

    A ``CC`` or ``BCC`` that is not an array (RabbitMQ would close the channel of the
    publish) is renamed ``x-rtroute-invalid-CC``/``-BCC``, its value kept. A header that
    cannot be read, or a dead letter that would not fit in ``frame_max``, gets a header of
    its own: the ``reasons`` entries and, if it fits, the original properties as received
    (flags first) in ``x-rtroute-original-properties`` (a byte array).

    Raises:
        ValueError: a reason value has no encoding.
    """
    pairs = list(reasons.items()) if isinstance(reasons, Mapping) else list(reasons)
    encoded = [(name, encoded_name(name) + encode_value(value, finite_floats=True))
               for name, value in pairs]
    try:
        edited = ContentHeader(header)
        entries = edited.header_entries()
        if any(n in ROUTING_HEADERS and e[e[0] + 1] != _ARRAY for n, e in entries):
            edited._entries = [_renamed(INVALID_PREFIX + n, e)
                               if n in ROUTING_HEADERS and e[e[0] + 1] != _ARRAY else (n, e)
                               for n, e in entries]
        for name, entry in encoded:
            edited.set_encoded_header(name, entry)
        frame = edited.frame(channel)
        if frame_fits(len(frame), frame_max):
            return frame
    except (ValueError, FieldTableError):
        pass
    body_size = _U64.unpack_from(header, 11)[0] if len(header) >= 19 else 0
    entries = b"".join(entry for _, entry in encoded)
    original = encoded_name(ORIGINAL_PROPERTIES_HEADER) + encode_value(
        bytes(header[FLAGS_OFFSET:-1]))
    for table in (entries + original, entries):
        payload = _CLASS_BASIC + _U64.pack(body_size) + _U16.pack(FLAG_HEADERS) + \
            _U32.pack(len(table)) + table
        frame = _HEAD.pack(2, channel, len(payload)) + payload + b"\xce"
        if frame_fits(len(frame), frame_max):
            return frame
    raise ValueError(f"the dead letter's reasons do not fit in a frame of {frame_max} bytes")


def dead_letter_frames(data: bytes, method_frame: bytes,
                       reasons: Mapping[str, Any] | Sequence[tuple[str, Any]],
                       frame_max: int = 131072) -> tuple[bytes, int]:
    """The publish frames ``data`` (a ``basic.publish`` method frame, then the content header
    and body frames, as a confirm window writes them) made into those of a dead letter:
    ``method_frame`` first (on the same channel), the content header through
    :func:`dead_letter_header`, the body frames as they were; and how many frames.

    Raises:
        ValueError: ``data`` is not a method frame followed by content frames.
    """
    if len(data) < 8 or data[0] != 1:
        raise ValueError("publish frames must start with a method frame")
    header_at = 8 + _U32.unpack_from(data, 3)[0]
    if len(data) < header_at + 8 or data[header_at] != 2:
        raise ValueError("no content header frame after the method frame")
    bodies_at = header_at + 8 + _U32.unpack_from(data, header_at + 3)[0]
    header = data[header_at:bodies_at]
    channel = _U16.unpack_from(header, 1)[0]
    count = 2
    pos = bodies_at
    while pos < len(data):
        pos += 8 + _U32.unpack_from(data, pos + 3)[0]
        count += 1
    return b"".join((method_frame, dead_letter_header(header, channel, reasons, frame_max),
                     data[bodies_at:])), count
