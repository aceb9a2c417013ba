"""Fewer system calls for a pika connection: bigger reads, one ``send`` per ioloop turn.

pika writes every frame with its own ``send`` (a publish is three frames) and reads 4 KiB at a
time; at tens of thousands of messages per second those system calls dominate the process.
This relies on two internals of pika's transport, checked before patching.
"""
from __future__ import annotations

from typing import Any

import pika

from rtroute.amqp.pika_version import warn_if_untested

warn_if_untested()  # the internals patched here (and in frames.py) are pika's, not its API

RECV_BYTES = 64 * 1024  # per recv
COALESCE_BYTES = 256 * 1024  # at most per send


def coalesce_io(connection: Any) -> None:
    """Patches an open pika connection's transport: reads of :data:`RECV_BYTES`, and the
    frames buffered during an ioloop turn sent with one ``send`` of up to
    :data:`COALESCE_BYTES`.

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
