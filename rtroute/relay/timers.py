"""The relay's timers: each remembers the generation it was armed in, so none of a previous
connection (or of a relay that has stopped) runs after :meth:`Timers.cancel_all`."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Timers"]


class Timers:
    """``call_later`` on ``ioloop``, with every pending timer cancelled by :meth:`cancel_all`
    (a callback that the ioloop runs anyway, because it was already due, does nothing)."""

    def __init__(self, ioloop: Any) -> None:
        self.ioloop = ioloop
        self.generation = 0
        self._handles: dict[int, Any] = {}
        self._next = 0

    def __len__(self) -> int:
        """Timers armed and not yet run or cancelled."""
        return len(self._handles)

    def later(self, delay: float, callback: Callable[[], Any]) -> int:
        """Run ``callback()`` after ``delay`` seconds unless cancelled first; returns its key
        for :meth:`cancel`."""
        key = self._next
        self._next = key + 1
        generation = self.generation

        def run() -> None:
            if self._handles.pop(key, None) is not None and generation == self.generation:
                callback()

        self._handles[key] = self.ioloop.call_later(delay, run)
        return key

    def cancel(self, key: int) -> None:
        """Cancel one timer (a no-op once it ran or was cancelled)."""
        handle = self._handles.pop(key, None)
        if handle is not None:
            self.ioloop.remove_timeout(handle)

    def cancel_all(self) -> None:
        """Cancel every pending timer; start a new generation."""
        self.generation += 1
        handles, self._handles = self._handles, {}
        for handle in handles.values():
            self.ioloop.remove_timeout(handle)
