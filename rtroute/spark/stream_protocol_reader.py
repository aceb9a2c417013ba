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
"""
from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote

import pyarrow as pa

from rtroute.amqp.amqp10_message import decode_message
from rtroute.amqp.stream_protocol import (
    StreamProtocolConnection,
    StreamProtocolError,
    chunk_messages,
)
from rtroute.spark.archive import MAX_TIMESTAMP
from rtroute.spark.header_json import headers_json
from rtroute.spark.stream_consumer import Columns, StreamReadError

__all__ = ["DEFAULT_CREDIT", "answers", "read_range"]

DEFAULT_CREDIT = 256
"""Chunks the broker may send ahead of the reader (one credit, one chunk); the reader gives
credit back in one frame per half of it read."""

_NOT_HEADERS_3 = frozenset(("x-basic-type", "x-basic-app-id"))
_ANNOTATIONS_4 = frozenset(("x-routing-key", "x-exchange", "x-basic-type", "x-cc"))


def _text(raw: Any) -> Any:
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace")
    if raw is None or isinstance(raw, str):
        return raw
    return str(raw)


class _Rows(Columns):
    """Rows of :data:`~rtroute.spark.stream_consumer.ARROW_SCHEMA` from AMQP 1.0 messages,
    column by column, as the broker of ``version`` converts them for AMQP 0-9-1."""

    def __init__(self, stream: str, version: str) -> None:
        super().__init__(stream)
        self.four = not version.startswith("3.")

    def add(self, offset: int, raw: Any, now: datetime.datetime  # type: ignore[override]
            ) -> None:
        message = decode_message(raw)
        columns = self.columns
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
        columns["routing_key"].append(annotations.get("x-routing-key", ""))
        columns["headers"].append(headers_json(dict(sorted(headers.items())))
                                  if headers else None)
        columns["body"].append(message.body)
        columns["exchange"].append(annotations.get("x-exchange", ""))
        columns["redelivered"].append(False)
        columns["delivery_mode"].append(None if delivery_mode is None else int(delivery_mode))
        columns["priority"].append(None if priority is None else int(priority))
        created = properties[9]
        timestamp = None if created is None else int(created) // 1000
        columns["timestamp"].append(None if timestamp is None or timestamp > MAX_TIMESTAMP
                                    else timestamp * 1_000_000)
        columns["drained_at"].append(now)
        # strings and symbols decode as str: _text only for what may be binary or a number
        columns["content_type"].append(properties[6])
        columns["content_encoding"].append(properties[7])
        columns["correlation_id"].append(_text(properties[5]))
        columns["reply_to"].append(_text(reply_to))
        columns["expiration"].append(_text(expiration))
        columns["message_id"].append(_text(properties[0]))
        columns["type"].append(_text(kind))
        columns["user_id"].append(_text(properties[1]))
        columns["app_id"].append(_text(app_id))
        columns["stream"].append(self.stream)
        columns["offset"].append(offset)


def read_range(stream_uri: str, stream: str, low: int, high: int, *,
               credit: int = DEFAULT_CREDIT, batch_rows: int = 10_000, timeout: float = 60.0,
               connection_name: str = "rtroute-stream-read") -> Iterator[pa.RecordBatch]:
    """The messages of ``stream`` with offsets in ``[low, high)`` over the stream protocol, as
    :func:`rtroute.spark.stream_consumer.read_range` gives them (same columns, same values,
    same contract: every offset below ``high`` must exist; offsets removed by retention are
    skipped).

    Raises:
        StreamReadError: the stream is missing, the connection failed, or no chunk came for
            ``timeout`` seconds.
    """
    if low >= high:
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
            offset = chunk.first_offset
            if offset + chunk.records <= low:
                continue
            for raw in chunk_messages(chunk):
                if offset >= high:
                    done = True
                    break
                if offset >= low:
                    rows.add(offset, raw, received)
                    if len(rows) >= batch_rows:
                        yield rows.batch()
                offset += 1
            done = done or offset >= high
        if len(rows):
            yield rows.batch()
    except StreamProtocolError as exc:
        raise StreamReadError(f"stream {stream!r}: {exc}") from None
    finally:
        connection.close()


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
