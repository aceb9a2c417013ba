"""A content header frame's ``CC``, ``BCC`` and BCC-alias arrays, read without decoding the
rest of its headers table, and the frame rewritten with the planned ``BCC``: the native
reader (``src_c/amqp_headers.c``) or its pure-Python twin.

The proxy's publish path reads these three arrays of every message published to an x-rtopic
exchange (its plan depends on nothing else) and sends the frame with ``BCC`` and the alias
left out and the planned ``BCC`` added; a message whose headers change on every publish (a
sequence number, a timestamp) then costs no field-table decoding or encoding in Python.
Anything else (a property flags continuation or the unused flag bit, properties that do not
fill the frame exactly, a malformed table, a ``CC``/``BCC``/
alias that is not an array of ASCII long strings, one of them given twice) reads as None: the
caller takes its general path, which knows every rule (and the broker's refusals).

The twin (:class:`PyHeaderKeys`) gives the same answers; it is used with the pure-Python
core and is the oracle of the differential tests (tests/core/test_header_keys.py).
"""
from __future__ import annotations

import struct

from rtroute.core import IMPLEMENTATION

__all__ = ["HeaderKeys", "PyHeaderKeys"]

_U32 = struct.Struct(">I")
_FLAGS_AT = 19
_CONTENT_TYPE, _CONTENT_ENCODING, _HEADERS, _CONTINUATION = 0x8000, 0x4000, 0x2000, 0x0001
_UNUSED = 0x0002
# the properties after headers, in flag order: (flag, size; 0: a short string)
_LATER = ((0x1000, 1), (0x0800, 1), (0x0400, 0), (0x0200, 0), (0x0100, 0), (0x0080, 0),
          (0x0040, 8), (0x0020, 0), (0x0010, 0), (0x0008, 0), (0x0004, 0))
# type octet -> size of a fixed-size value; -1: a 4-byte length then that many bytes
_SIZE = {ord("t"): 1, ord("b"): 1, ord("B"): 1, ord("s"): 2, ord("u"): 2, ord("I"): 4,
         ord("i"): 4, ord("f"): 4, ord("D"): 5, ord("l"): 8, ord("L"): 8, ord("d"): 8,
         ord("T"): 8, ord("V"): 0, ord("S"): -1, ord("x"): -1, ord("A"): -1, ord("F"): -1}
_MAX_DEPTH = 64


class _General(Exception):
    """Not the simple case: the general path reads this frame."""


def _well_formed(data: bytes, pos: int, end: int, table: bool) -> None:
    """Raises _General unless the values (entries if ``table``) in data[pos:end] are well
    formed, nested ones included (at most 64 deep)."""
    stack: list[tuple[int, bool]] = []
    while True:
        if pos == end:
            if not stack:
                return
            end, table = stack.pop()
            continue
        if table:
            pos += 1 + data[pos]
            if pos >= end:
                raise _General
        tag = data[pos]
        pos += 1
        size = _SIZE.get(tag, -2)
        if size >= 0:
            if size > end - pos:
                raise _General
            pos += size
            continue
        if size == -2 or end - pos < 4 or _U32.unpack_from(data, pos)[0] > end - pos - 4:
            raise _General
        stop = pos + 4 + _U32.unpack_from(data, pos)[0]
        if tag in (0x41, 0x46):  # A, F
            if len(stack) == _MAX_DEPTH:
                raise _General
            stack.append((end, table))
            end, table, pos = stop, tag == 0x46, pos + 4
        else:
            pos = stop


def _later_properties_fill(f: bytes, pos: int, end: int, flags: int) -> None:
    """Raises _General unless the properties after ``headers`` fill f[pos:end] exactly."""
    for flag, size in _LATER:
        if flags & flag:
            if pos >= end:
                raise _General
            size = size or 1 + f[pos]
            if size > end - pos:
                raise _General
            pos += size
    if pos != end:
        raise _General


def _strings(data: bytes, pos: int, end: int, max_entry: int) -> tuple[str, ...]:
    found = []
    while pos < end:
        if data[pos] != 0x53 or end - pos - 1 < 4:  # S
            raise _General
        size = _U32.unpack_from(data, pos + 1)[0]
        pos += 5
        raw = data[pos:pos + size]
        if size > end - pos or size > max_entry or not raw.isascii():
            raise _General
        found.append(raw.decode("ascii"))
        pos += size
    return tuple(found)


class PyHeaderKeys:
    """The pure-Python twin of the native ``HeaderKeys`` (same answers)."""

    __slots__ = ("_entries", "_frame", "_table_at", "_table_end", "alias", "bcc", "cc",
                 "has_table", "table_size")

    @staticmethod
    def read(frame: bytes, alias: bytes, max_entry: int) -> PyHeaderKeys | None:
        """The arrays of the whole content header ``frame`` (``alias``: the alias header's
        name), or None when the frame is not the simple case."""
        self = PyHeaderKeys()
        try:
            self._read(frame, alias, max_entry)
        except _General:
            return None
        return self

    def _read(self, f: bytes, alias: bytes, max_entry: int) -> None:
        size = len(f)
        if size < _FLAGS_AT + 3 or f[0] != 2 or f[-1] != 0xCE or \
                _U32.unpack_from(f, 3)[0] != size - 8:
            raise _General
        flags = f[_FLAGS_AT] << 8 | f[_FLAGS_AT + 1]
        if flags & (_CONTINUATION | _UNUSED):
            raise _General
        end, pos = size - 1, _FLAGS_AT + 2
        for flag in (_CONTENT_TYPE, _CONTENT_ENCODING):
            if flags & flag:
                if pos >= end or f[pos] + 1 > end - pos:
                    raise _General
                pos += 1 + f[pos]
        self._frame, self._entries = f, {}
        self.cc = self.bcc = self.alias = None
        self._table_at = self._table_end = pos
        self.has_table = bool(flags & _HEADERS)
        self.table_size = 0
        if not self.has_table:
            _later_properties_fill(f, pos, end, flags)
            return
        if end - pos < 4 or _U32.unpack_from(f, pos)[0] > end - pos - 4:
            raise _General
        self._table_end = pos + 4 + _U32.unpack_from(f, pos)[0]
        self.table_size = self._table_end - pos
        _later_properties_fill(f, self._table_end, end, flags)
        _well_formed(f, pos + 4, self._table_end, True)
        names = {b"CC": "cc", b"BCC": "bcc"}
        if alias:
            names.setdefault(alias, "alias")
        pos += 4
        while pos < self._table_end:
            start = pos
            name = f[pos + 1:pos + 1 + f[pos]]
            pos += 1 + f[pos]
            tag = f[pos]
            pos += 1
            size = _SIZE[tag]
            stop = pos + size if size >= 0 else pos + 4 + _U32.unpack_from(f, pos)[0]
            which = names.get(name)
            if which is not None:
                if which in self._entries or tag != 0x41:  # twice, or not an array
                    raise _General
                setattr(self, which, _strings(f, pos + 4, stop, max_entry))
                self._entries[which] = (start, stop)
            pos = stop

    @property
    def drops(self) -> bool:
        """The frame holds ``BCC`` or the alias (to be left out of what is sent)."""
        return "bcc" in self._entries or "alias" in self._entries

    def rewrite(self, entry: bytes) -> bytes:
        """The frame without its ``BCC`` and alias entries, with ``entry`` (one encoded table
        entry, or ``b""``) added at the end of its headers table."""
        f, at, end = self._frame, self._table_at, self._table_end
        if not self.has_table and not entry:
            return f
        drops = sorted(span for name, span in self._entries.items() if name != "cc")
        kept, pos = [], at + 4 if self.has_table else at
        for start, stop in drops:
            kept.append(f[pos:start])
            pos = stop
        kept += (f[pos:end], entry)
        table = b"".join(kept)
        head = bytearray(f[:at])
        head[_FLAGS_AT] |= _HEADERS >> 8
        data = b"".join((head, _U32.pack(len(table)), table, f[end:]))
        return data[:3] + _U32.pack(len(data) - 8) + data[7:]


if IMPLEMENTATION == "native":
    from rtroute.core._native import HeaderKeys
else:
    HeaderKeys = PyHeaderKeys  # type: ignore[misc,assignment]
