"""AMQP 0-9-1 field tables and arrays, decoded and encoded without loss (RabbitMQ's dialect).

pika's codec is lossy for what RabbitMQ delivers: ``f``/``d`` become integers, ``s`` is read
as a short string (RabbitMQ: a signed 16-bit integer) and written back as ``S``, bytes and
shorts come back as 32-bit ``I``, a timestamp outside the years 1-9999 (Node.js clients send
``Date.now()`` milliseconds) raises, and a table nested a few hundred levels deep overflows the
recursion limit. Here every decoded value keeps its wire type, so that ``encode(decode(b))``
gives ``b`` back byte for byte, for every table the broker delivers:

=====  ===============================  ============================================
type   RabbitMQ (rabbit_binary_parser)  decoded as
=====  ===============================  ============================================
``t``  bool (octet /= 0)                ``bool``; :class:`BoolOctet` for an octet
                                        other than 0 or 1 (true, the octet kept)
``b``  signed 8-bit                     :class:`Int8`
``B``  unsigned 8-bit                   :class:`UInt8`
``s``  signed 16-bit                    :class:`Int16`
``u``  unsigned 16-bit                  :class:`UInt16`
``I``  signed 32-bit                    ``int``
``i``  unsigned 32-bit                  :class:`UInt32`
``l``  signed 64-bit                    :class:`Int64`
``L``  signed 64-bit (as ``l``)         :class:`Int64L`
``f``  32-bit float                     :class:`Float32` (a ``float``)
``d``  64-bit float                     ``float``
``D``  decimal: scale octet, unsigned   ``decimal.Decimal`` whose exponent is
       32-bit value                     ``-scale``
``S``  long string (binary)             ``str`` if UTF-8, else :class:`LongStrBytes`
``x``  byte array                       ``bytes``
``A``  array                            ``list``
``F``  table                            :class:`FieldTable` (a ``dict``)
``T``  timestamp, unsigned 64-bit       :class:`Timestamp`: the plain number of
                                        seconds, never a ``datetime``
``V``  void                             ``None``
=====  ===============================  ============================================

The typed values subclass ``int``/``float``/``bytes``, so code that reads headers as plain
values (routing, selectors, JSON) keeps working; arithmetic on them gives plain values. Plain
Python values encode as RabbitMQ's generator and pika would: ``str`` ``S``, ``bool`` ``t``,
``int`` ``I`` (``l`` beyond 32 bits), ``float`` ``d``, ``Decimal`` ``D``, ``datetime`` ``T``
(UTC seconds), ``None`` ``V``, ``bytes`` ``x``, sequences ``A``, mappings ``F``.

A table may hold a name twice (RabbitMQ 3.x delivers what was published; lookups take the
first, as ``rabbit_misc:table_lookup`` does): :class:`FieldTable` keeps every entry, in order.
Names are ``str``, or ``bytes`` when not UTF-8.

Seen on RabbitMQ 3.10.8 and 4.0.5: 3.x delivers the table as published, bytes and all; 4.x
re-encodes it (top-level entries sorted by name, a repeated name once, ``L`` as ``l``, a
``t`` octet as 0 or 1). Neither accepts a NaN or infinite ``f``/``d``: the publisher's
connection is closed (541 INTERNAL_ERROR), so a delivered table never holds one, and what is
encoded for a publish must not (``finite_floats``). Both accept any nesting that fits in a
frame (26,000 levels of arrays in a 128 KiB header frame, delivered intact): decoding and
encoding here are iterative, so any depth goes. :func:`select_entries` reads a table for a few names only (the sidecar's
``CC``, ``BCC`` and alias), checking the structure of everything else without building it.

Size: the decoder, the encoder and the value types of one wire format (every field type RabbitMQ
sends, with its limits); they change together, type by type, so they stay in one file.
"""
from __future__ import annotations

import calendar
import datetime
import decimal
import math
import struct
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from rtroute.core import IMPLEMENTATION
from rtroute.core.plain_table import encode_plain_entries

__all__ = [
    "BoolOctet",
    "FieldTable",
    "FieldTableError",
    "Float32",
    "Int8",
    "Int16",
    "Int64",
    "Int64L",
    "LongStrBytes",
    "Timestamp",
    "UInt8",
    "UInt16",
    "UInt32",
    "amqp_type",
    "decode_array",
    "decode_table",
    "decode_value",
    "encode_entries",
    "encode_table",
    "encode_value",
    "encoded_name",
    "entry_spans",
    "select_entries",
    "selection",
    "skip_value",
]


class FieldTableError(ValueError):
    """Bytes that are not a field table in RabbitMQ's dialect, or a value that has no
    encoding (out of range, unsupported type, a name longer than 255 bytes)."""


# -- typed values ---------------------------------------------------------------------------
class _TypedInt(int):
    """An integer that remembers its field type (``amqp_type``)."""

    __slots__ = ()
    amqp_type = ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int(self)})"


class Int8(_TypedInt):
    """A signed 8-bit integer (``b``)."""

    __slots__ = ()
    amqp_type = "b"


class UInt8(_TypedInt):
    """An unsigned 8-bit integer (``B``)."""

    __slots__ = ()
    amqp_type = "B"


class Int16(_TypedInt):
    """A signed 16-bit integer (``s``: RabbitMQ's short, not the spec's short string)."""

    __slots__ = ()
    amqp_type = "s"


class UInt16(_TypedInt):
    """An unsigned 16-bit integer (``u``)."""

    __slots__ = ()
    amqp_type = "u"


class UInt32(_TypedInt):
    """An unsigned 32-bit integer (``i``)."""

    __slots__ = ()
    amqp_type = "i"


class Int64(_TypedInt):
    """A signed 64-bit integer (``l``): a Java ``Long`` to a selector, whatever its value."""

    __slots__ = ()
    amqp_type = "l"


class Int64L(Int64):
    """A 64-bit integer sent as ``L``: signed, as RabbitMQ reads it (and re-encodes it as
    ``l`` when it rewrites a table)."""

    __slots__ = ()
    amqp_type = "L"


class Timestamp(_TypedInt):
    """A timestamp (``T``): unsigned 64-bit seconds since the epoch, kept as a number (values
    from clients that send milliseconds are far beyond ``datetime``'s year 9999)."""

    __slots__ = ()
    amqp_type = "T"


class BoolOctet(_TypedInt):
    """A boolean (``t``) whose octet is neither 0 nor 1: true, as RabbitMQ reads it; the
    octet is kept so that the entry re-encodes as it came."""

    __slots__ = ()
    amqp_type = "t"


class Float32(float):
    """A 32-bit float (``f``). Its value is the float's exact double; a NaN keeps its bits
    (``bits``), which a conversion to double and back could change."""

    __slots__ = ("bits",)
    amqp_type = "f"

    def __repr__(self) -> str:
        return f"Float32({float(self)!r})"


class LongStrBytes(bytes):
    """A long string (``S``) that is not UTF-8 (RabbitMQ's long strings are binary); a
    ``bytes`` would encode as a byte array (``x``)."""

    __slots__ = ()
    amqp_type = "S"

    def __repr__(self) -> str:
        return f"LongStrBytes({bytes(self)!r})"


def amqp_type(value: Any) -> str:
    """The one-letter field type ``value`` encodes as (``"F"`` for a mapping, and so on).

    Raises:
        FieldTableError: no AMQP field type holds ``value``.
    """
    tag = getattr(type(value), "amqp_type", None)
    if tag is not None:
        return tag
    cls = value.__class__
    if cls is int or (isinstance(value, int) and not isinstance(value, bool)):
        return "I" if _I32_MIN <= value <= _I32_MAX else "l"
    for types, tag in _PLAIN_TYPES:
        if isinstance(value, types):
            return tag
    raise FieldTableError(f"no AMQP field type for a {type(value).__name__}")


# -- the table ---------------------------------------------------------------------------------
class FieldTable(dict):
    """An AMQP field table: a ``dict`` of its entries by name, that keeps a repeated name.

    As a mapping, a name maps to its first entry (RabbitMQ's lookup). When a name repeats,
    :meth:`entries` still lists every entry in wire order, and the table encodes them all.
    Setting a name replaces its first entry in place and drops the others (so every reader
    agrees on its value); deleting a name deletes all its entries.
    """

    _entries: list[tuple[Any, Any]] | None = None  # every entry, only when a name repeats

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        dict.__init__(self)
        if args or kwargs:
            self.update(*args, **kwargs)

    def entries(self) -> list[tuple[Any, Any]]:
        """Every ``(name, value)`` in wire order, repeated names included."""
        entries = self._entries
        return list(entries) if entries is not None else list(dict.items(self))

    @property
    def has_repeats(self) -> bool:
        """Whether a name occurs more than once."""
        return self._entries is not None

    @classmethod
    def from_entries(cls, entries: Iterable[tuple[Any, Any]]) -> FieldTable:
        """A table of these ``(name, value)`` pairs, in order, repeated names kept."""
        table = cls()
        for name, value in entries:
            table._append(name, value)
        return table

    def _append(self, name: Any, value: Any) -> None:
        entries = self._entries
        if name in self:
            if entries is None:
                entries = self._entries = list(dict.items(self))
            entries.append((name, value))
            return
        dict.__setitem__(self, name, value)
        if entries is not None:
            entries.append((name, value))

    def _reset(self, entries: list[tuple[Any, Any]]) -> None:
        dict.clear(self)
        self._entries = None
        for name, value in entries:
            self._append(name, value)

    def __setitem__(self, name: Any, value: Any) -> None:
        entries = self._entries
        if entries is None:
            dict.__setitem__(self, name, value)
            return
        kept = []
        placed = False
        for n, v in entries:
            if n == name:
                if not placed:
                    kept.append((name, value))
                    placed = True
            else:
                kept.append((n, v))
        if not placed:
            kept.append((name, value))
        self._reset(kept)

    def __delitem__(self, name: Any) -> None:
        dict.__delitem__(self, name)
        entries = self._entries
        if entries is not None:
            self._reset([(n, v) for n, v in entries if n != name])

    _MISSING = object()

    def pop(self, name: Any, default: Any = _MISSING) -> Any:
        if name in self:
            value = dict.__getitem__(self, name)
            del self[name]
            return value
        if default is FieldTable._MISSING:
            raise KeyError(name)
        return default

    def popitem(self) -> tuple[Any, Any]:
        if not self:
            raise KeyError("popitem(): table is empty")
        name = next(reversed(dict.keys(self)))
        return name, self.pop(name)

    def setdefault(self, name: Any, default: Any = None) -> Any:
        if name in self:
            return dict.__getitem__(self, name)
        self[name] = default
        return default

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for source in (*args, kwargs):
            items = source.items() if isinstance(source, Mapping) else source
            for name, value in items:
                self[name] = value

    def __ior__(self, other: Any) -> FieldTable:  # type: ignore[override] # noqa: PYI034
        self.update(other)
        return self

    def __or__(self, other: Any) -> FieldTable:  # type: ignore[override]
        result = self.copy()
        result.update(other)
        return result

    def clear(self) -> None:
        dict.clear(self)
        self._entries = None

    def copy(self) -> FieldTable:
        """A shallow copy, repeated names kept."""
        table = FieldTable()
        dict.update(table, self)
        if self._entries is not None:
            table._entries = list(self._entries)
        return table

    __copy__ = copy

    def __repr__(self) -> str:
        if self._entries is not None:
            return f"FieldTable.from_entries({self._entries!r})"
        return f"FieldTable({dict.__repr__(self)})"

    def __reduce__(self) -> Any:
        return FieldTable.from_entries, (self.entries(),)


# -- decoding -----------------------------------------------------------------------------------
_U32 = struct.Struct(">I").unpack_from
_P32 = struct.Struct(">I").pack
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
# plain tables (a dict of str names and plain values: most headers) encoded natively in one
# pass (rtroute.core.plain_table); the twin would only add a second pass here
_NATIVE_PLAIN = encode_plain_entries if IMPLEMENTATION == "native" else None
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1

# tag octet -> size of a fixed-size value; -1: a 4-byte length then that many bytes
_SIZE = {ord("t"): 1, ord("b"): 1, ord("B"): 1, ord("s"): 2, ord("u"): 2, ord("I"): 4,
         ord("i"): 4, ord("l"): 8, ord("L"): 8, ord("f"): 4, ord("d"): 8, ord("T"): 8,
         ord("D"): 5, ord("V"): 0, ord("S"): -1, ord("x"): -1, ord("A"): -1, ord("F"): -1}
_SIZES = tuple(_SIZE.get(i, -2) for i in range(256))  # -2: no such type
_T, _S, _X, _A, _F, _D, _FL = (ord(c) for c in "tSxAFDf")

# fixed-size types read with struct: tag octet -> (unpack_from, class or None for plain)
_FIXED = {
    ord("b"): (struct.Struct(">b").unpack_from, Int8),
    ord("B"): (struct.Struct(">B").unpack_from, UInt8),
    ord("s"): (struct.Struct(">h").unpack_from, Int16),
    ord("u"): (struct.Struct(">H").unpack_from, UInt16),
    ord("I"): (struct.Struct(">i").unpack_from, None),
    ord("i"): (struct.Struct(">I").unpack_from, UInt32),
    ord("l"): (struct.Struct(">q").unpack_from, Int64),
    ord("L"): (struct.Struct(">q").unpack_from, Int64L),
    ord("d"): (struct.Struct(">d").unpack_from, None),
    ord("T"): (struct.Struct(">Q").unpack_from, Timestamp),
}
_F32 = struct.Struct(">f")


def _text(raw: bytes) -> Any:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _long_string(raw: bytes) -> Any:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return LongStrBytes(raw)


def _scalar(tag: int, data: bytes, pos: int, end: int) -> tuple[Any, int]:
    """The value of type ``tag`` at ``pos`` (after the tag) and where it ends; containers
    excluded. Raises FieldTableError when it does not fit before ``end``."""
    size = _SIZES[tag]
    if size == -1:
        if pos + 4 > end:
            raise FieldTableError(f"truncated length of a {chr(tag)!r} value at {pos}")
        stop = pos + 4 + _U32(data, pos)[0]
        if stop > end:
            raise FieldTableError(f"a {chr(tag)!r} value at {pos} runs past its container")
        raw = data[pos + 4:stop]
        return (_long_string(raw) if tag == _S else raw), stop
    if size == -2:
        raise FieldTableError(f"unknown field type {chr(tag)!r} (0x{tag:02x}) at {pos - 1}")
    stop = pos + size
    if stop > end:
        raise FieldTableError(f"truncated {chr(tag)!r} value at {pos}")
    fixed = _FIXED.get(tag)
    if fixed is not None:
        unpack, cls = fixed
        value = unpack(data, pos)[0]
        return (value if cls is None else cls(value)), stop
    if tag == _T:
        octet = data[pos]
        return (octet == 1 if octet < 2 else BoolOctet(octet)), stop
    if tag == _FL:
        value = Float32(_F32.unpack_from(data, pos)[0])
        if math.isnan(value):
            value.bits = data[pos:stop]
        return value, stop
    if tag == _D:
        scale, number = data[pos], _U32(data, pos + 1)[0]
        return decimal.Decimal(f"{number}E-{scale}"), stop
    return None, stop  # V


def _decode(data: bytes, pos: int, end: int, table: bool) -> Any:
    """The entries of a table (``table``) or the values of an array in ``data[pos:end]``."""
    root: Any = FieldTable() if table else []
    container, limit, in_table = root, end, table
    stack: list[tuple[Any, int, bool]] = []
    name: Any = None
    while True:
        if pos == limit:
            if not stack:
                return root
            container, limit, in_table = stack.pop()
            continue
        if in_table:
            name_end = pos + 1 + data[pos]
            if name_end >= limit:
                raise FieldTableError(f"truncated table entry at {pos}")
            raw = data[pos + 1:name_end]
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                name = raw
            pos = name_end
        tag = data[pos]
        pos += 1
        if tag == _S:  # the common case, inline
            stop = pos + 4 + _U32(data, pos)[0] if pos + 4 <= limit else limit + 1
            if stop > limit:
                raise FieldTableError(f"an 'S' value at {pos} runs past its container")
            raw = data[pos + 4:stop]
            try:
                value = raw.decode("utf-8")
            except UnicodeDecodeError:
                value = LongStrBytes(raw)
            pos = stop
        elif tag == _F or tag == _A:
            if pos + 4 > limit:
                raise FieldTableError(f"truncated length of a {chr(tag)!r} value at {pos}")
            stop = pos + 4 + _U32(data, pos)[0]
            if stop > limit:
                raise FieldTableError(f"a {chr(tag)!r} value at {pos} runs past its container")
            child: Any = FieldTable() if tag == _F else []
            if in_table:
                container._append(name, child)
            else:
                container.append(child)
            stack.append((container, limit, in_table))
            container, limit, in_table = child, stop, tag == _F
            pos += 4
            continue
        else:
            value, pos = _scalar(tag, data, pos, limit)
        if in_table:
            container._append(name, value)
        else:
            container.append(value)


def _container_end(data: bytes, pos: int, end: int | None) -> tuple[int, int]:
    if end is not None:
        return pos, end
    if pos + 4 > len(data):
        raise FieldTableError(f"truncated length at {pos}")
    stop = pos + 4 + _U32(data, pos)[0]
    if stop > len(data):
        raise FieldTableError(f"a table or array at {pos} runs past the data")
    return pos + 4, stop


def decode_table(data: bytes, pos: int = 0, end: int | None = None) -> FieldTable:
    """The table encoded at ``data[pos:]``: its 4-byte size first, unless ``end`` is given,
    in which case ``data[pos:end]`` holds just the entries.

    Raises:
        FieldTableError: not a table in RabbitMQ's dialect.
    """
    pos, end = _container_end(data, pos, end)
    return _decode(data, pos, end, True)


def decode_array(data: bytes, pos: int = 0, end: int | None = None) -> list[Any]:
    """The array encoded at ``data[pos:]`` (as :func:`decode_table`)."""
    pos, end = _container_end(data, pos, end)
    return _decode(data, pos, end, False)


def decode_value(data: bytes, pos: int = 0, end: int | None = None) -> tuple[Any, int]:
    """The field value at ``data[pos:]`` (type octet first) and the offset after it.

    Raises:
        FieldTableError: not a field value in RabbitMQ's dialect, or it runs past ``end``.
    """
    limit = len(data) if end is None else end
    if pos >= limit:
        raise FieldTableError(f"no field value at {pos}")
    tag = data[pos]
    if tag == _F or tag == _A:
        start, stop = _container_end(data, pos + 1, None)
        if stop > limit:
            raise FieldTableError(f"a {chr(tag)!r} value at {pos} runs past its container")
        return _decode(data, start, stop, tag == _F), stop
    return _scalar(tag, data, pos + 1, limit)


def skip_value(data: bytes, pos: int, end: int, check: bool = True) -> int:
    """Where the field value at ``data[pos]`` (type octet first) ends, without decoding it.

    With ``check``, the inside of tables and arrays is walked too, so that a value skipped
    here is known to decode.

    Raises:
        FieldTableError: not a field value, or it runs past ``end``.
    """
    if pos >= end:
        raise FieldTableError(f"no field value at {pos}")
    tag = data[pos]
    size = _SIZES[tag]
    pos += 1
    if size >= 0:
        stop = pos + size
        if stop > end:
            raise FieldTableError(f"truncated {chr(tag)!r} value at {pos}")
        return stop
    if size == -2:
        raise FieldTableError(f"unknown field type {chr(tag)!r} (0x{tag:02x}) at {pos - 1}")
    if pos + 4 > end:
        raise FieldTableError(f"truncated length of a {chr(tag)!r} value at {pos}")
    stop = pos + 4 + _U32(data, pos)[0]
    if stop > end:
        raise FieldTableError(f"a {chr(tag)!r} value at {pos} runs past its container")
    if check and (tag == _F or tag == _A):
        _walk(data, pos + 4, stop, tag == _F)
    return stop


def _walk(data: bytes, pos: int, end: int, table: bool) -> None:
    """Checks the structure of a table's entries (or an array's values) in
    ``data[pos:end]``, nested ones included, building nothing."""
    sizes = _SIZES
    stack: list[tuple[int, bool]] = []
    limit, in_table = end, table
    while True:
        if pos == limit:
            if not stack:
                return
            limit, in_table = stack.pop()
            continue
        if in_table:
            pos += 1 + data[pos]
            if pos >= limit:
                raise FieldTableError(f"truncated table entry before {pos}")
        tag = data[pos]
        size = sizes[tag]
        pos += 1
        if size >= 0:
            pos += size
            if pos > limit:
                raise FieldTableError(f"truncated {chr(tag)!r} value before {pos}")
            continue
        if size == -2:
            raise FieldTableError(f"unknown field type {chr(tag)!r} (0x{tag:02x}) at {pos - 1}")
        if pos + 4 > limit:
            raise FieldTableError(f"truncated length of a {chr(tag)!r} value at {pos}")
        stop = pos + 4 + _U32(data, pos)[0]
        if stop > limit:
            raise FieldTableError(f"a {chr(tag)!r} value at {pos} runs past its container")
        if tag == _F or tag == _A:
            stack.append((limit, in_table))
            limit, in_table = stop, tag == _F
            pos += 4
        else:
            pos = stop


def entry_spans(data: bytes, pos: int, end: int, check: bool = True
                ) -> list[tuple[Any, int, int]]:
    """Each entry of the table whose entries fill ``data[pos:end]``, as ``(name, start,
    end)``: ``data[start:end]`` is the whole entry, name included. ``check``: as
    :func:`skip_value`.

    Raises:
        FieldTableError: not a table in RabbitMQ's dialect.
    """
    spans = []
    while pos < end:
        start = pos
        name_end = pos + 1 + data[pos]
        if name_end >= end:
            raise FieldTableError(f"truncated table entry at {pos}")
        pos = skip_value(data, name_end, end, check)
        spans.append((_text(data[start + 1:name_end]), start, pos))
    return spans


def select_entries(data: bytes, pos: int, end: int, names: Mapping[bytes, Any]
                   ) -> dict[Any, Any]:
    """The values of the entries called one of ``names`` in the table whose entries fill
    ``data[pos:end]``, the first entry of a repeated name; every other entry is checked,
    not decoded.

    Args:
        names: encoded name -> the key to give its value (e.g. ``{b"CC": "CC"}``).

    Raises:
        FieldTableError: not a table in RabbitMQ's dialect.
    """
    found: dict[Any, Any] = {}
    sizes = _SIZES
    while pos < end:
        name_end = pos + 1 + data[pos]
        if name_end >= end:
            raise FieldTableError(f"truncated table entry at {pos}")
        key = names.get(data[pos + 1:name_end]) if names else None
        if key is not None and key not in found:
            found[key], pos = decode_value(data, name_end, end)
            continue
        tag = data[name_end]
        size = sizes[tag]
        if size >= 0:  # the common cases, inline: a fixed-size value, a string
            pos = name_end + 1 + size
        elif tag == _S or tag == _X:
            pos = name_end + 5 + _U32(data, name_end + 1)[0] if name_end + 5 <= end \
                else end + 1
        else:
            pos = skip_value(data, name_end, end)
        if pos > end:
            raise FieldTableError(f"truncated {chr(tag)!r} value before {pos}")
    return found


# -- encoding -----------------------------------------------------------------------------------
def encoded_name(name: Any) -> bytes:
    """A table entry's name as a short string (length octet first).

    Raises:
        FieldTableError: not a ``str`` or ``bytes``, or longer than 255 bytes.
    """
    if isinstance(name, str):
        try:
            raw = name.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise FieldTableError(f"table entry name {name!r} is not UTF-8: {exc}") from None
    elif isinstance(name, (bytes, bytearray)):
        raw = bytes(name)
    else:
        raise FieldTableError(f"table entry name must be a str, not {type(name).__name__}")
    if len(raw) > 255:
        raise FieldTableError(f"table entry name of {len(raw)} bytes (at most 255)")
    return bytes((len(raw),)) + raw


# type letter -> (type octet, pack) of the fixed-size types
_PACK = {tag: (tag.encode(), struct.Struct(">" + code).pack) for tag, code in (
    ("b", "b"), ("B", "B"), ("s", "h"), ("u", "H"), ("I", "i"), ("i", "I"), ("l", "q"),
    ("L", "q"), ("d", "d"), ("T", "Q"), ("t", "B"), ("f", "f"))}
_PLAIN_TYPES = (
    (bool, "t"), (str, "S"), (float, "d"), (decimal.Decimal, "D"), (datetime.datetime, "T"),
    ((bytes, bytearray, memoryview), "x"), (type(None), "V"), (Mapping, "F"),
    ((list, tuple), "A"),
)


def _pack(tag: str, value: Any) -> bytes:
    octet, pack = _PACK[tag]
    try:
        return octet + pack(value)
    except struct.error as exc:
        raise FieldTableError(f"{value!r} does not fit an AMQP {tag!r} value: {exc}") from None


def _scalar_bytes(value: Any, finite: bool = False) -> bytes | None:
    """``value`` encoded (type octet first), or None for a table or an array; ``finite``
    refuses NaN and infinities."""
    cls = value.__class__
    if cls is str:
        try:
            raw = value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise FieldTableError(f"string {value[:40]!r} is not UTF-8: {exc}") from None
        return b"S" + _P32(len(raw)) + raw
    if cls is bool:
        return b"t\x01" if value else b"t\x00"
    if cls is int:
        if _I32_MIN <= value <= _I32_MAX:
            return _pack("I", value)
        return _pack("l", value)
    if cls is float:
        if finite and not math.isfinite(value):
            raise FieldTableError(_NOT_FINITE.format(value))
        return _pack("d", value)
    if value is None:
        return b"V"
    tag = getattr(cls, "amqp_type", None)
    if tag is not None:
        if finite and tag == "f" and not math.isfinite(value):
            raise FieldTableError(_NOT_FINITE.format(value))
        if tag == "S":
            return b"S" + _P32(len(value)) + value
        if tag == "f":
            bits = getattr(value, "bits", None)
            if bits is not None and math.isnan(value):
                return b"f" + bits
        return _pack(tag, value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        return b"x" + _P32(len(raw)) + raw
    if isinstance(value, (Mapping, list, tuple)):
        return None
    if isinstance(value, bool):
        return b"t\x01" if value else b"t\x00"
    if isinstance(value, int):
        return _scalar_bytes(int(value))
    if isinstance(value, float):
        return _scalar_bytes(float(value), finite)
    if isinstance(value, str):
        return _scalar_bytes(str(value))
    if isinstance(value, decimal.Decimal):
        return _decimal(value)
    if isinstance(value, datetime.datetime):
        return _pack("T", calendar.timegm(value.utctimetuple()))
    raise FieldTableError(f"no AMQP field type for a {type(value).__name__}")


_NOT_FINITE = ("float {!r}: RabbitMQ closes the connection on a NaN or infinite header value "
               "(541 INTERNAL_ERROR)")


def _decimal(value: decimal.Decimal) -> bytes:
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise FieldTableError(f"decimal {value} has no AMQP encoding")
    number = int("".join(map(str, digits)) or "0")
    if exponent > 0:
        number *= 10 ** exponent
        exponent = 0
    if sign and number:
        raise FieldTableError(f"decimal {value} is negative: RabbitMQ reads the value of an "
                              "AMQP decimal as unsigned")
    if -exponent > 255 or number >= 1 << 32:
        raise FieldTableError(f"decimal {value} does not fit an AMQP decimal (scale at most "
                              "255, value below 2**32)")
    return b"D" + bytes((-exponent,)) + _P32(number)


def _entries_of(table: Any) -> Iterable[tuple[Any, Any]]:
    if isinstance(table, FieldTable) and table._entries is not None:
        return table._entries
    return table.items()


def _encode(root: Any, table: bool, finite: bool) -> list[bytes]:
    """The encoded entries (``table``) or values of ``root``, as pieces; iterative, so that
    any nesting depth encodes."""
    pieces: list[bytes] = []
    total = 0
    # per open container: its items' iterator, whether a table, its size slot, its start
    stack: list[tuple[Any, bool, int, int]] = []
    items = iter(_entries_of(root) if table else root)
    in_table = table
    slot = -1
    start = 0
    while True:
        descended = False
        for item in items:
            if in_table:
                name, value = item
                head = encoded_name(name)
                pieces.append(head)
                total += len(head)
            else:
                value = item
            encoded = _scalar_bytes(value, finite)
            if encoded is not None:
                pieces.append(encoded)
                total += len(encoded)
                continue
            child_table = isinstance(value, Mapping)
            pieces.append(b"F" if child_table else b"A")
            pieces.append(b"")  # the size, once known
            total += 5
            stack.append((items, in_table, slot, start))
            items = iter(_entries_of(value) if child_table else value)
            in_table, slot, start = child_table, len(pieces) - 1, total
            descended = True
            break
        if descended:
            continue
        if not stack:
            return pieces
        pieces[slot] = _P32(total - start)
        items, in_table, slot, start = stack.pop()


def encode_entries(table: Mapping[Any, Any] | Iterable[tuple[Any, Any]],
                   finite_floats: bool = False) -> bytes:
    """The encoded entries of ``table`` (a mapping, or ``(name, value)`` pairs), without the
    table's size.

    Args:
        finite_floats: refuse NaN and infinite floats, as anything published to RabbitMQ
            must: its parser has no such floats and closes the connection (541
            INTERNAL_ERROR, seen on 3.10.8 and 4.0.5), so no table it delivers holds one.

    Raises:
        FieldTableError: a name or a value has no encoding.
    """
    if _NATIVE_PLAIN is not None:
        plain = _NATIVE_PLAIN(table, finite_floats)  # None unless a plain dict
        if plain is not None:
            return plain
    if not isinstance(table, Mapping):
        table = FieldTable.from_entries(table)
    return b"".join(_encode(table, True, finite_floats))


def encode_table(table: Mapping[Any, Any] | Iterable[tuple[Any, Any]],
                 finite_floats: bool = False) -> bytes:
    """``table`` encoded as a field table: its 4-byte size, then its entries (see
    :func:`encode_entries`)."""
    entries = encode_entries(table, finite_floats)
    return _P32(len(entries)) + entries


def encode_value(value: Any, finite_floats: bool = False) -> bytes:
    """``value`` encoded as a field value, type octet first (``finite_floats``: see
    :func:`encode_entries`).

    Raises:
        FieldTableError: ``value`` (or something inside it) has no encoding.
    """
    encoded = _scalar_bytes(value, finite_floats)
    if encoded is not None:
        return encoded
    table = isinstance(value, Mapping)
    inside = b"".join(_encode(value, table, finite_floats))
    return (b"F" if table else b"A") + _P32(len(inside)) + inside


def selection(names: Collection[str]) -> dict[bytes, str]:
    """The ``names`` argument of :func:`select_entries` that selects these ``str`` names."""
    return {name.encode("utf-8"): name for name in names}
