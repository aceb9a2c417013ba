"""The few AMQP 0-9-1 methods the proxy reads or writes, as bytes. Pure, no I/O.

Frames are built and read with :mod:`rtroute.amqp.frame_codec`, with the method ids of
:mod:`rtroute.amqp.methods` (the names used here are re-exported for the proxy's modules). Only
the methods the proxy rewrites are decoded here; field tables (``arguments``) stay raw bytes,
so what the client sent reaches the broker unchanged.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from rtroute.amqp.frame_codec import (
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    HEAD,
    U16,
    U32,
    U64,
    method_frame,
    publish_frame,
    short,
    shortstr,
)
from rtroute.amqp.methods import (
    BASIC_ACK,
    BASIC_DELIVER,
    BASIC_GET_OK,
    BASIC_NACK,
    BASIC_PUBLISH,
    BASIC_RETURN,
    CHANNEL_CLOSE,
    CHANNEL_CLOSE_OK,
    CHANNEL_OPEN,
    CHANNEL_OPEN_OK,
    CONFIRM_SELECT,
    CONNECTION_CLOSE,
    CONNECTION_CLOSE_OK,
    CONNECTION_OPEN,
    CONNECTION_OPEN_OK,
    CONNECTION_START,
    CONNECTION_START_OK,
    CONNECTION_TUNE,
    CONNECTION_TUNE_OK,
    EXCHANGE_BIND,
    EXCHANGE_BIND_OK,
    EXCHANGE_DECLARE,
    EXCHANGE_DECLARE_OK,
    EXCHANGE_DELETE,
    EXCHANGE_DELETE_OK,
    EXCHANGE_UNBIND,
    EXCHANGE_UNBIND_OK,
    QUEUE_BIND,
    QUEUE_BIND_OK,
    QUEUE_UNBIND,
    QUEUE_UNBIND_OK,
    TX_SELECT,
)

__all__ = [
    "BASIC_ACK",
    "BASIC_DELIVER",
    "BASIC_GET_OK",
    "BASIC_NACK",
    "BASIC_PUBLISH",
    "BASIC_RETURN",
    "CHANNEL_CLOSE",
    "CHANNEL_CLOSE_OK",
    "CHANNEL_OPEN",
    "CHANNEL_OPEN_OK",
    "CONFIRM_SELECT",
    "CONNECTION_CLOSE",
    "CONNECTION_CLOSE_OK",
    "CONNECTION_OPEN",
    "CONNECTION_OPEN_OK",
    "CONNECTION_START",
    "CONNECTION_START_OK",
    "CONNECTION_TUNE",
    "CONNECTION_TUNE_OK",
    "EXCHANGE_BIND",
    "EXCHANGE_BIND_OK",
    "EXCHANGE_DECLARE",
    "EXCHANGE_DECLARE_OK",
    "EXCHANGE_DELETE",
    "EXCHANGE_DELETE_OK",
    "EXCHANGE_UNBIND",
    "EXCHANGE_UNBIND_OK",
    "FRAME_BODY",
    "FRAME_END",
    "FRAME_HEADER",
    "FRAME_HEARTBEAT",
    "FRAME_METHOD",
    "HEAD",
    "QUEUE_BIND",
    "QUEUE_BIND_OK",
    "QUEUE_UNBIND",
    "QUEUE_UNBIND_OK",
    "TX_SELECT",
    "U16",
    "U32",
    "U64",
    "Bind",
    "Declare",
    "Delete",
    "bind",
    "channel_close",
    "channel_open",
    "connection_close",
    "connection_start",
    "declare",
    "delete",
    "method_frame",
    "parse_bind",
    "parse_declare",
    "parse_delete",
    "publish_key_and_bits",
    "queue_bind",
    "rename_exchange",
    "short",
    "shortstr",
    "unbind",
    "with_channel_max",
]

METHOD_ID = struct.Struct(">HH")

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
# the largest frame (header and end octet included) read before connection.tune-ok: RabbitMQ
# closes the socket on a larger one (frame_too_large). Measured: 4096 on 3.10.8, 8192 on 4.3.6;
# the larger, so that the proxy never refuses what a broker of either would read
PRE_TUNE_FRAME_MAX = 8192


@dataclass
class Declare:
    """``exchange.declare``: flags bits passive 1, durable 2, auto-delete 4, internal 8,
    no-wait 16."""

    exchange: bytes
    type: bytes
    bits: int
    arguments: bytes  # the encoded table, length prefix included

    @property
    def passive(self) -> bool:
        return bool(self.bits & 1)

    @property
    def nowait(self) -> bool:
        return bool(self.bits & 16)


def parse_declare(payload: bytes) -> Declare:
    """``payload``: a method frame's payload (class and method ids first)."""
    exchange, pos = short(payload, 6)
    kind, pos = short(payload, pos)
    bits = payload[pos]
    return Declare(exchange, kind, bits, bytes(payload[pos + 1:]))


def declare(channel: int, exchange: bytes, kind: bytes, bits: int,
            arguments: bytes = b"\x00\x00\x00\x00") -> bytes:
    return method_frame(channel, EXCHANGE_DECLARE, b"\x00\x00" + shortstr(exchange) +
                        shortstr(kind) + bytes((bits,)) + arguments)


@dataclass
class Delete:
    """``exchange.delete``: bits if-unused 1, no-wait 2."""

    exchange: bytes
    bits: int

    @property
    def nowait(self) -> bool:
        return bool(self.bits & 2)


def parse_delete(payload: bytes) -> Delete:
    exchange, pos = short(payload, 6)
    return Delete(exchange, payload[pos])


def delete(channel: int, exchange: bytes, bits: int) -> bytes:
    return method_frame(channel, EXCHANGE_DELETE, b"\x00\x00" + shortstr(exchange) +
                        bytes((bits,)))


@dataclass
class Bind:
    """``queue.bind``/``queue.unbind``/``exchange.bind``/``exchange.unbind``.

    ``destination`` is the queue (queue methods) or the destination exchange; ``bits`` is None
    for ``queue.unbind``, which has no no-wait bit."""

    method: int
    destination: bytes
    source: bytes
    routing_key: bytes
    bits: int | None
    arguments: bytes

    @property
    def nowait(self) -> bool:
        return bool(self.bits and self.bits & 1)

    @property
    def destination_type(self) -> str:
        return "queue" if self.method in (QUEUE_BIND, QUEUE_UNBIND) else "exchange"

    def frame(self, channel: int, source: bytes) -> bytes:
        """This method with another source exchange."""
        bits = b"" if self.bits is None else bytes((self.bits,))
        return method_frame(channel, self.method, b"\x00\x00" + shortstr(self.destination) +
                            shortstr(source) + shortstr(self.routing_key) + bits +
                            self.arguments)


def parse_bind(method: int, payload: bytes) -> Bind:
    """Queue methods carry (queue, exchange, key), exchange methods (destination, source,
    key): in both the destination comes first."""
    destination, pos = short(payload, 6)
    source, pos = short(payload, pos)
    key, pos = short(payload, pos)
    if method == QUEUE_UNBIND:
        return Bind(method, destination, source, key, None, bytes(payload[pos:]))
    return Bind(method, destination, source, key, payload[pos], bytes(payload[pos + 1:]))


def bind(channel: int, destination: bytes, source: bytes, routing_key: bytes) -> bytes:
    """``exchange.bind`` (waiting for bind-ok), no arguments."""
    return method_frame(channel, EXCHANGE_BIND, b"\x00\x00" + shortstr(destination) +
                        shortstr(source) + shortstr(routing_key) + b"\x00\x00\x00\x00\x00")


def queue_bind(channel: int, queue: bytes, exchange: bytes, routing_key: bytes) -> bytes:
    """``queue.bind`` (waiting for bind-ok), no arguments."""
    return method_frame(channel, QUEUE_BIND, b"\x00\x00" + shortstr(queue) + shortstr(exchange) +
                        shortstr(routing_key) + b"\x00\x00\x00\x00\x00")


def unbind(channel: int, method: int, destination: bytes, source: bytes,
           routing_key: bytes) -> bytes:
    """``queue.unbind`` (``method`` QUEUE_UNBIND: queue, exchange, key) or ``exchange.unbind``
    (destination, source, key; waiting for unbind-ok), no arguments."""
    bits = b"" if method == QUEUE_UNBIND else b"\x00"
    return method_frame(channel, method, b"\x00\x00" + shortstr(destination) + shortstr(source) +
                        shortstr(routing_key) + bits + b"\x00\x00\x00\x00")


def channel_open(channel: int) -> bytes:
    return method_frame(channel, CHANNEL_OPEN, b"\x00")


def with_channel_max(frame: bytes, channel_max: int) -> bytes:
    """The ``connection.tune`` or ``tune-ok`` ``frame`` with another ``channel_max``."""
    return frame[:11] + U16.pack(channel_max) + frame[13:]


def publish(channel: int, exchange: bytes, routing_key: bytes, bits: int) -> bytes:
    return publish_frame(channel, shortstr(exchange), shortstr(routing_key), bits)


def renamed_publish(frame: bytes, exchange: bytes) -> bytes:
    """The ``basic.publish`` method ``frame`` (whole, its fields within it) to another
    ``exchange`` (a ready short string): what :func:`publish` makes of its routing key and
    bits."""
    key_at = 14 + frame[13]
    fields = frame[key_at:key_at + 2 + frame[key_at]]  # routing key, bits
    return b"".join((HEAD.pack(FRAME_METHOD, U16.unpack_from(frame, 1)[0],
                               6 + len(exchange) + len(fields)),
                     frame[7:13], exchange, fields, b"\xce"))


def publish_key(frame: bytes) -> bytes:
    """The routing key of the ``basic.publish`` method ``frame`` (whole, its fields within it:
    see :mod:`rtroute.core.frames`)."""
    key_at = 14 + frame[13]
    return frame[key_at + 1:key_at + 1 + frame[key_at]]


def publish_key_and_bits(frame: bytes) -> tuple[bytes, int]:
    """The routing key and the bits octet of the ``basic.publish`` method ``frame`` (whole,
    its fields within it: see :mod:`rtroute.core.frames`)."""
    key_at = 14 + frame[13]
    key_end = key_at + 1 + frame[key_at]
    return frame[key_at + 1:key_end], frame[key_end]


def channel_close(channel: int, code: int, text: str, failing_method: int) -> bytes:
    """``channel.close`` naming the method that failed."""
    return method_frame(channel, CHANNEL_CLOSE, U16.pack(code) +
                        shortstr(text.encode("utf-8")[:255]) + U32.pack(failing_method))


def connection_start(product: bytes) -> bytes:
    """``connection.start`` (AMQP 0-9, PLAIN and AMQPLAIN, en_US) of a server whose
    ``product`` property is given."""
    entry = shortstr(b"product") + b"S" + U32.pack(len(product)) + product
    return method_frame(0, CONNECTION_START, b"\x00\x09" + U32.pack(len(entry)) + entry +
                        U32.pack(14) + b"PLAIN AMQPLAIN" + U32.pack(5) + b"en_US")


def connection_close(code: int, text: str) -> bytes:
    """``connection.close`` with no failing method (as during the handshake)."""
    return method_frame(0, CONNECTION_CLOSE, U16.pack(code) +
                        shortstr(text.encode("utf-8")[:255]) + b"\x00\x00\x00\x00")


def exchange_position(method: int, payload: bytes) -> int:
    """Where the exchange short string of a ``basic.deliver``/``get-ok``/``return`` payload
    starts."""
    if method == BASIC_DELIVER:
        return 4 + 1 + payload[4] + 8 + 1  # consumer tag, delivery tag, redelivered
    if method == BASIC_GET_OK:
        return 4 + 8 + 1
    return 4 + 2 + 1 + payload[6]  # basic.return: reply code, reply text


def rename_exchange(channel: int, payload: bytes, start: int, name: bytes) -> bytes:
    """The method frame of ``payload`` with the exchange short string at ``start`` replaced."""
    end = start + 1 + payload[start]
    body = b"".join((payload[:start], bytes((len(name),)), name, payload[end:]))
    return HEAD.pack(FRAME_METHOD, channel, len(body)) + body + b"\xce"
