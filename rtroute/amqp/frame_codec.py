"""AMQP 0-9-1 frames as bytes: the one framing module. Pure: no pika, no I/O.

Frame layout: ``type (1) | channel (2) | size (4) | payload (size) | 0xCE``. A method frame's
payload starts with its class id and method id (two ``u16``, taken here as one ``u32``:
:func:`rtroute.amqp.methods.method_id`), then its fields; a content header frame's payload holds the class id, the
weight, the body size (``u64``) and the property flags and values; body frames carry the body.

Who builds on it: :mod:`rtroute.amqp.frames` (the sidecar's, the shovel's and the publisher's
fast path through pika: deliveries read and publishes written as frames),
:mod:`rtroute.proxy.wire` (the methods the proxy reads and rewrites, without pika); the
native :mod:`rtroute.core.frames` scanner walks the same layout.

The ``frame_max`` rule, for every part of rtroute (one rule, here): a frame is taken on a
connection of ``frame_max`` when its *payload* is at most ``frame_max`` bytes
(:func:`frame_fits`). That is what RabbitMQ takes: the AMQP spec counts the 8 bytes of frame
head and end octet in ``frame_max``, but ``rabbit_reader`` forgives them
(``FRAME_SIZE_FUDGE``), and refuses only a larger payload (``frame_too_large``, naming
``frame_max - 8`` as its limit). Checked on 3.10.8 and 4.3.6 with ``frame_max`` 4096 and
8192: a content header or body frame of ``frame_max`` payload bytes is taken, one of
``frame_max + 1`` closes the connection. So a message RabbitMQ took from a publisher can always
be republished, and a client of the proxy is refused only where the broker would refuse it.
Body frames rtroute cuts itself carry at most ``frame_max - 8`` bytes
(:func:`body_payload_max`), as RabbitMQ and pika cut them: within the spec, for any reader.
"""
from __future__ import annotations

import struct

from rtroute.amqp.methods import BASIC_PUBLISH

__all__ = [
    "BASIC_PUBLISH",
    "FRAME_BODY",
    "FRAME_END",
    "FRAME_END_BYTE",
    "FRAME_HEADER",
    "FRAME_HEAD_AND_END",
    "FRAME_HEARTBEAT",
    "FRAME_METHOD",
    "HEAD",
    "U16",
    "U32",
    "U64",
    "PublishFrames",
    "body_frames",
    "body_of",
    "body_payload_max",
    "body_size",
    "content_after",
    "content_header_size",
    "frame_fits",
    "frame_size_limit",
    "method_frame",
    "on_channel",
    "publish_frame",
    "rechannel",
    "short",
    "shortstr",
]

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = 0xCE
FRAME_END_BYTE = b"\xce"
HEAD = struct.Struct(">BHI")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
U64 = struct.Struct(">Q")
_U32 = U32.unpack_from
_U64 = U64.unpack_from
_CHANNEL = U16.pack

#: What a frame adds to its payload: type, channel and size (7 bytes), and the end octet.
FRAME_HEAD_AND_END = 8


def frame_fits(frame_size: int, frame_max: int) -> bool:
    """Whether a frame of ``frame_size`` bytes (head and end octet included) is taken on a
    connection of ``frame_max`` (0: no limit): its payload is at most ``frame_max`` (the
    module docstring's rule, RabbitMQ's)."""
    return not frame_max or frame_size - FRAME_HEAD_AND_END <= frame_max


def frame_size_limit(frame_max: int) -> int:
    """The largest frame (head and end octet included) taken on a connection of ``frame_max``
    (:func:`frame_fits`): ``frame_max + 8``, or 0 for no limit."""
    return frame_max + FRAME_HEAD_AND_END if frame_max else 0


def body_payload_max(frame_max: int) -> int:
    """The most body bytes one body frame rtroute cuts carries on a connection of
    ``frame_max``: ``frame_max - 8``, as RabbitMQ and pika cut bodies (within the spec)."""
    return frame_max - FRAME_HEAD_AND_END


_PUBLISH = U32.pack(BASIC_PUBLISH) + b"\x00\x00"  # basic.publish, ticket 0


def short(data: bytes | memoryview, pos: int) -> tuple[bytes, int]:
    """The short string at ``pos`` (without its length octet) and the position after it."""
    end = pos + 1 + data[pos]
    return bytes(data[pos + 1:end]), end


def shortstr(value: str | bytes) -> bytes:
    """``value`` as an AMQP short string (length octet + bytes; a ``str`` as UTF-8).

    Raises:
        ValueError: longer than 255 bytes.
    """
    data = value.encode("utf-8") if isinstance(value, str) else value
    if len(data) > 255:
        raise ValueError(f"short string of {len(data)} bytes (at most 255)")
    return bytes((len(data),)) + data


def method_frame(channel: int, method: int, fields: bytes) -> bytes:
    """A method frame: ``method`` as :mod:`rtroute.amqp.methods` has it, ``fields`` encoded."""
    payload = U32.pack(method) + fields
    return HEAD.pack(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END_BYTE


def publish_frame(channel: int, exchange: bytes, routing_key: bytes, mandatory: bool | int
                  ) -> bytes:
    """A ``basic.publish`` method frame; ``exchange`` and ``routing_key`` are short strings;
    ``mandatory`` a flag, or the whole bits octet as an ``int`` (mandatory 1, immediate 2)."""
    bits = bytes((int(mandatory),))
    payload = b"".join((_PUBLISH, exchange, routing_key, bits))
    return HEAD.pack(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END_BYTE


class PublishFrames:
    """The ``basic.publish`` method frames of one channel, each built once per (exchange,
    routing key): given as ``str`` or as ready short strings. At ``limit`` entries the cache
    starts over."""

    __slots__ = ("_frames", "_limit", "channel", "mandatory")

    def __init__(self, channel: int, limit: int, mandatory: bool = True) -> None:
        self.channel = channel
        self.mandatory = mandatory
        self._limit = limit
        self._frames: dict[tuple[str | bytes, str | bytes], bytes] = {}

    def get(self, exchange: str | bytes, routing_key: str | bytes) -> bytes:
        frame = self._frames.get((exchange, routing_key))
        if frame is None:
            if len(self._frames) >= self._limit:
                self._frames.clear()
            frame = self._frames[(exchange, routing_key)] = publish_frame(
                self.channel, _short(exchange), _short(routing_key), self.mandatory)
        return frame


def _short(text: str | bytes) -> bytes:
    return shortstr(text) if isinstance(text, str) else text


def on_channel(frame: bytes, channel: int) -> bytes:
    """``frame`` moved to ``channel``."""
    return frame[:1] + _CHANNEL(channel) + frame[3:]


def rechannel(parts: list[bytes], channel: int, frame_max: int) -> list[bytes]:
    """The content frames ``parts`` (header, bodies) for another channel and frame size."""
    out = [on_channel(parts[0], channel)]
    if all(frame_fits(len(p), frame_max) for p in parts[1:]):
        out += [on_channel(p, channel) for p in parts[1:]]
        return out
    return out + body_frames(channel, body_of(parts), frame_max)


def body_frames(channel: int, body: bytes, frame_max: int) -> list[bytes]:
    """``body`` as body frames of at most ``frame_max`` bytes each (none for an empty body;
    see :func:`body_payload_max`)."""
    chunk = body_payload_max(frame_max)
    if len(body) <= chunk:
        return [HEAD.pack(FRAME_BODY, channel, len(body)) + body + FRAME_END_BYTE] \
            if body else []
    return [HEAD.pack(FRAME_BODY, channel, len(piece)) + piece + FRAME_END_BYTE
            for piece in (body[i:i + chunk] for i in range(0, len(body), chunk))]


def content_after(head: bytes, channel: int, body: bytes, frame_max: int
                  ) -> tuple[bytes, int]:
    """``head`` (a publish's method and content header frames) followed by ``body``'s body
    frames, as one ``bytes``, and the number of frames in it."""
    if not body:
        return head, 2
    # one body frame (body_payload_max, inline: every publish comes here): no list to build
    if len(body) <= frame_max - FRAME_HEAD_AND_END:
        return head + HEAD.pack(FRAME_BODY, channel, len(body)) + body + FRAME_END_BYTE, 3
    chunks = body_frames(channel, body, frame_max)
    return head + b"".join(chunks), 2 + len(chunks)


def content_header_size(data: bytes) -> int:
    """The size, frame head and end included, of the content header frame in ``data``: a
    ``basic.publish`` method frame followed by its content frames, as a window writes them."""
    method_end = 8 + _U32(data, 3)[0]
    return 8 + _U32(data, method_end + 3)[0]


def body_of(parts: list[bytes]) -> bytes:
    """The message body carried by the body frames ``parts[1:]``."""
    if len(parts) == 2:
        return parts[1][7:-1]
    return b"".join(p[7:-1] for p in parts[1:])


def body_size(header: bytes) -> int:
    """The body size a content header frame announces."""
    return _U64(header, 11)[0]
