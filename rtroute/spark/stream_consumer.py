"""Reading RabbitMQ streams over AMQP 0-9-1: offsets, the tail, and exact offset ranges.

A stream (``x-queue-type: stream``, RabbitMQ 3.9+) is an append-only log: a consumer names
where to start (``x-stream-offset``: ``first``, ``last``, ``next``, an offset, or a timestamp),
gets every message from there on with its offset in the ``x-stream-offset`` header, and takes
nothing away from other consumers. Consumers must set a prefetch (``basic.qos``) and ack, which
only returns credit: nothing is ever requeued or removed.

Facts measured on RabbitMQ 3.10.8, 4.0.5 and 4.3.6 that this module relies on:

- Neither the management API (``GET /api/queues/VHOST/NAME`` gives ``messages``, a count
  refreshed every few seconds, and on 4.3 ``first_timestamp``, but no offset) nor a passive
  ``queue.declare`` (``message_count`` is 0) tells a stream's last offset. So the tail is
  found by consuming from ``last``: RabbitMQ delivers the last chunk, whose greatest offset is
  a message that exists (consumers only ever see committed messages). :func:`probe` waits
  until no delivery came for ``wait`` seconds (and at most :data:`PROBE_LIMIT` times that when
  messages keep arriving): it may see less than the whole chunk, never more than exists.
- A consumer starting at offset N inside a chunk gets N first (earlier offsets of the chunk are
  skipped by the broker; :func:`read_range` skips them too). A consumer starting at an offset
  beyond the tail waits for new messages; one starting before the first retained offset
  (retention truncated the head) starts at the first retained one.
- A timestamp start is chunk-granular: it may also give messages written shortly before it.
- A delivery carries no other broker header (no chunk timestamp): the ``timestamp`` column is
  the publisher's ``timestamp`` property. ``redelivered`` is always false.
- A stream does not keep every header: array and table values are dropped (3.10.8: all, ``CC``
  included; 4.x: all but ``CC`` and names starting with ``x-``), a byte array comes back as a
  long string on 4.x, an unset delivery mode as 1 on 4.x (docs/spark.md has the list).

The rows have the columns of a drained archive (:mod:`rtroute.spark.archive`) plus ``stream``
and ``offset``; ``headers`` is the table as the stream gives it back, without the broker's
``x-stream-offset`` (null when that was its only entry); ``drained_at`` is when this reader
received the message (a replayed range gets new times).
"""
from __future__ import annotations

import collections
import contextlib
import datetime
import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Union

import pyarrow as pa

from rtroute.amqp import connect_blocking, frames, mask_uri
from rtroute.amqp.content_header import decode_properties
from rtroute.spark.archive import MAX_TIMESTAMP, SCHEMA
from rtroute.spark.header_json import headers_json

__all__ = [
    "ARROW_SCHEMA",
    "DEFAULT_PREFETCH",
    "OFFSET_HEADER",
    "Columns",
    "Start",
    "StreamConnection",
    "StreamReadError",
    "format_start",
    "parse_start",
    "parse_starts",
    "probe",
    "read_range",
    "resolve_starts",
    "split_starts",
    "tails",
]

OFFSET_HEADER = "x-stream-offset"
DEFAULT_PREFETCH = 2000
PROBE_LIMIT = 8  # a probe of streams being written stops after PROBE_LIMIT * wait seconds
_PROPERTIES = ("content_type", "content_encoding", "correlation_id", "reply_to", "expiration",
               "message_id", "type", "user_id", "app_id")

# Spark reads timestamps as microseconds: the archive's second/millisecond columns, widened
_MICROS = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema(
    [pa.field(f.name, _MICROS if pa.types.is_timestamp(f.type) else f.type) for f in SCHEMA]
    + [pa.field("stream", pa.string()), pa.field("offset", pa.int64())])
"""The rows of a stream: the archive's columns (timestamps in microseconds), ``stream``,
``offset``."""

Start = Union[str, int, datetime.datetime]
"""Where a stream is read from: ``"first"``, ``"last"``, ``"next"``, an offset, or a moment."""

_WORDS = ("first", "last", "next")


class StreamReadError(RuntimeError):
    """A stream cannot be read (missing, refused, connection lost, or it stalled)."""


def parse_start(text: Any) -> Start:
    """A starting offset as given by a user: ``first``, ``last``, ``next``, an offset (an
    integer from 0), or a moment (ISO 8601, e.g. ``2024-05-01T12:00:00Z``; without a zone it is
    UTC).

    Raises:
        ValueError: none of these.
        TypeError: a bool.
    """
    if isinstance(text, bool):
        raise TypeError(f"not a starting offset: {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"an offset is 0 or more, not {text}")
        return text
    if isinstance(text, datetime.datetime):
        return text if text.tzinfo else text.replace(tzinfo=datetime.timezone.utc)
    word = str(text).strip()
    if word.lower() in _WORDS:
        return word.lower()
    if re.fullmatch(r"-?\d+", word):
        return parse_start(int(word))
    try:
        moment = datetime.datetime.fromisoformat(word.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"starting offset must be first, last, next, an offset (0, 1, ...) or "
                         f"an ISO 8601 time such as 2024-05-01T12:00:00Z, not {text!r}") from None
    return parse_start(moment)


def parse_starts(text: str | None, streams: Sequence[str]) -> dict[str, Start]:
    """Each stream's start: one :func:`parse_start` for all, or a JSON object naming each
    stream (``{"orders-0": 1200, "orders-1": "first"}``); ``None`` means ``next``.

    Raises:
        ValueError: a malformed start, or a JSON object that misses a stream or names another.
    """
    if text is None or not str(text).strip().startswith("{"):
        start = parse_start("next" if text is None else text)
        return {stream: start for stream in streams}
    try:
        given = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"starting offsets: not a JSON object: {exc}") from None
    if not isinstance(given, dict) or set(given) != set(streams):
        raise ValueError(f"starting offsets must name exactly the streams {sorted(streams)}, "
                         f"not {sorted(given) if isinstance(given, dict) else given!r}")
    return {stream: parse_start(given[stream]) for stream in streams}


def format_start(start: Start) -> str:
    """A start as :func:`parse_start` reads it."""
    return start.isoformat() if isinstance(start, datetime.datetime) else str(start)


class StreamConnection:
    """An AMQP connection that reads streams: deliveries are taken as frames and decoded without
    pika (:mod:`rtroute.amqp.frames`), so any message a drain can archive can be read.

    Raises:
        StreamReadError: the broker cannot be reached.
    """

    def __init__(self, uri: str, connection_name: str = "rtroute-stream") -> None:
        import pika

        self.uri = uri
        try:
            self.connection = connect_blocking(uri, connection_name=connection_name)
        except pika.exceptions.AMQPError as exc:
            raise StreamReadError(str(exc)) from None
        self._frames = frames.install(self.connection._impl)
        # (consumer tag, delivery tag, exchange, routing key, redelivered, frames)
        self.deliveries: collections.deque[tuple] = collections.deque()

    @property
    def is_open(self) -> bool:
        return self.connection.is_open

    @property
    def cluster_name(self) -> str | None:
        """The broker's ``cluster_name`` (its ``connection.start`` server properties)."""
        name = (self.connection._impl.server_properties or {}).get("cluster_name")
        return name.decode("utf-8", "replace") if isinstance(name, bytes) else name

    def channel(self, prefetch: int) -> Any:
        """A new channel whose deliveries land in :attr:`deliveries`."""
        channel = self.connection.channel()
        channel.basic_qos(prefetch_count=prefetch)
        self._frames.intercept(channel.channel_number, self._on_delivery, detailed=True)
        return channel

    def _on_delivery(self, tag: int, exchange: bytes, key: bytes, parts: list[bytes],
                     consumer_tag: str, redelivered: bool) -> None:
        self.deliveries.append((consumer_tag, tag, exchange, key, redelivered, parts))

    def consume(self, channel: Any, stream: str, start: Start, consumer_tag: str) -> None:
        """Consume ``stream`` from ``start`` on ``channel`` (a channel of :meth:`channel`)."""
        channel.basic_consume(stream, _bypassed, consumer_tag=consumer_tag,
                              arguments={OFFSET_HEADER: start})

    def close_channel(self, channel: Any) -> None:
        """Closes ``channel`` and forgets its deliveries (nothing is requeued on a stream)."""
        self._frames.stop_intercepting(channel.channel_number)
        if channel.is_open:
            channel.close()
        self.deliveries.clear()

    def poll(self, timeout: float) -> None:
        self.connection.process_data_events(timeout)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a broken connection: nothing left to close
            if self.connection.is_open:
                self.connection.close()


def _bypassed(*_args: Any) -> None:
    raise StreamReadError("a delivery bypassed the frame reader")


def _offset_of(headers: Any) -> int:
    try:
        return int(headers[OFFSET_HEADER])
    except (TypeError, KeyError, ValueError):
        raise StreamReadError(f"a delivery without an {OFFSET_HEADER} header: is the queue a "
                              "stream?") from None


def _amqp_errors() -> tuple[type[BaseException], ...]:
    import pika

    return (pika.exceptions.AMQPError,)


def _failure(stream: str, uri: str, exc: BaseException) -> StreamReadError:
    import pika

    if isinstance(exc, pika.exceptions.ChannelClosedByBroker):
        return StreamReadError(f"stream {stream!r}: {exc.reply_code} {exc.reply_text}")
    return StreamReadError(f"stream {stream!r} on {mask_uri(uri)}: {exc!r}")


def probe(connection: StreamConnection, streams: Sequence[str], start: Start, wait: float,
          first_only: bool = False) -> dict[str, tuple[int, int]]:
    """The least and greatest offsets delivered when consuming each stream from ``start``.

    All streams are consumed at once on one channel. ``first_only``: stop each stream at its
    first delivery (where ``start`` resolves to); otherwise read until no delivery came for
    ``wait`` seconds (at most ``PROBE_LIMIT * wait`` seconds in all): from ``last`` that is the
    last chunk, whose greatest offset is the tail. A stream that delivered nothing in ``wait``
    seconds is absent from the result (empty, or nothing at or after ``start``).

    Raises:
        StreamReadError: a stream is missing or cannot be read.
    """
    tags = {f"rtroute-probe-{i}": stream for i, stream in enumerate(streams)}
    stream = streams[0] if streams else ""
    try:
        channel = connection.channel(1 if first_only else DEFAULT_PREFETCH)
        try:
            for tag, stream in tags.items():
                connection.consume(channel, stream, start, tag)
            seen: dict[str, tuple[int, int]] = {}
            begun = last_delivery = time.monotonic()
            deliveries = connection.deliveries
            while True:
                connection.poll(min(0.02, wait))
                last_tag = 0
                while deliveries:
                    consumer_tag, last_tag, _, _, _, parts = deliveries.popleft()
                    name = tags.get(consumer_tag)
                    if name is None:
                        continue
                    offset = _offset_of(decode_properties(parts[0]).headers)
                    low, high = seen.get(name, (offset, offset))
                    seen[name] = (min(low, offset), max(high, offset))
                now = time.monotonic()
                if last_tag:
                    last_delivery = now
                    if not first_only:
                        channel.basic_ack(last_tag, multiple=True)
                if first_only and len(seen) == len(tags):
                    break
                if now - last_delivery >= wait or now - begun >= PROBE_LIMIT * wait:
                    break
        finally:
            connection.close_channel(channel)
    except _amqp_errors() as exc:
        raise _failure(stream, connection.uri, exc) from None
    return seen


def tails(connection: StreamConnection, streams: Sequence[str], wait: float) -> dict[str, int]:
    """Each non-empty stream's tail: one past the greatest offset seen in its last chunk (see
    :func:`probe`); every offset below it was written before the call returned.

    Raises:
        StreamReadError: a stream is missing or cannot be read.
    """
    return {stream: high + 1 for stream, (_, high) in probe(connection, streams, "last",
                                                              wait).items()}


def split_starts(starts: Mapping[str, Start]) -> tuple[dict[str, int], dict[Any, list[str]]]:
    """The streams of ``starts`` whose start is an offset (as given), and the others grouped
    by their start (``first``, ``last``, ``next`` or a time): what each reader resolves, a
    group at a time."""
    resolved: dict[str, int] = {}
    groups: dict[Any, list[str]] = {}
    for stream, start in starts.items():
        if isinstance(start, int):
            resolved[stream] = start
        else:
            groups.setdefault(start, []).append(stream)
    return resolved, groups


def resolve_starts(connection: StreamConnection, starts: Mapping[str, Start],
                   wait: float) -> dict[str, int]:
    """Each stream's start as an offset: ``first`` and a moment are the offset of the first
    message delivered from there, ``last`` the first offset of the last chunk, ``next`` the
    tail; where nothing is delivered (an empty stream, a moment after the last message), the
    tail (0 for an empty stream). An offset stays as given.

    Raises:
        StreamReadError: a stream is missing or cannot be read.
    """
    resolved, groups = split_starts(starts)
    known_tails: dict[str, int] | None = None
    for start, streams in groups.items():
        found: dict[str, tuple[int, int]] = {}
        if start == "last":
            found = probe(connection, streams, "last", wait)
        elif start != "next":
            found = probe(connection, streams, start, wait, first_only=True)
        missing = [s for s in streams if s not in found]
        if missing and known_tails is None:
            known_tails = tails(connection, list(starts), wait)
        for stream in streams:
            if stream in found:
                resolved[stream] = found[stream][0]
            else:
                resolved[stream] = (known_tails or {}).get(stream, 0)
    return resolved


class Columns:
    """Rows of :data:`ARROW_SCHEMA`, column by column, from AMQP 0-9-1 deliveries (:meth:`add`;
    the stream-protocol reader's subclass adds AMQP 1.0 messages)."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.columns: dict[str, list[Any]] = {name: [] for name in ARROW_SCHEMA.names}

    def __len__(self) -> int:
        return len(self.columns["offset"])

    def add(self, offset: int, exchange: bytes, key: bytes, redelivered: bool,
            parts: list[bytes], properties: Any, now: datetime.datetime) -> None:
        columns = self.columns
        headers = properties.headers
        del headers[OFFSET_HEADER]
        columns["routing_key"].append(_text(key[1:]))
        columns["headers"].append(headers_json(headers) if headers else None)
        columns["body"].append(frames.body_of(parts))
        columns["exchange"].append(_text(exchange[1:]))
        columns["redelivered"].append(redelivered)
        columns["delivery_mode"].append(properties.delivery_mode)
        columns["priority"].append(properties.priority)
        timestamp = properties.timestamp
        columns["timestamp"].append(None if timestamp is None or timestamp > MAX_TIMESTAMP
                                    else timestamp * 1_000_000)
        columns["drained_at"].append(now)
        for name in _PROPERTIES:
            columns[name].append(_text(getattr(properties, name)))
        columns["stream"].append(self.stream)
        columns["offset"].append(offset)

    def batch(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_pydict(self.columns, schema=ARROW_SCHEMA)
        self.columns = {name: [] for name in ARROW_SCHEMA.names}
        return batch


def _text(raw: Any) -> Any:
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace")
    return raw


def read_range(uri: str, stream: str, low: int, high: int, *, prefetch: int = DEFAULT_PREFETCH,
               batch_rows: int = 10_000, timeout: float = 60.0,
               connection_name: str = "rtroute-stream-read") -> Iterator[pa.RecordBatch]:
    """The messages of ``stream`` with offsets in ``[low, high)``, as record batches of
    :data:`ARROW_SCHEMA` of at most ``batch_rows`` rows, in offset order.

    Every offset below ``high`` must have been seen to exist (``high`` at most a
    :func:`tails`): reading stops at the first delivery at or past ``high - 1``, so the same
    range always gives the same messages, without waiting for an idle stream. Offsets that
    retention has removed since are skipped (as they would be for any consumer).

    Raises:
        StreamReadError: the stream is missing, the connection failed, or no delivery came for
            ``timeout`` seconds.
    """
    if low >= high:
        return
    connection = StreamConnection(uri, connection_name)
    try:
        channel = connection.channel(prefetch)
        connection.consume(channel, stream, low, "rtroute-read")
        deliveries = connection.deliveries
        columns = Columns(stream)
        last_tag = 0
        last_delivery = time.monotonic()
        done = False
        while not done:
            connection.poll(0 if deliveries else 0.05)
            now = time.monotonic()
            if not deliveries:
                if now - last_delivery >= timeout:
                    raise StreamReadError(
                        f"stream {stream!r}: no message for {timeout:.0f} s while reading offsets "
                        f"{low}-{high - 1} (was the stream deleted and declared again?)")
                continue
            last_delivery = now
            received = datetime.datetime.now(datetime.timezone.utc)
            while deliveries:
                _, last_tag, exchange, key, redelivered, parts = deliveries.popleft()
                properties = decode_properties(parts[0])
                offset = _offset_of(properties.headers)
                if offset < low:
                    continue
                if offset >= high:
                    done = True
                    break
                columns.add(offset, exchange, key, redelivered, parts, properties, received)
                if offset >= high - 1:
                    done = True
                    break
                if len(columns) >= batch_rows:
                    yield columns.batch()
            if not done:  # one ack per round returns the credit: the broker sends more
                channel.basic_ack(last_tag, multiple=True)
        if len(columns):
            yield columns.batch()
    except _amqp_errors() as exc:
        raise _failure(stream, uri, exc) from None
    finally:
        connection.close()
