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

