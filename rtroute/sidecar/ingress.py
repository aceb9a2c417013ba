"""One ingress delivery as the broker sent it, decoded only as far as the sidecar needs.

The sidecar reads its ingress queues at the frame level (:class:`rtroute.amqp.frames.FrameReader`):
routing needs the routing key and three header entries (``CC``, ``BCC``, the BCC alias), not
the other properties or the body. At delivery only those entries are decoded; the rest of the
headers table is checked (so that it decodes later) but not built, so a timestamp no
``datetime`` holds or a table nested thousands deep never stops a message. A republish is
built from the frames as received, with the headers table edited in place
(:mod:`rtroute.amqp.content_header`): every other property and every other header entry
reaches the consumer byte for byte, as the x-rtopic plugin would deliver it; so does a dead
letter (:meth:`IngressMessage.dead_letter_frames`). Selectors and diverted copies read the
whole table and the properties, decoded on first use without loss
(:mod:`rtroute.amqp.field_table`).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from rtroute.amqp.content_header import (
    BasicProperties,
    bcc_entry,
    dead_letter_header,
    decode_headers,
    decode_properties,
    headers_span,
    with_headers_table,
    without_entries,
)
from rtroute.amqp.field_table import FieldTable, select_entries, selection
from rtroute.amqp.frames import body_of, body_size, on_channel

__all__ = ["IngressMessage", "RoutingHeaders"]

DEFAULT_BCC_ALIAS = "x-rtroute-bcc"
BCC_ENTRY_CACHE = 4096  # encoded BCC entries kept, by key tuple (the same match set recurs)
_BCC_ENTRIES: dict[Sequence[str], bytes] = {}
_SELECTIONS: dict[str, dict[bytes, str]] = {}  # BCC alias -> the names routing reads
_UNREAD: Any = object()


class RoutingHeaders(dict):
    """The header entries routing reads (``CC``, ``BCC``, the BCC alias), by name, decoded;
    ``wire_size`` is the size of the whole encoded headers table (its 4-byte size included),
    which bounds what a republish may add to it."""

    __slots__ = ("wire_size",)

    def __init__(self, entries: Mapping[str, Any], wire_size: int) -> None:
        super().__init__(entries)
        self.wire_size = wire_size


class IngressMessage:
    """One delivery from an ingress queue.

    Attributes:
        exchange: the managed exchange whose ingress queue it came from.
        tag: the delivery tag.
        redelivered: the broker's redelivered flag.
        routing_key: as published (``str``; ``bytes`` if it is not UTF-8, as pika gives it).
        key_short: the routing key as delivered, a short string (length octet included).
        parts: the content header frame and the body frames, as received.
        routing_headers: the ``CC``, ``BCC`` and BCC-alias entries
            (:class:`RoutingHeaders`), None when the message has no headers.
        error: why the headers cannot be read, or None (the message is then dead-lettered).
        settler: the :class:`~rtroute.amqp.Settler` of the channel it came on.
    """

    __slots__ = ("_body", "_headers", "_kept", "_props", "error", "exchange", "key_short",
                 "parts", "redelivered", "routing_headers", "routing_key", "settler", "span",
                 "tag")

    def __init__(self, exchange: Any, tag: int, redelivered: bool, routing_key: bytes,
                 parts: list[bytes], bcc_alias: str | None = None) -> None:
        """``bcc_alias``: the BCC alias header (default: ``exchange.spec.bcc_alias_header``
        if ``exchange`` has one, else ``x-rtroute-bcc``)."""
        self.exchange = exchange
        self.tag = tag
        self.settler: Any = None  # of the channel it came on (set by the pipeline)
        self.redelivered = redelivered
        self.key_short = routing_key
        key: Any = routing_key[1:]  # a short string: length octet first
        try:
            key = key.decode("utf-8")
        except UnicodeDecodeError:
            pass
        self.routing_key = key
        self.parts = parts
        self._props: BasicProperties | None = None
        self._body: bytes | None = None
        self._kept: bytes | None = None
        self._headers: FieldTable | None = _UNREAD
        self.error: str | None = None
        if bcc_alias is None:
            spec = getattr(exchange, "spec", None)
            bcc_alias = getattr(spec, "bcc_alias_header", None) or DEFAULT_BCC_ALIAS
        names = _SELECTIONS.get(bcc_alias)
        if names is None:
            names = _SELECTIONS[bcc_alias] = selection(("CC", "BCC", bcc_alias))
        header = parts[0]
        try:
            self.span = start, end = headers_span(header)
            self.routing_headers = None if start == end else RoutingHeaders(
                select_entries(header, start + 4, end, names), end - start)
        except ValueError as exc:  # FieldTableError included
            self.span = (0, 0)
            self.routing_headers = None
            self._headers = None
            self.error = f"cannot decode the message's headers: {type(exc).__name__}: {exc}"

    @property
    def headers(self) -> FieldTable | None:
        """The whole headers table, decoded without loss on first use (None: no headers, or
        headers that cannot be read)."""
        headers = self._headers
        if headers is _UNREAD:
            headers = self._headers = decode_headers(self.parts[0], self.span)
        return headers

    @property
    def props(self) -> BasicProperties:
        """Every property, decoded without loss on first use (headers included).

        Raises:
            ValueError: the content header cannot be read (only when ``error`` is set).
        """
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

    def dead_letter_frames(self, channel: int, method_frame: bytes,
                           reasons: Mapping[str, Any] | Sequence[tuple[str, Any]],
                           frame_max: int) -> tuple[bytes, int]:
        """The frames that dead-letter this message on ``channel``, and how many there are:
        every property and header entry as received, plus the ``reasons`` entries (see
        :func:`rtroute.amqp.content_header.dead_letter_header`), and the body frames.

        Args:
            channel: the publishing channel's number (same connection, so same ``frame_max``).
            method_frame: the ``basic.publish`` frame to send first (to the dead-letter
                exchange).
            reasons: header entries to set, e.g. ``{"x-rtroute-error": reason}``.
            frame_max: the connection's frame size (a header that would outgrow it is
                replaced by one holding the reasons only).
        """
        header = dead_letter_header(self.parts[0], channel, reasons, frame_max)
        bodies = [on_channel(p, channel) for p in self.parts[1:]]
        return b"".join((method_frame, header, *bodies)), 2 + len(bodies)
