"""MessageFuture without a broker: done callbacks run exactly once, whichever thread adds them
and whenever the publisher's thread settles the future."""
from __future__ import annotations

import threading
import time

from rtroute.publisher import MessageFuture


class _Owner:
    """What a future needs of its publisher to take callbacks."""

    def __init__(self) -> None:
        self._condition = threading.Condition()


def test_a_callback_added_before_or_after_settling_runs_once():
    owner = _Owner()
    early, late = MessageFuture(owner, "k"), MessageFuture(owner, "k")
    calls: list[str] = []
    early.add_done_callback(lambda f: calls.append("early"))
    assert calls == []
    early._settle()
    late._settle()
    late.add_done_callback(lambda f: calls.append("late"))
    assert calls == ["early", "late"]
    early._settle()  # settling again runs nothing again
    assert calls == ["early", "late"]


def test_a_failing_callback_does_not_stop_the_next(caplog):
    future = MessageFuture(_Owner(), "k")
    calls: list[int] = []
    future.add_done_callback(lambda f: 1 / 0)
    future.add_done_callback(lambda f: calls.append(1))
    future._settle()
    assert calls == [1] and "done callback failed" in caplog.text


def test_adding_while_the_publisher_thread_settles_runs_each_callback_exactly_once():
    """The adding thread is held up just after it reads whether the future is done, so the
    publisher's thread settles the future right then (the race of a callback added as the
    confirm arrives)."""
    slot = MessageFuture._done  # the slot's descriptor
    adder: list[threading.Thread] = []

    class HeldUpFuture(MessageFuture):
        __slots__ = ()

        @property
        def _done(self) -> bool:
            done = slot.__get__(self)
            if threading.current_thread() in adder:
                time.sleep(0.001)
            return done

        @_done.setter
        def _done(self, value: bool) -> None:
            slot.__set__(self, value)

    owner = _Owner()
    futures = [HeldUpFuture(owner, str(i)) for i in range(200)]
    counts = [0] * len(futures)
    reached = [-1]  # the future the adding thread is at: the settling one settles it then

    def settle() -> None:
        for i, future in enumerate(futures):
            while reached[0] < i:
                time.sleep(0)
            future._settle()

    def add() -> None:
        for i, future in enumerate(futures):
            reached[0] = i
            future.add_done_callback(lambda f, i=i: counts.__setitem__(i, counts[i] + 1))

    threads = [threading.Thread(target=settle), threading.Thread(target=add)]
    adder.append(threads[1])
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counts == [1] * len(futures)
