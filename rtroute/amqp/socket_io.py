"""Fewer system calls for a pika connection: bigger reads, one ``send`` per ioloop turn.

Kept for its import path: the code lives in :mod:`rtroute.amqp.pika_internals`, the one module
that reaches below pika's public API.
"""
from __future__ import annotations

from rtroute.amqp.pika_internals import COALESCE_BYTES, RECV_BYTES, coalesce_io

__all__ = ["COALESCE_BYTES", "RECV_BYTES", "coalesce_io"]
