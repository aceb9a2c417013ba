"""The pika releases rtroute is tested with.

Kept for its import path: the range and its check live in :mod:`rtroute.amqp.pika_internals`,
the one module that reaches below pika's public API (``pika>=1.3,<1.5`` in pyproject.toml; keep
the two equal).
"""
from __future__ import annotations

from rtroute.amqp.pika_internals import (
    TESTED,
    UntestedPikaWarning,
    untested_reason,
    warn_if_untested,
)

__all__ = ["TESTED", "UntestedPikaWarning", "untested_reason", "warn_if_untested"]
