"""Timing helpers shared by the broker benchmarks."""
from __future__ import annotations

import time


def wait_for_depth(channel, queues: list[str], total: int, timeout: float) -> float:
    """Polls (passive declares) until ``queues`` hold ``total`` messages together; returns the
    ``time.monotonic()`` at which they did.

    Raises:
        TimeoutError: not reached within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        have = sum(channel.queue_declare(q, passive=True).method.message_count for q in queues)
        if have >= total:
            return time.monotonic()
        time.sleep(0.02)
    raise TimeoutError(f"queues hold fewer than {total} messages after {timeout} s")
