"""A raw AMQP 0-9-1 client for the tests that must send what no client library sends: frames
larger than allowed, frames with a bad end octet, pipelined handshakes with a wrong password.
"""
from __future__ import annotations

import socket
import struct
import time

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
HEAD = struct.Struct(">BHI")


def method(channel: int, class_id: int, method_id: int, fields: bytes) -> bytes:
    payload = struct.pack(">HH", class_id, method_id) + fields
    return HEAD.pack(1, channel, len(payload)) + payload + b"\xce"


def shortstr(text: str) -> bytes:
    data = text.encode()
    return bytes((len(data),)) + data


def longstr(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def start_ok(user: str, password: str) -> bytes:
    response = b"\x00" + user.encode() + b"\x00" + password.encode()
    return method(0, 10, 11, struct.pack(">I", 0) + shortstr("PLAIN") + longstr(response) +
                  shortstr("en_US"))


def tune_ok(frame_max: int = 131072) -> bytes:
    return method(0, 10, 31, struct.pack(">HIH", 2047, frame_max, 0))


def connection_open(vhost: str) -> bytes:
    return method(0, 10, 40, shortstr(vhost) + shortstr("") + b"\x00")


class RawClient:
    """A socket to ``port`` that reads whole frames."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self._buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self, timeout: float = 10.0) -> tuple[int, int, bytes] | None:
        """The next frame ``(type, channel, payload)``; None once the peer closed."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self._buf) >= 7:
                kind, channel, size = HEAD.unpack_from(self._buf)
                if len(self._buf) >= size + 8:
                    payload = self._buf[7:7 + size]
                    self._buf = self._buf[size + 8:]
                    return kind, channel, payload
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self._buf += data

    def method_ids(self, timeout: float = 10.0) -> tuple[int, int, bytes] | None:
        """The next method frame's ``(class, method, fields)`` (other frames skipped); None
        once the peer closed."""
        while True:
            frame = self.frame(timeout)
            if frame is None:
                return None
            if frame[0] == 1:
                class_id, method_id = struct.unpack_from(">HH", frame[2])
                return class_id, method_id, frame[2][4:]

    def handshake(self, user: str, password: str, vhost: str, frame_max: int = 131072
                  ) -> tuple[int, int, bytes] | None:
        """Up to the broker's answer to ``connection.open`` (open-ok, or its close)."""
        self.send(PROTOCOL_HEADER)
        assert self.method_ids()[:2] == (10, 10)  # start
        self.send(start_ok(user, password))
        tune = self.method_ids()
        assert tune is not None and tune[:2] == (10, 30), tune
        self.send(tune_ok(frame_max) + connection_open(vhost))
        return self.method_ids()

    def closed(self, timeout: float = 10.0) -> bool:
        """Whether the peer closes the socket within ``timeout`` (frames before are read)."""
        try:
            while self.frame(timeout) is not None:
                pass
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        self.sock.close()
