"""Everything rtroute does below pika's public API, in one place, for the pika releases in
:data:`TESTED`.

rtroute's fast paths (the sidecar's and the shovel's) read and write frames as bytes, which
pika's API does not offer. This module is the only one that touches pika's private names:

- the connection's data callback and frame buffer (:func:`take_over_reading`), its frame
  dispatch (:func:`frame_processor`) and its raw write (:func:`emit`);
- the transport's send queue and read size (:func:`coalesce_io`), its write buffer
  (:func:`write_buffer_size`) and its socket reader (:func:`set_reading`);
- the channel under a ``BlockingChannel`` (:func:`blocking_channel_impl`) and the connection
  under a ``BlockingConnection`` (:func:`server_properties`).

pika may change any of that in any release (its main branch already has), so the dependency is
pinned to :data:`TESTED` (``pika>=1.3,<1.5`` in pyproject.toml; keep the two equal), importing
this module with another pika warns with :class:`UntestedPikaWarning`, and what is actually
missing is refused outright by :func:`check_connection` and :func:`coalesce_io` instead of
misbehaving. The AMQP method ids are :mod:`rtroute.amqp.methods`' (the spec's, as pika's).
"""
from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import pika
import pika.spec

__all__ = [
    "COALESCE_BYTES",
    "RECV_BYTES",
    "TESTED",
    "UntestedPikaWarning",
    "blocking_channel_impl",
    "check_connection",
    "coalesce_io",
    "emit",
    "frame_processor",
    "server_properties",
    "set_reading",
    "set_unparsed",
    "take_over_reading",
    "terminate_stream",
    "unparsed",
    "untested_reason",
    "warn_if_untested",
    "write_buffer_size",
]

TESTED = ((1, 3), (1, 5))
"""pika >= TESTED[0] and < TESTED[1] (major, minor): tested by CI at both ends (1.3.0, 1.4.x)."""

RECV_BYTES = 64 * 1024  # per recv
COALESCE_BYTES = 256 * 1024  # at most per send



# -- the version -------------------------------------------------------------------------------


class UntestedPikaWarning(RuntimeWarning):
    """The installed pika is outside the range rtroute was tested with."""


def _release(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: "1.4.0b1" -> (1, 4, 0)."""
    numbers = []
    for part in version.split("."):
        match = re.match(r"\d+", part)
        if match is None:
            break
        numbers.append(int(match.group()))
        if match.end() != len(part):
            break
    return tuple(numbers)


def untested_reason(version: str = pika.__version__) -> str | None:
    """Why rtroute is untested with pika ``version``, or None when it is inside :data:`TESTED`."""
    release = _release(version)
    (low_major, low_minor), (high_major, high_minor) = TESTED
    if release and (low_major, low_minor) <= release < (high_major, high_minor):
        return None
    tested = f">={low_major}.{low_minor},<{high_major}.{high_minor}"
    return (f"pika {version} is outside the range rtroute is tested with ({tested}); rtroute "
            "patches pika internals for its fast path and may fail or misbehave with it: "
            f"pip install 'pika{tested}'")


def warn_if_untested(version: str = pika.__version__) -> bool:
    """Warn (:class:`UntestedPikaWarning`) when pika ``version`` is outside :data:`TESTED`.

    Returns:
        True when it is (and the warning was issued).
    """
    reason = untested_reason(version)
    if reason is None:
        return False
    warnings.warn(reason, UntestedPikaWarning, stacklevel=2)
    return True


warn_if_untested()


# -- the connection ----------------------------------------------------------------------------


def check_connection(connection: Any) -> None:
    """Make sure ``connection`` (a pika ``Connection``) has what the frame fast path uses.

    Raises:
        RuntimeError: this pika lacks one of them (named in the message).
    """
    needed = {
        "connection._frame_buffer": hasattr(connection, "_frame_buffer"),
        "connection._process_frame": hasattr(connection, "_process_frame"),
        "connection._on_data_available": hasattr(connection, "_on_data_available"),
        "connection._adapter_emit_data": hasattr(connection, "_adapter_emit_data"),
        "connection.bytes_sent": hasattr(connection, "bytes_sent"),
    }
    missing = [name for name, present in needed.items() if not present]
    if missing:
        raise RuntimeError(f"pika {pika.__version__} lacks {', '.join(missing)}")


def take_over_reading(connection: Any, on_data: Callable[[bytes], Any]) -> None:
    """Hand every chunk ``connection`` reads to ``on_data(data)`` instead of pika's parser;
    ``on_data`` keeps an incomplete trailing frame with :func:`set_unparsed` and finds it
    again with :func:`unparsed`. Call :func:`check_connection` first."""
    connection._on_data_available = on_data


def unparsed(connection: Any) -> bytes:
    """The bytes ``connection`` read and did not parse yet (an incomplete frame)."""
    return connection._frame_buffer


def set_unparsed(connection: Any, data: bytes) -> None:
    """Keep ``data`` (an incomplete frame) for the next read of ``connection``."""
    connection._frame_buffer = data


def frame_processor(connection: Any) -> Callable[[Any], Any]:
    """pika's dispatch of one decoded frame (``pika.frame.decode_frame``'s value)."""
    return connection._process_frame


def emit(connection: Any, data: bytes, frames: int) -> None:
    """Write ready-made frames to ``connection`` (pika's own path, counters included)."""
    connection.bytes_sent += len(data)
    connection.frames_sent += frames
    connection._adapter_emit_data(data)


def terminate_stream(connection: Any, error: Exception) -> None:
    """Tear the connection down at once (the stream cannot be trusted): its close callbacks
    run as for a lost connection."""
    connection._frame_buffer = b""
    terminate = getattr(connection, "_terminate_stream", None)
    if terminate is not None:
        terminate(error)
    else:
        connection.close(501, str(error))


# -- the transport -----------------------------------------------------------------------------


def coalesce_io(connection: Any) -> None:
    """Patches an open pika connection's transport: reads of :data:`RECV_BYTES`, and the
    frames buffered during an ioloop turn sent with one ``send`` of up to
    :data:`COALESCE_BYTES` (pika writes every frame with its own ``send`` and reads 4 KiB at a
    time; at tens of thousands of messages per second those system calls dominate).

    Raises:
        RuntimeError: this pika lacks an internal the patch relies on (nothing is changed).
    """
    transport = getattr(connection, "_transport", None)
    missing = [name for name in ("_tx_buffers", "_produce") if not hasattr(transport, name)]
    if missing:
        raise RuntimeError(f"pika {pika.__version__} lacks transport.{', transport.'.join(missing)}")
    if hasattr(transport, "_MAX_RECV_BYTES"):
        transport._MAX_RECV_BYTES = RECV_BYTES
    buffers = transport._tx_buffers
    produce = transport._produce

    def coalescing_produce() -> None:
        if len(buffers) > 1:
            chunks = []
            size = 0
            while buffers and size < COALESCE_BYTES:
                chunk = buffers.popleft()
                chunks.append(chunk)
                size += len(chunk)
            buffers.appendleft(b"".join(chunks))
        produce()

    transport._produce = coalescing_produce


def write_buffer_size(connection: Any) -> int:
    """Bytes written to ``connection`` and not yet sent (0 if that cannot be told)."""
    transport = getattr(connection, "_transport", None)
    if transport is None:
        return 0
    try:
        return transport.get_write_buffer_size()
    except (AttributeError, OSError):
        return 0


def set_reading(connection: Any, on: bool) -> bool:
    """Stop or restart reading ``connection``'s socket, so that TCP back-pressure holds what
    the peer sends.

    Returns:
        True if done; False where it cannot be done: a TLS transport (it reads for the
        handshake and renegotiation too), a closed socket, or a pika without the internals.
    """
    transport = getattr(connection, "_transport", None)
    if type(transport).__name__ != "_AsyncPlaintextTransport":
        return False
    try:
        fd = transport._sock.fileno()
        if on:
            transport._nbio.set_reader(fd, transport._on_socket_readable)
        else:
            transport._nbio.remove_reader(fd)
    except (AttributeError, OSError, ValueError):
        return False
    return True


# -- channels ----------------------------------------------------------------------------------


def blocking_channel_impl(channel: Any) -> Any:
    """The ``pika.channel.Channel`` under a ``BlockingChannel``."""
    return channel._impl


def server_properties(connection: Any) -> Any:
    """The broker's ``connection.start`` properties of a ``SelectConnection`` or a
    ``BlockingConnection`` (which keeps them on the connection under it), or None."""
    return getattr(getattr(connection, "_impl", connection), "server_properties", None)
