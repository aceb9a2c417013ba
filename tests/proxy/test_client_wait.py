"""How long a client of the proxy waits for the bindings of an x-rtopic exchange, and what it
is told when it stops waiting (issue #47): it waits while they load (a listing in flight, or
being applied), past the old fixed 15 s, up to a bound; a load that fails or does not run
refuses it after :data:`READY_TIMEOUT` with the reason.

The wait (``Session._exchange_ready``) runs here on its own, against a catalog whose progress
the test sets; the times are scaled down."""
from __future__ import annotations

import asyncio

import pytest

from rtroute.proxy import session as session_module
from rtroute.proxy.rtopic_exchange import RTopic
from rtroute.proxy.session import Session


class Catalog:
    """A catalog whose loading progress the test sets."""

    def __init__(self) -> None:
        self.text = "bindings of 'x.bindings': waiting 3 s for the management API's answer"
        self.loading = True

    def progress(self, _exchange: RTopic) -> tuple[str, bool]:
        return self.text, self.loading


class Client:
    """What ``_exchange_ready`` uses of a session."""

    def __init__(self, catalog: Catalog, heartbeat: int = 0) -> None:
        self.catalog = catalog
        self._heartbeat = heartbeat
        self._closed = False
        self.refused: list[tuple[int, str]] = []

    def _fail(self, code: int, text: str, _kind: str) -> None:
        self.refused.append((code, text))
        self._closed = True


@pytest.fixture(autouse=True)
def short_times(monkeypatch):
    monkeypatch.setattr(session_module, "READY_TIMEOUT", 1.0)
    monkeypatch.setattr(session_module, "LOAD_TIMEOUT", 3.0)


def run(client: Client, exchange: RTopic, meanwhile=None) -> float:
    """Runs the wait; ``meanwhile(exchange, catalog)`` as a task beside it. Returns seconds."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        started = loop.time()
        side = asyncio.ensure_future(meanwhile(exchange, client.catalog)) if meanwhile else None
        await Session._exchange_ready(client, exchange)  # type: ignore[arg-type]
        if side is not None:
            side.cancel()
        return loop.time() - started

    return asyncio.run(main())


def test_a_client_waits_past_the_old_timeout_while_the_bindings_load():
    exchange, client = RTopic("x"), Client(Catalog())

    async def load_then_ready(exchange: RTopic, _catalog: Catalog) -> None:
        await asyncio.sleep(2.0)  # twice READY_TIMEOUT, all of it loading
        exchange.ready.set()

    took = run(client, exchange, load_then_ready)
    assert client.refused == []
    assert 2.0 <= took < 3.0


def test_a_load_that_outlasts_the_bound_refuses_the_client_with_how_far_it_is():
    catalog = Catalog()
    catalog.text = "bindings of 'x.bindings': 120,000 of ~300,000 read (40 s)"
    client = Client(catalog)
    took = run(client, RTopic("x"))
    assert 3.0 <= took < 4.5
    [(code, text)] = client.refused
    assert code == 541
    assert text.startswith("INTERNAL_ERROR - rtroute proxy: the bindings of x-rtopic exchange "
                           "'x' are not known after 3 s (still loading: bindings of "
                           "'x.bindings': 120,000 of ~300,000 read"), text


def test_a_failed_listing_refuses_the_client_after_the_ready_timeout_with_its_error():
    catalog = Catalog()
    catalog.loading = False
    catalog.text = ("bindings of 'x.bindings': failed after 2 s: GET http://127.0.0.1:15672/"
                    "api/...: HTTP 500: boom; retrying")
    client = Client(catalog)
    took = run(client, RTopic("x"))
    assert 1.0 <= took < 2.5
    [(code, text)] = client.refused
    assert code == 541
    assert "(not loading: bindings of 'x.bindings': failed after 2 s" in text, text
    assert "HTTP 500: boom" in text


def test_a_short_heartbeat_bounds_the_wait_but_never_below_the_ready_timeout(monkeypatch):
    monkeypatch.setattr(session_module, "LOAD_TIMEOUT", 30.0)
    client = Client(Catalog(), heartbeat=2)
    took = run(client, RTopic("x"))
    assert 2.0 <= took < 3.5
    assert "still loading" in client.refused[0][1]
    client = Client(Catalog(), heartbeat=0)  # no heartbeat: LOAD_TIMEOUT bounds it

    async def ready_at_4(exchange: RTopic, _catalog: Catalog) -> None:
        await asyncio.sleep(4.0)
        exchange.ready.set()

    assert run(client, RTopic("x"), ready_at_4) >= 4.0
    assert client.refused == []
