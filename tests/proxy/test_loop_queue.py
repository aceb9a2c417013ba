"""LoopQueue: callbacks handed from another thread run in the loop in their order, in turns
that let the loop serve the rest between them (a listing of 300,000 bindings must not hold
every client and /readyz until it is applied)."""
from __future__ import annotations

import asyncio
import threading

from rtroute.proxy import loop_queue
from rtroute.proxy.loop_queue import LoopQueue


def test_callbacks_from_a_thread_run_in_order_and_the_loop_serves_others_between_turns(
        monkeypatch):
    monkeypatch.setattr(loop_queue, "TURN", 0.001)
    ran: list[int] = []
    others: list[int] = []  # how many queued callbacks had run when the loop served another

    async def main() -> None:
        loop = asyncio.get_running_loop()
        queue = LoopQueue(loop)
        done = asyncio.Event()

        def slow(i: int) -> None:
            ran.append(i)
            sum(range(2000))  # some work, as applying a binding is

        def put_all() -> None:
            for i in range(20_000):
                queue.put(slow, i)
            queue.put(done.set)

        def other() -> None:
            others.append(len(ran))
            if not done.is_set():
                loop.call_soon(other)

        threading.Thread(target=put_all).start()
        loop.call_soon(other)
        await asyncio.wait_for(done.wait(), 60)

    asyncio.run(main())
    assert ran == list(range(20_000))
    # the loop's other work ran while the queue was being drained, not only before and after
    assert any(0 < n < 20_000 for n in others), others[:5]


def test_a_failing_callback_is_logged_and_the_next_ones_run(caplog):
    ran: list[str] = []

    async def main() -> None:
        queue = LoopQueue(asyncio.get_running_loop())
        done = asyncio.Event()
        queue.put(lambda: 1 / 0)
        queue.put(ran.append, "after")
        queue.put(done.set)
        await asyncio.wait_for(done.wait(), 5)

    asyncio.run(main())
    assert ran == ["after"]
    assert any("failed" in r.getMessage() for r in caplog.records)


def test_nothing_is_run_once_the_loop_is_closed():
    loop = asyncio.new_event_loop()
    queue = LoopQueue(loop)
    loop.close()
    queue.put(lambda: None)  # no error: the proxy is stopping


def test_items_put_one_by_one_reach_the_loop_in_batches_and_in_order(monkeypatch):
    """A listing's bindings (put_each) go to the loop as batches of at most BATCH items, one
    loop callback each, in order with what is put between them (an exchange is ready only
    after its bindings); a batch already run is never added to."""
    monkeypatch.setattr(loop_queue, "BATCH", 3)
    calls: list = []

    class Catalog:
        def apply(self, items: list) -> None:
            calls.append(("apply", list(items)))

    async def main() -> None:
        catalog = Catalog()
        queue = LoopQueue(asyncio.get_running_loop())
        done = asyncio.Event()
        for i in range(4):  # a fresh bound method each time, as the watchers' lambdas give
            queue.put_each(catalog.apply, i)
        queue.put(calls.append, "ready")
        queue.put_each(catalog.apply, 4)
        await asyncio.sleep(0.05)  # run: the next item starts a batch of its own
        queue.put_each(catalog.apply, 5)
        queue.put(done.set)
        await asyncio.wait_for(done.wait(), 5)

    asyncio.run(main())
    assert calls == [("apply", [0, 1, 2]), ("apply", [3]), "ready", ("apply", [4]),
                     ("apply", [5])]


def test_an_item_never_joins_the_arguments_of_a_plain_put():
    """put(callback, a_list) then put_each(callback, item): the item starts a batch of its
    own; the list given to put is the caller's and is left as it is."""
    calls: list = []
    given = ["x"]

    async def main() -> None:
        queue = LoopQueue(asyncio.get_running_loop())
        done = asyncio.Event()
        queue.put(calls.append, given)
        queue.put_each(calls.append, "y")
        queue.put(done.set)
        await asyncio.wait_for(done.wait(), 5)

    asyncio.run(main())
    assert given == ["x"] and calls == [["x"], ["y"]]
