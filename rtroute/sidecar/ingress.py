"""One ingress delivery as the broker sent it, decoded only as far as the sidecar needs.

The sidecar reads its ingress queues at the frame level (:class:`rtroute.amqp.frames.FrameReader`):
routing needs the routing key and the headers table, not the other properties or the body. A
republish is built from the frames as received, with the headers table edited in place
(:mod:`rtroute.amqp.content_header`): every other property and every other header entry
reaches the consumer byte for byte, as the x-rtopic plugin would deliver it. The properties are
decoded (with pika) only for what needs them: dead letters, diverted copies, selectors.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import pika

from rtroute.amqp.content_header import (
    bcc_entry,
    decode_headers,
    headers_span,
    with_headers_table,
    without_entries,
)
from rtroute.amqp.frames import body_of, body_size, decode_properties, on_channel

__all__ = ["IngressMessage"]

BCC_ENTRY_CACHE = 4096  # encoded BCC entries kept, by key tuple (the same match set recurs)
_BCC_ENTRIES: dict[Sequence[str], bytes] = {}


class IngressMessage:
    """One delivery from an ingress queue.

    Attributes:
        exchange: the managed exchange whose ingress queue it came from.
        tag: the delivery tag.
        redelivered: the broker's redelivered flag.
        routing_key: as published (``str``; ``bytes`` if it is not UTF-8, as pika gives it).
        parts: the content header frame and the body frames, as received.
        headers: the headers table decoded (None: no headers).
        error: why the headers cannot be read, or None (the message is then dead-lettered).
    """

    __slots__ = ("_body", "_kept", "_props", "error", "exchange", "headers", "parts",
                 "redelivered", "routing_key", "span", "tag")

    def __init__(self, exchange: Any, tag: int, redelivered: bool, routing_key: bytes,
                 parts: list[bytes]) -> None:
        self.exchange = exchange
        self.tag = tag
        self.redelivered = redelivered
        key: Any = routing_key[1:]  # a short string: length octet first
        try:
            key = key.decode("utf-8")
        except UnicodeDecodeError:
            pass
        self.routing_key = key
        self.parts = parts
        self._props: pika.BasicProperties | None = None
        self._body: bytes | None = None
        self._kept: bytes | None = None
        self.error: str | None = None
        try:
            self.span = headers_span(parts[0])
            self.headers = decode_headers(parts[0], self.span)
        except Exception as exc:  # noqa: BLE001 - pika's decoder raises several kinds
            self.span = (0, 0)
            self.headers = None
            self.error = f"cannot decode the message's headers: {type(exc).__name__}: {exc}"

    @property
    def props(self) -> pika.BasicProperties:
        """Every property, decoded with pika (headers included)."""
        if self._props is None:
            self._props = decode_properties(self.parts[0])
        return self._props

    @property
    def body(self) -> bytes:
        if self._body is None:
            self._body = body_of(self.parts)
        return self._body

    @property
    def body_size(self) -> int:
        return body_size(self.parts[0])

    def republish_frames(self, channel: int, method_frame: bytes, drop: Collection[str],
                         bcc: tuple[str, ...] | None) -> tuple[bytes, int]:
        """The frames that republish this message on ``channel``, and how many there are.

        Args:
            channel: the publishing channel's number (same connection, so same ``frame_max``).
            method_frame: the ``basic.publish`` frame to send first.
            drop: header names to remove (the same for every republish of this message).
            bcc: a ``BCC`` entry to add (None or empty: none).
        """
        header = self.parts[0]
        start, end = self.span
        if bcc or (start != end and self.error is None):
            entries = self._kept
            if entries is None:
                entries = self._kept = without_entries(header, self.span, drop)
            if bcc:
                entry = _BCC_ENTRIES.get(bcc)
                if entry is None:
                    if len(_BCC_ENTRIES) >= BCC_ENTRY_CACHE:
                        _BCC_ENTRIES.clear()
                    entry = _BCC_ENTRIES[bcc] = bcc_entry(bcc)
                entries += entry
            header = with_headers_table(header, channel, self.span, entries)
        else:
            header = on_channel(header, channel)
        bodies = [on_channel(p, channel) for p in self.parts[1:]]
        return b"".join((method_frame, header, *bodies)), 2 + len(bodies)
