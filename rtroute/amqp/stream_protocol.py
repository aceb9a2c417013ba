"""A reading client of RabbitMQ's stream protocol (the ``rabbitmq_stream`` plugin): connect,
subscribe at an offset, and take the stream's chunks whole.

The stream protocol sends a consumer the stream's storage chunks as they are on disk (osiris
chunks: a header, then the entries, each one message in AMQP 1.0 encoding), one ``Deliver``
frame per chunk, as long as the consumer has credit (one credit, one chunk). This client hands
the chunks out whole and splits them into messages without copying
(:func:`chunk_messages`); decoding a message is :mod:`rtroute.amqp.amqp10_message`'s. That is
what makes it fast: one ``recv`` per chunk, no per-message frame, no per-message ack.

Only what a reader needs is here: ``PeerProperties``, SASL ``PLAIN``, ``Tune``, ``Open``,
``Subscribe``, ``Deliver`` (version 1), ``Credit``, ``Heartbeat``, ``Close``. It connects to the
host it is given and nowhere else (no ``Metadata`` lookup of the stream's leader or replicas):
right for a single node and for a cluster behind one address that hosts a replica of every
stream; a cluster whose streams live on other nodes needs a client that follows the metadata.

Stream URIs: ``rabbitmq-stream://user:password@host:5552/vhost`` and
``rabbitmq-stream+tls://...`` (default port 5551), with the TLS query keys of an amqps URI
(:mod:`rtroute.amqp.uri`). :func:`stream_uri_for` derives one from an AMQP URI.
"""
from __future__ import annotations

import collections
import datetime
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from rtroute.amqp.uri import AmqpUri, parse_uri

__all__ = ["DEFAULT_PORT", "DEFAULT_TLS_PORT", "Chunk", "StreamProtocolConnection",
           "StreamProtocolError", "chunk_messages", "parse_stream_uri", "stream_uri_for"]

DEFAULT_PORT = 5552
DEFAULT_TLS_PORT = 5551
_SCHEMES = {"rabbitmq-stream": "amqp", "rabbitmq-stream+tls": "amqps"}

# command keys (a response has the 0x8000 bit set)
_DELIVER, _CREDIT, _SUBSCRIBE, _UNSUBSCRIBE = 0x08, 0x09, 0x07, 0x0C
_PEER_PROPERTIES, _SASL_HANDSHAKE, _SASL_AUTHENTICATE = 0x11, 0x12, 0x13
_TUNE, _OPEN, _CLOSE, _HEARTBEAT = 0x14, 0x15, 0x16, 0x17
_OK = 1
_CODES = {2: "stream does not exist", 3: "subscription id already exists",
          4: "subscription id does not exist", 5: "stream already exists",
          6: "stream not available", 7: "SASL mechanism not supported",
          8: "authentication failure", 9: "SASL error", 10: "SASL challenge",
          11: "SASL authentication failure loopback", 12: "virtual host access failure",
          13: "unknown frame", 14: "frame too large", 15: "internal error",
          16: "access refused", 17: "precondition failed", 18: "publisher does not exist",
          19: "no offset"}
# Subscribe's offset specification types
_OFFSET_FIRST, _OFFSET_LAST, _OFFSET_NEXT, _OFFSET_OFFSET, _OFFSET_TIMESTAMP = 1, 2, 3, 4, 5
_CHUNK_HEADER = struct.Struct(">BBHIqQQiIIB3x")  # 48 bytes: the osiris chunk header
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_CHUNK_USER = 0  # chunk types 1 (tracking delta) and 2 (tracking snapshot) hold no messages


class StreamProtocolError(RuntimeError):
    """The stream port cannot be reached, refused the login or a command, or closed."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def parse_stream_uri(uri: str) -> AmqpUri:
    """A ``rabbitmq-stream[+tls]://`` URI as an :class:`~rtroute.amqp.uri.AmqpUri` (its
    ``scheme`` ``amqp`` or ``amqps``; the port 5552 or 5551 when the URI has none).

    Raises:
        ValueError: another scheme, or a malformed URI (as :func:`~rtroute.amqp.parse_uri`).
    """
    parts = urlsplit(uri)
    scheme = _SCHEMES.get(parts.scheme.lower())
    if scheme is None:
        raise ValueError(f"a stream URI starts with rabbitmq-stream:// or "
                         f"rabbitmq-stream+tls://, not {parts.scheme or uri!r}://")
    netloc = parts.netloc
    if parts.port is None:
        netloc += f":{DEFAULT_TLS_PORT if scheme == 'amqps' else DEFAULT_PORT}"
    return parse_uri(urlunsplit((scheme, netloc, parts.path, parts.query, parts.fragment)))


def stream_uri_for(amqp_uri: str) -> str:
    """The stream URI of the same host, credentials, virtual host and TLS keys as
    ``amqp_uri``, on the stream protocol's default port (5552; 5551 for amqps)."""
    parts = urlsplit(amqp_uri)
    tls = parts.scheme.lower() == "amqps"
    netloc = parts.netloc.rpartition("@")
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    port = DEFAULT_TLS_PORT if tls else DEFAULT_PORT
    userinfo = netloc[0] + "@" if netloc[1] else ""
    return urlunsplit(("rabbitmq-stream+tls" if tls else "rabbitmq-stream",
                       f"{userinfo}{host}:{port}", parts.path, parts.query, ""))


@dataclass
class Chunk:
    """One osiris chunk of messages: its first offset, its records, its timestamp (ms since the
    epoch, when the chunk was written), its entries (see :func:`chunk_messages`) and the
    subscription it was delivered to."""

    first_offset: int
    records: int
    entries: int
    timestamp_ms: int
    data: memoryview
    subscription: int = 0


def chunk_messages(chunk: Chunk) -> Iterator[memoryview]:
    """The chunk's messages in offset order (the ``i``-th has offset ``first_offset + i``), each
    an AMQP 1.0 encoded message, as views of the chunk's data.

    Raises:
        StreamProtocolError: a compressed sub-batch entry (written by a stream-protocol
            publisher that batches with compression; not supported here).
    """
    data = chunk.data
    at = 0
    end = len(data)
    unpack_from = struct.unpack_from
    while at < end:
        (size,) = unpack_from(">I", data, at)
        if size & 0x80000000:  # a sub-batch: flag, compression, records, sizes
            kind, _records, _, length = unpack_from(">BHII", data, at)
            at += 11
            if (kind >> 4) & 0x7:
                raise StreamProtocolError("a compressed sub-batch entry: not supported")
            stop = at + length
            while at < stop:
                (size,) = unpack_from(">I", data, at)
                yield data[at + 4:at + 4 + size]
                at += 4 + size
            continue
        yield data[at + 4:at + 4 + size]
        at += 4 + size


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _read_string(data: memoryview, at: int) -> tuple[str | None, int]:
    (length,) = struct.unpack_from(">h", data, at)
    if length < 0:
        return None, at + 2
    return bytes(data[at + 2:at + 2 + length]).decode(), at + 2 + length


def _read_map(data: memoryview, at: int) -> tuple[dict[str, str | None], int]:
    (count,) = struct.unpack_from(">i", data, at)
    at += 4
    out: dict[str, str | None] = {}
    for _ in range(max(count, 0)):
        key, at = _read_string(data, at)
        value, at = _read_string(data, at)
        out[key or ""] = value
    return out, at


class StreamProtocolConnection:
    """One stream-protocol connection, logged in and open on a virtual host, that reads one
    subscription at a time.

    Args:
        uri: ``rabbitmq-stream://`` or ``rabbitmq-stream+tls://`` (see the module docstring).
        connection_name: shown by the broker (``rabbitmqctl list_stream_connections``).
        timeout: seconds for the TCP connection and each command's answer.

    Attributes:
        server_properties: the broker's peer properties (``cluster_name``, ``version``, ...).

    Raises:
        StreamProtocolError: the port cannot be reached, or the login or ``open`` failed.
        ValueError: a malformed URI.
    """

    def __init__(self, uri: str, connection_name: str = "rtroute-stream",
                 timeout: float = 10.0) -> None:
        self.uri = uri
        parsed = parse_stream_uri(uri)
        self._data = b""  # received, not yet taken from self._at on
        self._at = 0
        self._correlation = 0
        self.frame_max = 1_048_576
        self.heartbeat = 60
        self._last_sent = time.monotonic()
        self._subscription = 0
        self._delivered: collections.deque[memoryview] = collections.deque()  # while in _call
        try:
            sock = socket.create_connection((parsed.host, parsed.port), timeout=timeout)
        except OSError as exc:
            raise StreamProtocolError(f"{parsed.host}:{parsed.port}: {exc}") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            if parsed.tls is not None:
                sock = parsed.tls.ssl_context().wrap_socket(
                    sock, server_hostname=parsed.tls.server_hostname(parsed.host))
            self._sock: Any = sock
            self.server_properties = self._handshake(parsed, connection_name)
        except BaseException as exc:
            sock.close()
            if isinstance(exc, OSError):
                raise StreamProtocolError(f"{parsed.host}:{parsed.port}: {exc}") from None
            raise
        self._sock.settimeout(None)

    # -- frames ------------------------------------------------------------------------------
    def _send(self, key: int, body: bytes, version: int = 1) -> None:
        frame = struct.pack(">IHH", 4 + len(body), key, version) + body
        try:
            self._sock.sendall(frame)
        except OSError as exc:
            raise StreamProtocolError(f"connection lost: {exc}") from None
        self._last_sent = time.monotonic()

    def _frame(self) -> tuple[int, memoryview]:
        """The next frame as (key, body after key and version), a view of the received bytes
        (no copy: a chunk is as long as the frame)."""
        while True:
            data, at = self._data, self._at
            have = len(data) - at
            if have >= 4:
                (size,) = _U32.unpack_from(data, at)
                if have >= 4 + size:
                    self._at = at + 4 + size
                    frame = memoryview(data)[at + 4:at + 4 + size]
                    (key,) = _U16.unpack_from(frame, 0)
                    return key, frame[4:]
                want = 4 + size - have
            else:
                want = 4 - have
            try:
                got = self._sock.recv(max(want, 1 << 20))
            except TimeoutError:
                raise
            except OSError as exc:
                raise StreamProtocolError(f"connection lost: {exc}") from None
            if not got:
                raise StreamProtocolError("the broker closed the connection")
            self._data = data[at:] + got if have else got
            self._at = 0

    def _call(self, key: int, body: bytes, keep_deliveries: bool = True) -> memoryview:
        """Sends a command and returns its response's body after the response code; chunks
        delivered meanwhile are kept for :meth:`next_chunk` (``keep_deliveries``) or dropped.

        Raises:
            StreamProtocolError: the response code is not OK, or the broker closed.
        """
        self._correlation += 1
        correlation = self._correlation
        self._send(key, struct.pack(">I", correlation) + body)
        while True:
            got, frame = self._frame()
            if got == key | 0x8000:
                corr, code = struct.unpack_from(">IH", frame, 0)
                if corr != correlation:
                    continue
                if code != _OK:
                    raise StreamProtocolError(_CODES.get(code, f"response code {code}"), code)
                return frame[6:]
            if got == _DELIVER:  # a chunk of a subscription made before: next_chunk's
                if keep_deliveries:
                    self._delivered.append(frame)
            else:
                self._other(got, frame)

    def _other(self, key: int, frame: memoryview) -> None:
        if key == _CLOSE:
            _, code = struct.unpack_from(">IH", frame, 0)
            reason, _ = _read_string(frame, 6)
            raise StreamProtocolError(f"the broker closed the connection: {reason}", code)
        if key == _TUNE:
            self._send(_TUNE, bytes(frame))
        # heartbeats, metadata updates, credit errors of a finished subscription: nothing to do

    def _handshake(self, parsed: AmqpUri, name: str) -> dict[str, str | None]:
        properties = {"connection_name": name, "product": "rtroute"}
        body = struct.pack(">i", len(properties)) + b"".join(
            _string(k) + _string(v) for k, v in properties.items())
        server, _ = _read_map(self._call(_PEER_PROPERTIES, body), 0)
        self._call(_SASL_HANDSHAKE, b"")
        secret = b"\0" + parsed.username.encode() + b"\0" + parsed.password.encode()
        self._call(_SASL_AUTHENTICATE,
                   _string("PLAIN") + struct.pack(">i", len(secret)) + secret)
        while True:
            key, frame = self._frame()
            if key == _TUNE:
                frame_max, heartbeat = struct.unpack_from(">II", frame, 0)
                self.frame_max = frame_max or self.frame_max
                self.heartbeat = heartbeat
                self._send(_TUNE, struct.pack(">II", self.frame_max, heartbeat))
                break
            self._other(key, frame)
        self._call(_OPEN, _string(parsed.vhost))
        return server

    # -- reading -------------------------------------------------------------------------------
    def subscribe(self, stream: str, offset: int | str | datetime.datetime, credit: int = 10,
                  subscription: int = 0) -> None:
        """Starts reading ``stream`` from ``offset`` (an offset, ``first``/``last``/``next``,
        or a moment: the chunk written at or before it) with ``credit`` chunks granted.

        Raises:
            StreamProtocolError: the stream does not exist (code 2) or is not available.
        """
        if isinstance(offset, datetime.datetime):
            spec = struct.pack(">Hq", _OFFSET_TIMESTAMP, int(offset.timestamp() * 1000))
        elif isinstance(offset, int):
            spec = struct.pack(">HQ", _OFFSET_OFFSET, offset)
        else:
            spec = struct.pack(">H", {"first": _OFFSET_FIRST, "last": _OFFSET_LAST,
                                      "next": _OFFSET_NEXT}[offset])
        self._call(_SUBSCRIBE, struct.pack(">B", subscription) + _string(stream) + spec
                   + struct.pack(">Hi", credit, 0))

    def next_subscription(self) -> int:
        """A subscription id from 1 to 255, another than the last one handed out (so chunks
        still in flight for a subscription just ended are not taken for the next one's)."""
        self._subscription = self._subscription % 255 + 1
        return self._subscription

    def unsubscribe(self, subscription: int = 0) -> None:
        """Stops the subscription (chunks already sent are read past and dropped)."""
        self._call(_UNSUBSCRIBE, struct.pack(">B", subscription))
        self._delivered = collections.deque(f for f in self._delivered if f[0] != subscription)

    def credit(self, chunks: int = 1, subscription: int = 0) -> None:
        """Grants ``chunks`` more chunks."""
        self._send(_CREDIT, struct.pack(">BH", subscription, chunks))

    def next_chunk(self, timeout: float | None = None) -> Chunk | None:
        """The next chunk of messages delivered, or None if none came in ``timeout`` seconds
        (None: wait for ever). Chunks without messages (offset tracking) are skipped, their
        credit given back.

        Raises:
            StreamProtocolError: the connection failed or the broker closed it.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if deadline is not None and not self._delivered and not self._buffered_frame():
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._sock.settimeout(min(left, max(1.0, self.heartbeat / 2 or 1.0)))
            else:
                self._sock.settimeout(None)
            try:
                key, frame = (_DELIVER, self._delivered.popleft()) if self._delivered \
                    else self._frame()
            except TimeoutError:
                self._keep_alive()
                continue
            if key != _DELIVER:
                self._other(key, frame)
                continue
            (_magic, chunk_type, entries, records, timestamp, _epoch, first, _crc, length,
             _trailer, _bloom) = _CHUNK_HEADER.unpack_from(frame, 1)
            if chunk_type != _CHUNK_USER:
                self.credit(1, frame[0])
                continue
            start = 1 + _CHUNK_HEADER.size + _bloom
            return Chunk(first, records, entries, timestamp, frame[start:start + length],
                         frame[0])

    def _buffered_frame(self) -> bool:
        have = len(self._data) - self._at
        return have >= 4 and have >= 4 + _U32.unpack_from(self._data, self._at)[0]

    def _keep_alive(self) -> None:
        if self.heartbeat and time.monotonic() - self._last_sent >= self.heartbeat / 2:
            self._send(_HEARTBEAT, b"")

    def close(self) -> None:
        """Closes the connection (politely if it still answers)."""
        try:
            self._sock.settimeout(2.0)
            self._delivered.clear()
            self._call(_CLOSE, struct.pack(">H", _OK) + _string("done"), keep_deliveries=False)
        except (StreamProtocolError, OSError):
            pass
        finally:
            self._sock.close()
