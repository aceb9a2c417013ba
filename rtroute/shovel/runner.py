"""Several shovels in one process: one worker thread (and ioloop) per shovel.

Each :class:`~rtroute.shovel.worker.ShovelWorker` runs its source and destination connections
on its own ioloop in its own thread, so a slow or failing shovel never stalls another, and a
message never crosses threads on its way. The shovels share the status registry that the ops
endpoint serves (``/status``, ``/metrics``, ``/healthz``).
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any, Callable

from rtroute.shovel.config import ShovelConfig
from rtroute.shovel.status import StatusRegistry
from rtroute.shovel.worker import STOP_TIMEOUT, ShovelWorker

__all__ = ["ShovelRunner", "serve"]

LOGGER = logging.getLogger("rtroute.shovel")


class ShovelRunner:
    """Starts, watches and stops a set of shovels.

    Args:
        shovels: the shovels to run (names unique per vhost, as the config loaders ensure).
        registry: where their status goes (default: a new :class:`StatusRegistry`).
        **worker_options: passed to every :class:`ShovelWorker` (``shovelled_by``, ``rng``).

    Raises:
        ValueError: a shovel has a malformed broker URI (names the shovel).
    """

    def __init__(self, shovels: Sequence[ShovelConfig], registry: StatusRegistry | None = None,
                 **worker_options: Any) -> None:
        self.registry = registry or StatusRegistry()
        self.workers: list[ShovelWorker] = []
        for config in shovels:
            try:
                worker = ShovelWorker(config, self.registry.register(config), **worker_options)
            except ValueError as exc:
                raise ValueError(f"shovel {config.name!r}: {exc}") from None
            self.workers.append(worker)

    def start(self) -> ShovelRunner:
        """Start every shovel in its own thread; returns at once."""
        for worker in self.workers:
            worker.start()
        LOGGER.info("started %d shovel(s): %s", len(self.workers),
                    ", ".join(w.config.name for w in self.workers))
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop every shovel gracefully (any thread) and wait up to ``timeout`` + 5 s."""
        for worker in self.workers:
            worker.stop(timeout)
        deadline = time.monotonic() + timeout + 5
        for worker in self.workers:
            worker.join(max(0.0, deadline - time.monotonic()))

    @property
    def finished(self) -> bool:
        """True once every shovel ended (stopped, completed or terminated for good)."""
        return all(worker.finished for worker in self.workers)

    def status(self) -> dict[str, Any]:
        """The ops endpoint's status: ``{"healthy", "shovels", "metrics"}``."""
        return self.registry.status()


def serve(runner: ShovelRunner, http_listen: str | None, http_token: str | None = None,
          on_started: Callable[[Any], None] | None = None,
          keep_serving: bool = True, *, allow_unauthenticated_changes: bool = False,
          protect_reads: bool = False) -> None:
    """Run ``runner`` (and its HTTP endpoint) until SIGTERM/SIGINT, then stop gracefully.

    With ``keep_serving`` the process stays up after every shovel ended by itself (terminated
    for good or finished), so that ``/status`` can still be read; otherwise it returns.
    ``allow_unauthenticated_changes`` and ``protect_reads`` are those of
    :class:`rtroute.ops_http.OpsServer`.

    Raises:
        rtroute.ops_http.ListenError: the endpoint cannot listen (e.g. address in use).
    """
    from rtroute.ops_http import OpsServer

    http = OpsServer(http_listen, runner.status, token=http_token,
                     allow_unauthenticated_changes=allow_unauthenticated_changes,
                     protect_reads=protect_reads).start() if http_listen else None
    if http is not None:
        LOGGER.info("http endpoint on %s (/livez /readyz /status /metrics)", http_listen)
    stop_requested = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        LOGGER.info("signal %d: stopping the shovels (draining confirms)", signum)
        stop_requested.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        runner.start()
        if on_started is not None:
            on_started(http)
        while not stop_requested.wait(0.2):
            if not keep_serving and runner.finished:
                break
        runner.stop()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if http is not None:
            http.stop()
