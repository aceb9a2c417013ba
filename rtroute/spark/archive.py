"""Drain a RabbitMQ queue into Parquet files: the archive that the Spark job routes.

Messages are consumed with manual acks and a prefetch of one file's worth. Each file is written
under a hidden temporary name, flushed and fsynced, renamed into place and the directory fsynced;
only then are its messages acked (one ``multiple`` ack). A crash before the ack leaves them
unacked, so the broker redelivers them: at-least-once, a message may appear in two files (the
``redelivered`` column says when the broker knew it had delivered it before).

Columns: ``routing_key``, ``headers`` (JSON text that keeps every AMQP type, see
:mod:`rtroute.spark.header_json`), ``body`` (binary), ``exchange``, ``redelivered``, the basic
properties (``content_type``, ``content_encoding``, ``delivery_mode``, ``priority``,
``correlation_id``, ``reply_to``, ``expiration``, ``message_id``, ``timestamp``, ``type``,
``user_id``, ``app_id``) and ``drained_at``.

Deliveries are read as frames and decoded without pika (:mod:`rtroute.amqp.content_header`):
a ``double`` header stays 10.7 (pika reads 10), and a message pika cannot decode at all (a
timestamp in milliseconds, as Node.js clients send, is beyond ``datetime``; a table nested
a few hundred deep) is archived like any other. A ``timestamp`` property beyond what Spark
reads (about the year 294,000: a client that sent microseconds) is null in its column.

Messages are private: files are created ``0600`` and the directories a drain creates ``0700``,
whatever the umask, unless the caller passes another ``mode`` (directories then get the
matching search bits: ``0640`` gives ``0750``).
"""
from __future__ import annotations

import collections
import datetime
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from rtroute.amqp import connect_blocking, frames, mask_uri
from rtroute.amqp.content_header import decode_properties
from rtroute.spark.header_json import headers_json

__all__ = ["DEFAULT_MODE", "SCHEMA", "DrainError", "DrainStats", "drain", "headers_json",
           "write_part"]

MAX_PREFETCH = 65535  # basic.qos prefetch_count is a short
#: Permissions of the files a drain writes (their directories get the matching search bits).
DEFAULT_MODE = 0o600

_PROPERTIES = ("content_type", "content_encoding", "correlation_id", "reply_to", "expiration",
               "message_id", "type", "user_id", "app_id")

SCHEMA = pa.schema(
    [("routing_key", pa.string()), ("headers", pa.string()), ("body", pa.binary()),
     ("exchange", pa.string()), ("redelivered", pa.bool_())]
    + [(name, pa.string()) for name in _PROPERTIES[:5]]
    + [("delivery_mode", pa.int32()), ("priority", pa.int32())]
    + [(name, pa.string()) for name in _PROPERTIES[5:]]
    + [("timestamp", pa.timestamp("s", tz="UTC")), ("drained_at", pa.timestamp("ms", tz="UTC"))]
)


class DrainError(RuntimeError):
    """The queue cannot be drained (missing queue, refused access, lost connection)."""


@dataclass
class DrainStats:
    """What a drain wrote.

    Attributes:
        messages: messages written and acked.
        files: the Parquet files, in the order written.
        bytes: their total size.
        seconds: wall time.
    """

    messages: int = 0
    files: list[str] = field(default_factory=list)
    bytes: int = 0
    seconds: float = 0.0


# Spark reads Parquet timestamps as microseconds in 64 bits: seconds beyond this overflow
MAX_TIMESTAMP = (1 << 63) // 1_000_000 - 1


def _text(raw: Any) -> Any:
    """A short string as a Parquet string (bytes that are not UTF-8 with replacements)."""
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace")
    return raw


def _row(exchange: bytes, routing_key: bytes, redelivered: bool, parts: list[bytes],
         now: datetime.datetime) -> dict[str, Any]:
    """One archive row from a delivery: exchange and routing key as short strings (length
    octet first), the content frames as received."""
    properties = decode_properties(parts[0])
    timestamp = properties.timestamp
    row = {
        "routing_key": _text(routing_key[1:]),
        "headers": headers_json(properties.headers),
        "body": frames.body_of(parts),
        "exchange": _text(exchange[1:]),
        "redelivered": redelivered,
        "delivery_mode": properties.delivery_mode,
        "priority": properties.priority,
        "timestamp": timestamp if timestamp is None or timestamp <= MAX_TIMESTAMP else None,
        "drained_at": now,
    }
    for name in _PROPERTIES:
        row[name] = _text(getattr(properties, name))
    return row


def directory_mode(mode: int) -> int:
    """The mode of a directory holding files of ``mode``: each class that may read the files
    may also enter the directory (``0600`` -> ``0700``, ``0640`` -> ``0750``)."""
    return mode | (mode & 0o444) >> 2


def check_mode(mode: int) -> int:
    """``mode`` if it suits archive files: permission bits only, readable and writable by the
    owner.

    Raises:
        ValueError: it does not.
    """
    if not 0 <= mode <= 0o777 or mode & 0o600 != 0o600:
        raise ValueError(f"file mode must be 0600-0777 with owner read and write (0600, 0640, "
                         f"0644...), not {mode:#o}")
    return mode


def make_directory(directory: Path, mode: int = DEFAULT_MODE) -> None:
    """Creates ``directory`` and its missing parents with :func:`directory_mode` of ``mode``
    (existing ones are left as they are)."""
    missing = []
    for path in (directory, *directory.parents):
        if path.is_dir():
            break
        missing.append(path)
    for path in reversed(missing):
        try:
            os.mkdir(path, directory_mode(mode))
        except FileExistsError:
            if not path.is_dir():
                raise
            continue  # a concurrent drain made it: its mode is its own
        os.chmod(path, directory_mode(mode))  # exactly, whatever the umask


def write_part(rows: list[dict[str, Any]], directory: Path, name: str,
               mode: int = DEFAULT_MODE) -> Path:
    """Writes ``rows`` to ``directory/name`` durably: temp file, fsync, rename, fsync the dir.

    The file has permissions ``mode`` from its creation on (whatever the umask); an existing
    file (or link) at the temporary name is an error, never overwritten or followed.

    Raises:
        OSError: the write failed; nothing is left under ``name``.
    """
    final = directory / name
    temporary = directory / f".{name}.tmp"  # hidden: Spark and pyarrow skip it
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o600)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            fd = -1  # closed by f from here on
            pq.write_table(table, f, compression="zstd")
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, final)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        temporary.unlink(missing_ok=True)
        raise
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return final


def drain(uri: str, queue: str, out: str | os.PathLike, *, batch_size: int = 10_000,
          idle_timeout: float = 2.0, flush_interval: float = 30.0,
          max_messages: int | None = None, connection_name: str = "rtroute-drain",
          echo: Callable[[str], None] | None = None, mode: int = DEFAULT_MODE) -> DrainStats:
    """Consumes ``queue`` into Parquet files under ``out`` until it stays empty.

    Args:
        uri: the broker's AMQP URI.
        queue: the queue to drain (it must exist).
        out: a directory (created if needed); files are named ``part-<time>-<n>-<id>.parquet``,
            so several drains can write into the same directory.
        batch_size: messages per file (also the prefetch window), at most 65535.
        idle_timeout: stop after this many seconds without a message.
        flush_interval: write a partial file when its oldest message waited this long.
        max_messages: stop after this many messages (None: until idle).
        echo: progress lines (one per file).
        mode: permissions of the files (``0600``: the owner's only); directories the drain
            creates get :func:`directory_mode` of it.

    Raises:
        ValueError: a malformed URI, an out-of-range ``batch_size`` or a bad ``mode``.
        DrainError: the queue does not exist, or the broker refused or dropped the connection;
            what was written so far is acked, the rest stays in the queue.
        OSError: a file could not be written; its messages stay in the queue.
    """
    import pika

    if not 1 <= batch_size <= MAX_PREFETCH:
        raise ValueError(f"batch_size must be between 1 and {MAX_PREFETCH}, not {batch_size}")
    check_mode(mode)
    directory = Path(out)
    make_directory(directory, mode)
    echo = echo or (lambda _line: None)
    stats = DrainStats()
    run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    try:
        connection = connect_blocking(uri, connection_name=connection_name)
    except pika.exceptions.AMQPError as exc:
        raise DrainError(str(exc)) from None
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=batch_size)
        deliveries: collections.deque[tuple] = collections.deque()
        reader = frames.install(connection._impl)
        reader.intercept(channel.channel_number,
                         lambda tag, exchange, key, parts, _consumer, redelivered:
                         deliveries.append((tag, exchange, key, redelivered, parts)),
                         detailed=True)
        rows: list[dict[str, Any]] = []
        last_tag = 0
        oldest = 0.0

        def flush() -> None:
            nonlocal rows
            name = f"part-{run_id}-{len(stats.files):05d}.parquet"
            path = write_part(rows, directory, name, mode)
            channel.basic_ack(last_tag, multiple=True)
            stats.messages += len(rows)
            stats.files.append(str(path))
            stats.bytes += path.stat().st_size
            elapsed = time.monotonic() - start
            echo(f"wrote {path.name}: {len(rows):,} messages; {stats.messages:,} drained "
                 f"({stats.messages / elapsed:,.0f} msg/s)")
            rows = []

        def unexpected(*_args: Any) -> None:  # deliveries go to the frame reader
            raise DrainError("a delivery bypassed the frame reader")

        channel.basic_consume(queue, unexpected, auto_ack=False)
        want = max_messages if max_messages is not None else float("inf")
        last_seen = time.monotonic()
        done = False
        while not done:
            connection.process_data_events(0 if deliveries else 0.05)
            now = time.monotonic()
            if not deliveries:
                if now - last_seen >= idle_timeout:  # the queue is drained
                    break
                if rows and now - oldest >= flush_interval:
                    flush()
                continue
            last_seen = now
            while deliveries:
                tag, exchange, key, redelivered, parts = deliveries.popleft()
                if not rows:
                    oldest = now
                rows.append(_row(exchange, key, redelivered, parts,
                                 datetime.datetime.now(datetime.timezone.utc)))
                last_tag = tag
                if (len(rows) >= batch_size or stats.messages + len(rows) >= want
                        or now - oldest >= flush_interval):
                    flush()
                    if stats.messages >= want:
                        # what was prefetched beyond goes back when the connection closes
                        done = True
                        break
        if rows:
            flush()
    except pika.exceptions.ChannelClosedByBroker as exc:
        raise DrainError(f"{queue}: {exc.reply_code} {exc.reply_text}") from None
    except pika.exceptions.AMQPConnectionError as exc:
        raise DrainError(f"connection to {mask_uri(uri)} lost: {exc!r}") from None
    finally:
        if connection.is_open:
            connection.close()
        stats.seconds = time.monotonic() - start
    return stats
