"""Which registrations a proxy's catalog follows, without a broker: the management API is a
stand-in that answers the layout checks."""
from __future__ import annotations

import asyncio

from rtroute.amqp.management import ManagementError
from rtroute.proxy import catalog as catalog_module
from rtroute.proxy.catalog import VhostCatalog


class _Api:
    """Answers ``exchange(NAME)`` as the layout's marked fanout, after ``failures`` errors."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def exchange(self, name: str, vhost: str) -> dict:
        self.calls += 1
        if self.calls <= self.failures:
            raise ManagementError("management API unreachable", None, "GET", "exchanges")
        return {"type": "fanout", "arguments": {"x-rtroute-layout": "rtopic"}}


def test_a_registration_the_api_could_not_check_is_checked_again_and_followed(monkeypatch):
    monkeypatch.setattr(catalog_module, "RECHECK_DELAY", 0.01)

    async def scenario() -> tuple[bool, bool, int]:
        api = _Api(failures=2)
        catalog = VhostCatalog("amqp://guest:guest@127.0.0.1:1/%2F", api, "/",
                               asyncio.get_running_loop())
        # as the first listing reports it: the registration, then the registry is known
        catalog.sync._own("amq.gen-sync")  # the other proxies wait for this one's copy
        catalog._registration("orders", True)
        catalog._on_registry_ready()
        ready_before = catalog.ready.is_set()  # not while the check is pending
        await asyncio.wait_for(catalog.ready.wait(), 5)
        return ready_before, catalog.rtopic(b"orders") is not None, api.calls

    ready_before, followed, calls = asyncio.run(scenario())
    assert not ready_before
    assert followed  # not taken for a plain exchange because the API failed once
    assert calls == 3


def test_a_stopped_catalog_checks_no_more(monkeypatch):
    monkeypatch.setattr(catalog_module, "RECHECK_DELAY", 0.01)

    async def scenario() -> int:
        api = _Api(failures=1000)
        catalog = VhostCatalog("amqp://guest:guest@127.0.0.1:1/%2F", api, "/",
                               asyncio.get_running_loop())
        catalog._registration("orders", True)
        await asyncio.sleep(0.1)
        catalog.stop(wait=False)
        calls = api.calls
        await asyncio.sleep(0.2)
        return api.calls - calls

    assert asyncio.run(scenario()) <= 1  # at most the check already in flight


def test_bindings_heard_in_the_pika_thread_reach_the_loop_in_batches_and_in_order(monkeypatch):
    """A listing's bindings go to the loop in batches of APPLY_BATCH (one loop callback each,
    not one per binding); a batch is handed over when full, before anything else the pika
    thread hands the loop (the exchange is ready only after its bindings), or once the pika
    thread's current work is done (a single event)."""
    from rtroute.amqp.binding_watcher import Binding

    monkeypatch.setattr(catalog_module, "APPLY_BATCH", 3)

    async def scenario() -> list:
        catalog = VhostCatalog("amqp://guest:guest@127.0.0.1:1/%2F", _Api(failures=0), "/",
                               asyncio.get_running_loop())
        puts: list = []
        scheduled: list = []
        catalog._queue.put = lambda callback, *args: puts.append((callback.__name__, args))
        catalog._connection.add_callback_threadsafe = scheduled.append
        for i in range(4):
            catalog._apply_soon("orders", Binding(f"q{i}", "queue", f"k{i}"), True)
        catalog._to_loop(catalog._set_ready, "orders")
        catalog._apply_soon("orders", Binding("q9", "queue", "k9"), False)
        asked = len(scheduled)
        for flush in scheduled:
            flush()
        catalog.stop(wait=False)
        return [(name, [b.destination for _n, b, _a in args[0]] if name == "_apply_batch"
                 else args) for name, args in puts], asked

    puts, scheduled = asyncio.run(scenario())
    assert puts == [("_apply_batch", ["q0", "q1", "q2"]), ("_apply_batch", ["q3"]),
                    ("_set_ready", ("orders",)), ("_apply_batch", ["q9"])]
    assert scheduled == 3  # a flush asked for by the first binding of each batch
