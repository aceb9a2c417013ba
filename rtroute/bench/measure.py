"""Timing helpers shared by the broker benchmarks."""
from __future__ import annotations

import json
import os
import time
import urllib.request


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


def process_cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds process ``pid`` has used (Linux ``/proc``), or None."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def find_process(command: str) -> int | None:
    """The pid of a local process whose command name is ``command`` (e.g. ``beam.smp``, the
    broker on this machine), or None (not Linux, not local, not found)."""
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
                if f.read().strip() == command:
                    return pid
        except OSError:
            continue
    return None


class CpuMeter:
    """CPU seconds that processes (by pid; None entries are skipped) use between
    :meth:`start` and :meth:`stop`."""

    def __init__(self, **pids: int | None) -> None:
        self.pids = pids
        self._start: dict[str, float | None] = {}

    def start(self) -> None:
        self._start = {name: process_cpu_seconds(pid) for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float | None]:
        used: dict[str, float | None] = {}
        for name, pid in self.pids.items():
            now, then = process_cpu_seconds(pid), self._start.get(name)
            used[name] = None if now is None or then is None else now - then
        return used


def sidecar_status(port: int) -> dict:
    """The ``/status`` of an `rtroute run` process listening on ``127.0.0.1:PORT``.

    Raises:
        OSError: it does not answer (yet).
    """
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as r:
        return json.load(r)
