"""AMQP 0-9-1 frames through pika: the sidecar's, the shovel's and the publisher's fast path.

A shovel that passes messages through unchanged need not decode them: it reads each
``basic.deliver`` (tag, exchange, routing key) and keeps the content header and body frames as
the source broker sent them, then writes a ``basic.publish`` frame followed by those same
frames to the destination. Properties are decoded only when the shovel must look at or change
them (a selector filter, ``publish_properties``, the forward or timestamp headers).

The publisher confirms of the destination channel are read here too (a ``basic.ack`` is a
fixed 13-byte payload; pika's generic callback dispatch costs more than the rest of a message).
pika stays in charge of everything else (handshake, channels, declarations, ``basic.qos``,
``basic.consume``, acks to the source, returns, heartbeats): :class:`FrameReader` reads what
the connection receives and hands every frame it does not intercept to pika's own frame
dispatch, in order; :func:`emit` writes through the connection's transport as pika does.
Those are pika internals, reached only through :mod:`rtroute.amqp.pika_internals` (which
checks the pika version); :func:`install` checks for them and reports what is missing instead
of misbehaving.

The frames themselves are built and read by :mod:`rtroute.amqp.frame_codec` (no pika); its
names used here are re-exported for the callers of this module.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import pika.exceptions
import pika.spec
from pika.frame import Header, decode_frame

from rtroute.amqp import pika_internals
from rtroute.amqp.frame_codec import (
    FRAME_BODY,
    FRAME_END_BYTE,
    FRAME_HEADER,
    FRAME_METHOD,
    HEAD,
    U16,
    U32,
    U64,
    PublishFrames,
    body_frames,
    body_of,
    body_size,
    content_after,
    content_header_size,
    frame_fits,
    frame_size_limit,
    on_channel,
    publish_frame,
    rechannel,
    shortstr,
)
from rtroute.amqp.methods import BASIC_ACK, BASIC_DELIVER, BASIC_NACK
from rtroute.amqp.pika_internals import coalesce_io, emit
from rtroute.core.frames import FrameScanner

__all__ = [
    "FrameReader",
    "PublishFrames",
    "body_frames",
    "body_of",
    "body_size",
    "content_after",
    "content_header_size",
    "decode_properties",
    "emit",
    "frame_fits",
    "frame_size_limit",
    "header_frame",
    "install",
    "on_channel",
    "properties_frame_size",
    "publish_frame",
    "rechannel",
    "shortstr",
]

LOGGER = logging.getLogger(__name__)

_DELIVER = U32.pack(BASIC_DELIVER)  # a method frame's payload starts with these 4 bytes
# a run of whole deliveries on one channel, each frame ending with 0xCE, in one native call
_DELIVERIES = FrameScanner((), check_end=True).deliveries
_ACK = U32.pack(BASIC_ACK)
_NACK = U32.pack(BASIC_NACK)
_FRAME_HEAD = HEAD
_U16 = U16.unpack_from
_U32 = U32.unpack_from
_U64 = U64.unpack_from
_PROPERTIES_OFFSET = 7 + 12  # frame head + class, weight, body size
FRAME_END = FRAME_END_BYTE  # as bytes here (an int in frame_codec)


OnDelivery = Callable[..., Any]
OnConfirm = Callable[[int, bool, bool], Any]


def properties_frame_size(body_size: int, properties: pika.spec.BasicProperties) -> int:
    """The size of the content header frame that would carry ``properties``.

    Raises:
        Exception: what pika raises for a value it cannot encode.
    """
    return len(Header(0, body_size, properties).marshal())


def decode_properties(header: bytes) -> pika.spec.BasicProperties:
    """The basic properties of a content header frame."""
    properties = pika.spec.BasicProperties()
    properties.decode(header, _PROPERTIES_OFFSET)
    return properties


def header_frame(channel: int, header: bytes, properties: pika.spec.BasicProperties) -> bytes:
    """A content header frame like ``header`` (same body size) with new properties."""
    return Header(channel, _U64(header, 11)[0], properties).marshal()


class FrameReader:
    """What a connection reads, parsed at an offset (pika re-slices the whole buffer after
    every frame, quadratic in the read size), with the shovel's and the sidecar's traffic
    intercepted.

    After :meth:`intercept`, every ``basic.deliver`` on that channel and its content frames go
    to ``on_delivery(delivery_tag, exchange, routing_key, parts)``: the exchange and routing
    key as short strings (length octet included), ``parts`` the header frame and the body
    frames as received; with ``detailed``, also the consumer tag (``str``) and the redelivered
    flag (several consumers on one channel). After :meth:`intercept_confirms`, every
    ``basic.ack``/``basic.nack`` on that channel goes to
    ``on_confirm(delivery_tag, multiple, acked)``. Everything else
    (returns included, which precede the confirm of their publish) goes to pika, in order.
    """

    __slots__ = ("_body_left", "_broken", "_channels", "_confirm_channel", "_connection",
                 "_delivery", "_delivery_channel", "_detailed", "_on_confirm", "_on_delivery",
                 "_parts", "_process")

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._process = pika_internals.frame_processor(connection)
        self._channels: frozenset[int] = frozenset()
        self._delivery_channel = -1
        self._confirm_channel = -1
        self._on_delivery: OnDelivery | None = None
        self._on_confirm: OnConfirm | None = None
        self._delivery: tuple | None = None
        self._parts: list[bytes] = []
        self._body_left = 0
        self._detailed = False
        self._broken = False

    def intercept(self, channel: int, on_delivery: OnDelivery, detailed: bool = False) -> None:
        """Hand deliveries on ``channel`` to ``on_delivery`` from now on (``detailed``: with
        the consumer tag and the redelivered flag). Several channels may be intercepted; they
        share the latest ``on_delivery`` (``detailed`` then tells their consumers apart)."""
        self._channels = self._channels | {channel}
        self._on_delivery = on_delivery
        self._detailed = detailed

    def stop_intercepting(self, channel: int) -> None:
        """Leave the deliveries of ``channel`` to pika again (e.g. it was closed)."""
        self._channels = self._channels - {channel}

    def intercept_confirms(self, channel: int, on_confirm: OnConfirm) -> None:
        """Hand publisher confirms on ``channel`` to ``on_confirm`` from now on."""
        self._confirm_channel = channel
        self._on_confirm = on_confirm

    def __call__(self, data: bytes) -> None:
        if self._broken:
            return  # the stream is being torn down: nothing after a bad frame can be trusted
        connection = self._connection
        pending = pika_internals.unparsed(connection)
        buffer = pending + data if pending else data
        offset = 0
        end = len(buffer)
        watched = self._channels
        confirms = self._confirm_channel
        try:
            while end - offset >= 8:
                frame_end = offset + _U32(buffer, offset + 3)[0] + 8
                if frame_end > end:
                    break
                if buffer[frame_end - 1] != 0xCE:
                    octet = buffer[frame_end - 1]
                    offset = end
                    self._frame_error(octet)
                    return
                channel = _U16(buffer, offset + 1)[0]
                if channel == confirms and buffer[offset] == FRAME_METHOD:
                    method_id = buffer[offset + 7:offset + 11]
                    if method_id == _ACK or method_id == _NACK:
                        tag = _U64(buffer, offset + 11)[0]
                        multiple = bool(buffer[offset + 19] & 1)
                        connection.bytes_received += frame_end - offset
                        offset = frame_end
                        self._on_confirm(tag, multiple, method_id == _ACK)  # type: ignore[misc]
                        continue
                if channel in watched:
                    kind = buffer[offset]
                    if self._delivery is not None and channel != self._delivery_channel:
                        # RabbitMQ writes a message's frames together: a frame of another
                        # channel before this one's content is complete (another delivery
                        # would replace it) means the stream cannot be read as it is
                        offset = end
                        self._frame_error(buffer[frame_end - 1], "interleaved content frames")
                        return
                    if kind == FRAME_BODY and self._delivery is not None:
                        self._parts.append(buffer[offset:frame_end])
                        self._body_left -= frame_end - offset - 8
                        connection.bytes_received += frame_end - offset
                        offset = frame_end
                        if self._body_left <= 0:
                            self._deliver()
                        continue
                    if kind == FRAME_HEADER and self._delivery is not None:
                        self._parts = [buffer[offset:frame_end]]
                        self._body_left = _U64(buffer, offset + 11)[0]
                        connection.bytes_received += frame_end - offset
                        offset = frame_end
                        if self._body_left <= 0:
                            self._deliver()
                        continue
                    if kind == FRAME_METHOD and buffer[offset + 7:offset + 11] == _DELIVER:
                        # the run of whole deliveries from here, read natively; a delivery
                        # whose content is not all here yet is read frame by frame below
                        deliveries = _DELIVERIES(buffer, offset, 0, channel)[1] \
                            if self._delivery is None else None
                        if deliveries:
                            on_delivery = self._on_delivery
                            detailed = self._detailed
                            for tag, exchange, key, consumer_tag, redelivered, parts, at \
                                    in deliveries:
                                connection.bytes_received += at - offset
                                offset = at
                                if detailed:
                                    on_delivery(tag, exchange, key, parts,  # type: ignore[misc]
                                                consumer_tag, redelivered)
                                else:
                                    on_delivery(tag, exchange, key, parts)  # type: ignore[misc]
                            continue
                        tag_start = offset + 11                   # consumer tag
                        tag_end = tag_start + 1 + buffer[tag_start]
                        pos = tag_end
                        tag = _U64(buffer, pos)[0]
                        redelivered = buffer[pos + 8] & 1
                        pos += 9                                  # tag, redelivered
                        exchange_end = pos + 1 + buffer[pos]
                        key_end = exchange_end + 1 + buffer[exchange_end]
                        self._delivery_channel = channel
                        if self._detailed:
                            consumer_tag = buffer[tag_start + 1:tag_end]
                            self._delivery = (
                                tag, buffer[pos:exchange_end], buffer[exchange_end:key_end],
                                consumer_tag.decode("utf-8", "replace"), bool(redelivered))
                        else:
                            self._delivery = (tag, buffer[pos:exchange_end],
                                              buffer[exchange_end:key_end])
                        connection.bytes_received += frame_end - offset
                        offset = frame_end
                        continue
                consumed, value = decode_frame(buffer[offset:frame_end])
                offset += consumed
                connection.bytes_received += consumed
                self._process(value)
        finally:
            pika_internals.set_unparsed(connection, buffer[offset:] if offset else buffer)

    def _frame_error(self, octet: int, what: str = "") -> None:
        """A frame that does not end with 0xCE: the stream is out of step, so the connection
        is torn down (AMQP's FRAME_ERROR) and the caller's reconnect logic takes over; its
        unacked deliveries are redelivered."""
        self._broken = True
        error = pika.exceptions.AMQPConnectionError(
            f"FRAME_ERROR: {what}" if what else
            f"FRAME_ERROR: frame end octet 0x{octet:02x}, expected 0xce")
        LOGGER.error("%s: closing the connection", error.args[0])
        pika_internals.terminate_stream(self._connection, error)

    def _deliver(self) -> None:
        delivery = self._delivery
        parts = self._parts
        self._delivery = None
        self._parts = []
        if self._detailed:
            tag, exchange, key, consumer_tag, redelivered = delivery  # type: ignore[misc]
            self._on_delivery(tag, exchange, key, parts, consumer_tag,  # type: ignore[misc]
                              redelivered)
        else:
            tag, exchange, key = delivery  # type: ignore[misc]
            self._on_delivery(tag, exchange, key, parts)  # type: ignore[misc]


def install(connection: Any) -> FrameReader:
    """Put a :class:`FrameReader` and bigger, coalesced socket I/O on an open connection.

    - bigger reads and one ``send`` per ioloop turn (:func:`rtroute.amqp.socket_io.coalesce_io`).

    Raises:
        RuntimeError: this pika lacks an internal the fast path relies on.
    """
    pika_internals.check_connection(connection)
    coalesce_io(connection)
    reader = FrameReader(connection)
    pika_internals.take_over_reading(connection, reader)
    return reader
