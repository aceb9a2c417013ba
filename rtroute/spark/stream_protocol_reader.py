"""Reading a stream's offsets ``[low, high)`` over RabbitMQ's stream protocol, into the rows
:func:`rtroute.spark.stream_consumer.read_range` gives over AMQP 0-9-1.

The stream protocol (:mod:`rtroute.amqp.stream_protocol`) hands out the stream's chunks whole,
each message in AMQP 1.0 encoding as the broker stored it; an AMQP 0-9-1 consumer of the same
stream gets each message converted back by the broker. :func:`read_range` makes that conversion
here, as each broker version makes it (measured on 3.10.8 and 4.3.6; the tests compare both
readers row by row), so a row is the same whichever reader read it, ``drained_at`` aside:

- exchange and routing key: the message annotations ``x-exchange`` and ``x-routing-key``.
- headers: the application properties, sorted by name as RabbitMQ sorts a table; 3.10 keeps
  ``type`` and ``app_id`` there as ``x-basic-type`` and ``x-basic-app-id`` (not headers); 4.x
  keeps headers named ``x-...`` (arrays and tables included) as message annotations, ``CC`` as
  ``x-cc``, ``type`` as ``x-basic-type``.
- 3.10: delivery mode, priority and expiration in the message annotations
  ``x-basic-delivery-mode``, ``x-basic-priority``, ``x-basic-expiration``; 4.x: in the header
  section (durable gives delivery mode 2, else 1; ttl gives the expiration), ``app_id`` as the
  properties' ``group-id``, and ``reply_to`` as an address ``/queues/NAME``.
- the other properties from the properties section; ``timestamp`` from ``creation-time``
  (milliseconds, to the second as AMQP 0-9-1 has it).

Which rules apply is told by the broker's ``version`` peer property. Offsets are the stream's
own, so the Spark source's checkpoint means the same with either reader.

A chunk is read at once (:meth:`_Rows.add_chunk`): the messages in the common shape of an
AMQP 0-9-1 publish (a header, ``x-routing-key`` and ``x-exchange`` annotations, one data
section) by :func:`rtroute.core.amqp10.scan_chunk` (C, or its twin), column by column; every
other message by the full decoder (:mod:`rtroute.amqp.amqp10_message`), the same rows either way
(tests/spark/test_stream_protocol_rows.py). The driver finds offsets here too (:func:`tails`,
:func:`resolve_starts`): a subscription per stream, whose first chunk is the answer.
"""
from __future__ import annotations

import datetime
import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa

from rtroute.amqp.amqp10_message import decode_message
from rtroute.amqp.stream_protocol import Chunk, StreamProtocolConnection, StreamProtocolError
from rtroute.core.amqp10 import CHUNK_COMPRESSED, scan_chunk
from rtroute.spark.archive import MAX_TIMESTAMP
from rtroute.spark.header_json import headers_json
from rtroute.spark.stream_consumer import Columns, Start, StreamReadError, split_starts

__all__ = ["DEFAULT_CONNECTIONS", "DEFAULT_CREDIT", "MIN_SPLIT_OFFSETS", "answers",
           "first_chunks", "read_range", "resolve_starts", "tails"]

DEFAULT_CREDIT = 256
"""Chunks the broker may send ahead of the reader (one credit, one chunk); the reader gives
credit back in one frame per half of it read."""

DEFAULT_CONNECTIONS = 2
"""Connections over which ``read_range`` reads one range by default (see its docstring)."""
MIN_SPLIT_OFFSETS = 5_000
"""``read_range`` splits no part of a range below this many offsets."""
_AHEAD = 4  # batches a part's thread reads ahead of the caller

_NOT_HEADERS_3 = frozenset(("x-basic-type", "x-basic-app-id"))
_ANNOTATIONS_4 = frozenset(("x-routing-key", "x-exchange", "x-basic-type", "x-cc"))


def _text(raw: Any) -> Any:
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace")
    if raw is None or isinstance(raw, str):
        return raw
    return str(raw)


_DECODED = ("routing_key", "headers", "body", "exchange", "delivery_mode", "priority",
            "timestamp", "content_type", "content_encoding", "correlation_id", "reply_to",
            "expiration", "message_id", "type", "user_id", "app_id")
"""The columns a message's own encoding decides (the others: redelivered, drained_at, stream,
offset)."""
# of those, the ones the common shape (rtroute.core.amqp10) always leaves null
_NULL_IN_COMMON = ("headers", "timestamp", "content_type", "content_encoding", "correlation_id",
                   "reply_to", "message_id", "type", "user_id", "app_id")


class _Rows(Columns):
    """Rows of :data:`~rtroute.spark.stream_consumer.ARROW_SCHEMA` from AMQP 1.0 messages,
    column by column, as the broker of ``version`` converts them for AMQP 0-9-1: a chunk at a
    time (:meth:`add_chunk`: the common shape read by :func:`rtroute.core.amqp10.scan_chunk`,
    every other message by :meth:`decoded`), or a message at a time (:meth:`add`)."""

    def __init__(self, stream: str, version: str) -> None:
        super().__init__(stream)
        self.four = not version.startswith("3.")

    def add(self, offset: int, raw: Any, now: datetime.datetime  # type: ignore[override]
            ) -> None:
        """Adds the row of one encoded message (the full decoder's, :meth:`decoded`)."""
        columns = self.columns
        for name, value in zip(_DECODED, self.decoded(raw)):
            columns[name].append(value)
        columns["redelivered"].append(False)
        columns["drained_at"].append(now)
        columns["stream"].append(self.stream)
        columns["offset"].append(offset)

    def add_chunk(self, chunk: Chunk, low: int, high: int, now: datetime.datetime) -> int:
        """Adds the rows of the chunk's messages with offsets in ``[low, high)``; returns how
        many.

        Raises:
            StreamProtocolError: a compressed sub-batch entry (written by a stream-protocol
                publisher that batches with compression; not supported here), or an entry
                that runs past the chunk.
        """
        skip = max(0, low - chunk.first_offset)
        first = chunk.first_offset + skip
        keys: list = []
        exchanges: list = []
        bodies: list = []
        durables: list = []
        priorities: list = []
        ttls: list = []
        general: list = []
        taken, status = scan_chunk(chunk.data, skip, max(0, high - first), keys, exchanges,
                                   bodies, durables, priorities, ttls, general)
        if status:
            raise StreamProtocolError("a compressed sub-batch entry: not supported"
                                      if status == CHUNK_COMPRESSED else
                                      f"chunk at offset {chunk.first_offset}: an entry runs "
                                      "past its end")
        if not taken:
            return 0
        columns = self.columns
        base = len(columns["offset"])
        columns["routing_key"] += ["" if k is None else k for k in keys]
        columns["exchange"] += ["" if e is None else e for e in exchanges]
        columns["body"] += bodies
        if self.four:  # the header section (absent: not durable)
            columns["delivery_mode"] += [2 if d == 1 else 1 for d in durables]
            columns["priority"] += [None if p is None or p < 0 else p for p in priorities]
            columns["expiration"] += [None if t is None or t < 0 else str(t) for t in ttls]
        else:  # in annotations that the common shape does not have
            nulls = [None] * taken
            columns["delivery_mode"] += nulls
            columns["priority"] += nulls
            columns["expiration"] += nulls
        nulls = [None] * taken
        for name in _NULL_IN_COMMON:
            columns[name] += nulls
        columns["redelivered"] += [False] * taken
        columns["drained_at"] += [now] * taken
        columns["stream"] += [self.stream] * taken
        columns["offset"] += range(first, first + taken)
        for index, raw in general:
            for name, value in zip(_DECODED, self.decoded(raw)):
                columns[name][base + index] = value
        return taken

    def decoded(self, raw: Any) -> tuple:
        """The values of the :data:`_DECODED` columns for one encoded message.

        Raises:
            rtroute.amqp.amqp10_message.AMQP10DecodeError: not a well-formed message.
        """
        message = decode_message(raw)
        annotations: Mapping[str, Any] = message.message_annotations or {}
        application = message.application_properties or {}
        properties = message.properties or []
        properties = properties + [None] * (13 - len(properties))
        if self.four:
            headers = dict(application)
            for name, value in annotations.items():
                if name == "x-cc":
                    headers["CC"] = value
                elif name not in _ANNOTATIONS_4 and isinstance(name, str) \
                        and name.startswith("x-"):
                    headers[name] = value
            header = message.header or []
            header = header + [None] * (3 - len(header))
            delivery_mode = 2 if header[0] else 1
            priority = header[1]
            expiration = None if header[2] is None else str(int(header[2]))
            kind = annotations.get("x-basic-type")
            app_id = properties[10]
            reply_to = properties[4]
            if isinstance(reply_to, str) and reply_to.startswith("/queues/"):
                reply_to = unquote(reply_to[8:])
        else:
            headers = {k: v for k, v in application.items() if k not in _NOT_HEADERS_3}
            delivery_mode = annotations.get("x-basic-delivery-mode")
            priority = annotations.get("x-basic-priority")
            expiration = annotations.get("x-basic-expiration")
            kind = application.get("x-basic-type")
            app_id = application.get("x-basic-app-id")
            reply_to = properties[4]
        created = properties[9]
        timestamp = None if created is None else int(created) // 1000
        # strings and symbols decode as str: _text only for what may be binary or a number
        return (annotations.get("x-routing-key", ""),
                headers_json(dict(sorted(headers.items()))) if headers else None,
                message.body,
                annotations.get("x-exchange", ""),
                None if delivery_mode is None else int(delivery_mode),
                None if priority is None else int(priority),
                None if timestamp is None or timestamp > MAX_TIMESTAMP else timestamp * 1_000_000,
                properties[6], properties[7], _text(properties[5]), _text(reply_to),
                _text(expiration), _text(properties[0]), _text(kind), _text(properties[1]),
                _text(app_id))


def read_range(stream_uri: str, stream: str, low: int, high: int, *,
               credit: int = DEFAULT_CREDIT, batch_rows: int = 10_000, timeout: float = 60.0,
               connection_name: str = "rtroute-stream-read",
               connections: int = DEFAULT_CONNECTIONS) -> Iterator[pa.RecordBatch]:
    """The messages of ``stream`` with offsets in ``[low, high)`` over the stream protocol, as
    :func:`rtroute.spark.stream_consumer.read_range` gives them (same columns, same values,
    same contract: every offset below ``high`` must exist; offsets removed by retention are
    skipped).

    ``connections`` above 1 splits the range into that many consecutive parts (none under
    :data:`MIN_SPLIT_OFFSETS`), each read on a connection of its own in a thread, the batches
    still given in offset order (:func:`_read_split`): the broker sends each subscription's
    chunks from its connection's own process, so where its cost per chunk is the limit
    (RabbitMQ 3.10 and small chunks) the parts are read side by side.

    Raises:
        StreamReadError: the stream is missing, the connection failed, or no chunk came for
            ``timeout`` seconds.
    """
    if low >= high:
        return
    parts = min(connections, (high - low) // MIN_SPLIT_OFFSETS)
    if parts > 1:
        step = -(-(high - low) // parts)
        yield from _read_split(stream_uri, stream, [
            (at, min(at + step, high)) for at in range(low, high, step)],
            credit=credit, batch_rows=batch_rows, timeout=timeout,
            connection_name=connection_name)
        return
    try:
        connection = StreamProtocolConnection(stream_uri, connection_name)
    except StreamProtocolError as exc:
        raise StreamReadError(f"stream {stream!r}: {exc}") from None
    try:
        rows = _Rows(stream, connection.server_properties.get("version") or "")
        connection.subscribe(stream, low, credit)
        done = False
        owed = 0  # chunks read and not yet credited again
        while not done:
            chunk = connection.next_chunk(timeout)
            if chunk is None:
                raise StreamReadError(
                    f"stream {stream!r}: no message for {timeout:.0f} s while reading offsets "
                    f"{low}-{high - 1} (was the stream deleted and declared again?)")
            owed += 1
            if owed * 2 >= credit:
                connection.credit(owed)
                owed = 0
            received = datetime.datetime.now(datetime.timezone.utc)
            if chunk.first_offset + chunk.records <= low:
                continue
            taken = rows.add_chunk(chunk, low, high, received)
            if len(rows) >= batch_rows:
                yield rows.batch()
            done = max(low, chunk.first_offset) + taken >= high
        if len(rows):
            yield rows.batch()
    except StreamProtocolError as exc:
        raise StreamReadError(f"stream {stream!r}: {exc}") from None
    finally:
        connection.close()


def _read_split(stream_uri: str, stream: str, ranges: Sequence[tuple[int, int]],
                **options: Any) -> Iterator[pa.RecordBatch]:
    """The batches of each of ``ranges`` in turn, each range read by :func:`read_range` in a
    thread of its own, at most :data:`_AHEAD` batches ahead of the caller. A thread's error is
    raised where its range's batches would have come; the caller leaving early stops them all
    (each closes its connection)."""
    queues: list[queue.Queue] = [queue.Queue(_AHEAD) for _ in ranges]
    stop = threading.Event()

    def put(into: queue.Queue, item: Any) -> bool:
        while not stop.is_set():
            try:
                into.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work(into: queue.Queue, low: int, high: int) -> None:
        try:
            # one connection for this part: a part is not split again
            for batch in read_range(stream_uri, stream, low, high, connections=1, **options):
                if not put(into, batch):
                    return
            put(into, None)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
            put(into, exc)

    threads = [threading.Thread(target=work, args=(into, low, high), daemon=True,
                                name=f"rtroute-stream-read-{low}")
               for into, (low, high) in zip(queues, ranges)]
    for thread in threads:
        thread.start()
    try:
        for into in queues:
            while (item := into.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
    finally:
        stop.set()
        for thread in threads:
            thread.join()


_GROUP = 200  # streams subscribed at once by first_chunks (subscription ids are one byte)


def first_chunks(connection: StreamProtocolConnection, streams: Sequence[str], start: Start,
                 wait: float) -> dict[str, tuple[int, int]]:
    """Each stream's first chunk delivered from ``start``: its first offset and one past its
    last. From ``last`` that is the stream's last chunk, so the second is the tail: every
    offset below it exists (a consumer is only ever sent committed chunks). One subscription
    of one credit per stream, all at once; a stream that delivered nothing in ``wait``
    seconds (empty, or nothing at or after ``start``) is absent from the result.

    Raises:
        StreamProtocolError: a stream does not exist (code 2), or the connection failed.
    """
    found: dict[str, tuple[int, int]] = {}
    for at in range(0, len(streams), _GROUP):
        ids: dict[int, str] = {}
        try:
            for stream in streams[at:at + _GROUP]:
                subscription = connection.next_subscription()
                connection.subscribe(stream, start, 1, subscription)
                ids[subscription] = stream
            deadline = time.monotonic() + wait
            while len(found) < at + len(ids):
                left = deadline - time.monotonic()
                chunk = connection.next_chunk(left) if left > 0 else None
                if chunk is None:
                    break
                stream = ids.get(chunk.subscription)
                if stream is not None and stream not in found:
                    found[stream] = (chunk.first_offset, chunk.first_offset + chunk.records)
        finally:
            for subscription in ids:
                connection.unsubscribe(subscription)
    return found


def tails(connection: StreamProtocolConnection, streams: Sequence[str],
          wait: float) -> dict[str, int]:
    """Each non-empty stream's tail (see :func:`first_chunks`): one past the last offset of
    its last chunk, without waiting for the stream to go idle.

    Raises:
        StreamProtocolError: as :func:`first_chunks`.
    """
    return {stream: end for stream, (_, end) in first_chunks(connection, streams, "last",
                                                             wait).items()}


def resolve_starts(connection: StreamProtocolConnection, starts: Mapping[str, Start],
                   wait: float) -> dict[str, int]:
    """Each stream's start as an offset, as :func:`rtroute.spark.stream_consumer.
    resolve_starts` gives it over AMQP 0-9-1: ``first``, ``last`` and a moment are the first
    offset of the first chunk delivered from there (a moment is chunk-granular there too),
    ``next`` the tail; where nothing is delivered, the tail (0 for an empty stream). An
    offset stays as given.

    Raises:
        StreamProtocolError: as :func:`first_chunks`.
    """
    resolved, groups = split_starts(starts)
    known_tails: dict[str, int] | None = None
    for start, streams in groups.items():
        found = {} if start == "next" else first_chunks(connection, streams, start, wait)
        if len(found) < len(streams) and known_tails is None:
            known_tails = tails(connection, list(starts), wait)
        for stream in streams:
            resolved[stream] = found[stream][0] if stream in found else \
                (known_tails or {}).get(stream, 0)
    return resolved


def answers(stream_uri: str, timeout: float = 3.0) -> dict[str, Any] | None:
    """The broker's peer properties if the stream port of ``stream_uri`` answers and takes the
    login, else None."""
    try:
        connection = StreamProtocolConnection(stream_uri, "rtroute-stream-probe", timeout)
    except (StreamProtocolError, ValueError):
        return None
    try:
        return dict(connection.server_properties)
    finally:
        connection.close()
