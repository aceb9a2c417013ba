"""Hands callbacks from another thread to an asyncio loop, in order and in turns.

The proxy's catalog hears of each binding in its pika thread and applies it in the asyncio
loop. One ``call_soon_threadsafe`` per binding would queue 300,000 callbacks at once for a
listing of 300,000 bindings: the loop would run them all before anything else, its clients and
``/readyz`` (which then times out instead of saying how far the load is) waiting meanwhile.
:class:`LoopQueue` wakes the loop once, then runs the queued callbacks in turns of at most
:data:`TURN` seconds, letting the loop serve the rest between turns; the order is kept.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from typing import Any, Callable

__all__ = ["BATCH", "TURN", "LoopQueue"]

LOG = logging.getLogger(__name__)
TURN = 0.01  # seconds of queued callbacks the loop runs before it serves anything else
BATCH = 1024  # items put one by one (put_each) that one callback takes, at most


class _Items(list):
    """The items of one :meth:`LoopQueue.put_each` batch (a list a plain ``put`` never
    queues: only such a batch is added to)."""


class LoopQueue:
    """Callbacks for ``loop``, put from any thread (:meth:`put`), run in the loop in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queued: collections.deque[tuple[Callable[..., Any], tuple]] = \
            collections.deque()
        self._lock = threading.Lock()
        self._scheduled = False  # a drain is scheduled or running

    def put(self, callback: Callable[..., Any], *args: Any) -> None:
        """Runs ``callback(*args)`` in the loop after everything put before it (nothing if
        the loop is closed: the proxy is stopping)."""
        with self._lock:
            self._queued.append((callback, args))
            wake = self._claim_drain()
        if wake:
            self._wake()

    def put_each(self, callback: Callable[[list[Any]], Any], item: Any) -> None:
        """Runs ``callback(items)`` in the loop, in order with :meth:`put`: ``item`` joins the
        items of the callback queued last when it is the same callback put so, not run yet and
        holds fewer than :data:`BATCH` (one loop callback per batch: a listing's 1,000,000
        bindings applied one callback each took the proxy twice as long as the sidecar)."""
        with self._lock:
            queued = self._queued
            if queued:
                last, args = queued[-1]
                if last == callback and type(args[0]) is _Items and len(args[0]) < BATCH:
                    args[0].append(item)
                    return
            queued.append((callback, (_Items((item,)),)))
            wake = self._claim_drain()
        if wake:
            self._wake()

    def _claim_drain(self) -> bool:
        """(Lock held.) Whether the caller is to schedule the drain: none is scheduled yet."""
        if self._scheduled:
            return False
        self._scheduled = True
        return True

    def _wake(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:
            pass  # the loop is closed

    def _drain(self) -> None:
        deadline = time.monotonic() + TURN
        queued = self._queued
        while True:
            with self._lock:
                if not queued:
                    self._scheduled = False
                    return
                batch = [queued.popleft() for _ in range(min(len(queued), 256))]
            for callback, args in batch:
                try:
                    callback(*args)
                except Exception:
                    LOG.exception("callback %r failed", callback)
            if time.monotonic() >= deadline:
                self._loop.call_soon(self._drain)  # the others' turn, then the rest
                return
