"""AMQP 0-9-1 frame scanning for the proxy: the native scanner, or its pure-Python twin.

A :class:`FrameScanner` finds, in a connection's receive buffer, the next frame the proxy has
to look at: a method frame of one of its stop methods, or any frame on one of the channels
given to :meth:`~FrameScanner.scan`. Every frame before it passes on as it is, so those
frames cost no Python on the native path (``src_c/amqp_frames.c``). For a ``basic.publish`` it
also finds the exchange name and, when the message's content header and body frames follow at
once and complete, where they end, so that a whole message is handled at one stop.

The twin (:class:`PyFrameScanner`) gives the same answers; it is used with the pure-Python
core (``RTROUTE_PURE=1`` or no extension, see :mod:`rtroute.core`) and is the oracle of the
differential tests.
"""
from __future__ import annotations

import struct
from collections.abc import Iterable

from rtroute.core import IMPLEMENTATION

__all__ = ["SCAN_BAD_END", "SCAN_MORE", "SCAN_STOP", "SCAN_TOO_LARGE", "FrameScanner",
           "PyFrameScanner", "publish_message", "py_publish_message"]

SCAN_STOP, SCAN_MORE, SCAN_TOO_LARGE, SCAN_BAD_END = 1, 0, -1, -2
_FRAME_METHOD, _FRAME_HEADER, _FRAME_BODY, _FRAME_END = 1, 2, 3, 0xCE
_BASIC_PUBLISH = 60 << 16 | 40
_BASIC_DELIVER = 60 << 16 | 60
DELIVERIES_PER_CALL = 256  # the most deliveries one call of ``deliveries`` gives
_U16 = struct.Struct(">H").unpack_from
_U32 = struct.Struct(">I").unpack_from
_U64 = struct.Struct(">Q").unpack_from


class PyFrameScanner:
    """The pure-Python twin of the native ``FrameScanner`` (same arguments and answers).

    Args:
        methods: the method ids (``class << 16 | method``) whose frames stop a scan.
        check_end: every frame must end with 0xCE (a client's), else the scan says so.
    """

    def __init__(self, methods: Iterable[int], check_end: bool = False) -> None:
        self._methods = frozenset(methods)
        self._check_end = check_end

    def _whole(self, buf: bytes, pos: int, limit: int) -> int:
        """The end of the complete, well-formed frame at ``pos``, else 0."""
        if len(buf) - pos < 7:
            return 0
        size = _U32(buf, pos + 3)[0] + 8
        if (limit and size > limit) or size > len(buf) - pos:
            return 0
        if self._check_end and buf[pos + size - 1] != _FRAME_END:
            return 0
        return pos + size

    def _body_end(self, buf: bytes, pos: int, channel: int, remaining: int, limit: int) -> int:
        """The end of the body frames of ``channel`` that follow at once from ``pos`` and
        carry exactly ``remaining`` bytes, each whole and within the rules; 0 if they do not."""
        while remaining:
            frame_end = self._whole(buf, pos, limit)
            if not frame_end or buf[pos] != _FRAME_BODY or _U16(buf, pos + 1)[0] != channel:
                return 0
            payload = frame_end - pos - 8
            if payload > remaining:
                return 0
            remaining -= payload
            pos = frame_end
        return pos

    def _publish(self, buf: bytes, start: int, end: int, channel: int,
                 limit: int) -> tuple[bytes | None, int, int, bytes | None]:
        payload_end = end - 1
        if start + 13 >= payload_end:
            return None, 0, 0, None
        name_end = start + 14 + buf[start + 13]
        if name_end >= payload_end or name_end + 1 + buf[name_end] >= payload_end:
            return None, 0, 0, None
        name = bytes(buf[start + 14:name_end])
        header_end = self._whole(buf, end, limit)
        if not header_end or buf[end] != _FRAME_HEADER or _U16(buf, end + 1)[0] != channel \
                or header_end - end < 8 + 14:
            return name, 0, 0, None
        pos = self._body_end(buf, header_end, channel, _U64(buf, end + 11)[0], limit)
        if not pos:
            return name, 0, 0, None
        return name, header_end, pos, bytes(buf[start:header_end])

    def scan(self, buf: bytes | bytearray | memoryview, pos: int, limit: int,
             channels: tuple[int, ...]) -> tuple[int, ...]:
        """See the native ``FrameScanner.scan``: ``(result, start, end, type, channel,
        method, name, header_end, content_end, head)``."""
        if pos < 0 or limit < 0:
            raise ValueError("pos and limit must not be negative")
        length = len(buf)
        while pos <= length and length - pos >= 7:
            size = _U32(buf, pos + 3)[0] + 8
            if limit and size > limit:
                return SCAN_TOO_LARGE, pos, pos + size, 0, 0, 0, None, 0, 0, None
            if size > length - pos:
                break
            end = pos + size
            if self._check_end and buf[end - 1] != _FRAME_END:
                return SCAN_BAD_END, pos, end, 0, 0, 0, None, 0, 0, None
            kind = buf[pos]
            channel = _U16(buf, pos + 1)[0]
            method = _U32(buf, pos + 7)[0] if kind == _FRAME_METHOD and size >= 12 else 0
            if channel in channels or (kind == _FRAME_METHOD and method in self._methods):
                publish = self._publish(buf, pos, end, channel, limit) \
                    if kind == _FRAME_METHOD and method == _BASIC_PUBLISH else \
                    (None, 0, 0, None)
                return (SCAN_STOP, pos, end, kind, channel, method, *publish)
            pos = end
        start = min(pos, length)
        return SCAN_MORE, start, start, 0, 0, 0, None, 0, 0, None

    def repeats(self, buf: bytes | bytearray | memoryview, pos: int, limit: int, head: bytes,
                replacement: bytes) -> tuple[int, int, bytes]:
        """See the native ``FrameScanner.repeats``: ``(end, count, data)``."""
        if pos < 0 or limit < 0:
            raise ValueError("pos and limit must not be negative")
        out: list[bytes] = []
        count = 0
        if len(head) < 8 + 8 + 14:
            return pos, 0, b""
        header_at = 8 + _U32(head, 3)[0]
        if header_at > len(head) - (8 + 14) or head[header_at] != _FRAME_HEADER or \
                len(head) - header_at != 8 + _U32(head, header_at + 3)[0]:
            return pos, 0, b""
        channel = _U16(head, 1)[0]
        body_size = _U64(head, header_at + 11)[0]
        while len(buf) - pos >= len(head) and buf[pos:pos + len(head)] == head:
            end = self._body_end(buf, pos + len(head), channel, body_size, limit)
            if not end:
                break
            out += (replacement, bytes(buf[pos + len(head):end]))
            count += 1
            pos = end
        return pos, count, b"".join(out)

    def renames(self, buf: bytes | bytearray | memoryview, pos: int, limit: int, channel: int,
                name: bytes, replacement: bytes, most: int) -> tuple[int, int, bytes]:
        """See the native ``FrameScanner.renames``: ``(end, count, data)``."""
        if pos < 0 or limit < 0 or most < 0:
            raise ValueError("pos, limit and most must not be negative")
        out: list[bytes] = []
        count = 0
        if not replacement or len(replacement) != 1 + replacement[0]:
            return pos, 0, b""
        while count < most:
            publish_end = self._whole(buf, pos, limit)
            if not publish_end or buf[pos] != _FRAME_METHOD or _U16(buf, pos + 1)[0] != channel \
                    or publish_end - pos < 12 or _U32(buf, pos + 7)[0] != _BASIC_PUBLISH:
                break
            # its fields within the frame and its content complete, as scan finds them
            found, _, end, _ = self._publish(buf, pos, publish_end, channel, limit)
            if found != name or not end or buf[publish_end + 19] & 0x20:
                break
            name_end = pos + 14 + buf[pos + 13]
            key_end = name_end + 1 + buf[name_end]
            key = bytes(buf[name_end + 1:key_end])
            if b"*" in key or b"#" in key:
                break
            fields = bytes(buf[name_end:key_end + 1])  # routing key, bits
            out += (struct.pack(">BHI", _FRAME_METHOD, channel, 6 + len(replacement) + len(fields)),
                    bytes(buf[pos + 7:pos + 13]), replacement, fields, b"\xce",
                    bytes(buf[publish_end:end]))
            count += 1
            pos = end
        return pos, count, b"".join(out)

    def deliveries(self, buf: bytes | bytearray | memoryview, pos: int, limit: int,
                   channel: int) -> tuple[int, list[tuple]]:
        """See the native ``FrameScanner.deliveries``: ``(end, deliveries)``."""
        if pos < 0 or limit < 0:
            raise ValueError("pos and limit must not be negative")
        out: list[tuple] = []
        while len(out) < DELIVERIES_PER_CALL:
            deliver_end = self._whole(buf, pos, limit)
            if not deliver_end or buf[pos] != _FRAME_METHOD or \
                    _U16(buf, pos + 1)[0] != channel or deliver_end - pos < 12 or \
                    _U32(buf, pos + 7)[0] != _BASIC_DELIVER:
                break
            payload_end = deliver_end - 1
            tag_at = pos + 12 + buf[pos + 11] if pos + 11 < payload_end else payload_end
            exchange_at = tag_at + 9
            if exchange_at >= payload_end:
                break
            key_at = exchange_at + 1 + buf[exchange_at]
            if key_at >= payload_end or key_at + 1 + buf[key_at] > payload_end:
                break
            key_end = key_at + 1 + buf[key_at]
            header_end = self._whole(buf, deliver_end, limit)
            if not header_end or buf[deliver_end] != _FRAME_HEADER or \
                    _U16(buf, deliver_end + 1)[0] != channel or header_end - deliver_end < 22:
                break
            end = self._body_end(buf, header_end, channel, _U64(buf, deliver_end + 11)[0], limit)
            if not end:
                break
            parts = []
            at = deliver_end
            while at < end:
                frame_end = at + 8 + _U32(buf, at + 3)[0]
                parts.append(bytes(buf[at:frame_end]))
                at = frame_end
            out.append((_U64(buf, tag_at)[0], bytes(buf[exchange_at:key_at]),
                        bytes(buf[key_at:key_end]),
                        bytes(buf[pos + 12:tag_at]).decode("utf-8", "replace"),
                        bool(buf[tag_at + 8] & 1), parts, end))
            pos = end
        return pos, out


def py_publish_message(channel: int, exchange: bytes, routing_key: bytes, bits: int,
                       parts: list[bytes]) -> bytes:
    """The pure-Python twin of the native ``publish_message``: one publish's frames on
    ``channel`` (the ``basic.publish`` to the short strings ``exchange`` and ``routing_key``
    with ``bits``, then the whole frames ``parts`` moved to ``channel``), as one ``bytes``.

    Raises:
        ValueError: a short string whose length octet is not its length, or a part shorter
            than a frame.
    """
    if not exchange or exchange[0] != len(exchange) - 1 or not routing_key or \
            routing_key[0] != len(routing_key) - 1:
        raise ValueError("exchange and routing_key must be short strings")
    if not 0 <= bits <= 255:
        raise OverflowError("bits must be an octet")
    if any(len(part) < 8 for part in parts):
        raise ValueError("a part shorter than a frame")
    payload = b"".join((_PUBLISH_HEAD, exchange, routing_key, bytes((bits,))))
    on = struct.pack(">H", channel)
    return b"".join((struct.pack(">BHI", _FRAME_METHOD, channel, len(payload)), payload,
                     b"\xce", *(part[:1] + on + part[3:] for part in parts)))


_PUBLISH_HEAD = struct.pack(">IH", _BASIC_PUBLISH, 0)  # basic.publish, ticket 0

if IMPLEMENTATION == "native":
    from rtroute.core._native import FrameScanner, publish_message
else:
    FrameScanner = PyFrameScanner  # type: ignore[misc,assignment]
    publish_message = py_publish_message
