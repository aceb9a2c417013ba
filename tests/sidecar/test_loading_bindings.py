"""The sidecar is not ready while the bindings of an exchange load, and ``/readyz`` says how
far the load is, or why it failed (issue #47: at 300,000 bindings the listing outlasted the
fixed 10 s timeout for good while ``/readyz`` said 200). The listing is held by a gate in front
of the real management API."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from ..conftest import BROKER_URI, MANAGEMENT_URI, wait_for
from ..management_gate import ManagementGate

pytestmark = pytest.mark.broker


def readyz(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except urllib.error.URLError:
        return 0, {}  # not listening yet


def test_readyz_is_503_with_the_progress_until_the_bindings_are_listed(sidecars, managed):
    name = managed("loading")
    gate = ManagementGate(MANAGEMENT_URI, name + ".bindings")
    try:
        sc = sidecars("--rtopic", name, "--uri", BROKER_URI, "--management-uri", gate.url)

        def loading() -> str | None:
            code, body = readyz(sc.port)
            reason = body.get("reason") or ""
            # first "not listed yet", until the watcher asks the API
            return reason if code == 503 and ": waiting " in reason else None

        reason = wait_for(loading, timeout=30)
        assert reason.startswith(f"loading bindings of '{name}.bindings': waiting "), reason
        assert sc.exchange(name)["bindings_loading"].startswith(f"bindings of '{name}.bindings'")
        gate.fail(500, "the gate says no")
        wait_for(lambda: "the gate says no" in (readyz(sc.port)[1].get("reason") or ""),
                 timeout=20)
        assert readyz(sc.port)[0] == 503
        gate.failure = None  # the retry goes through
        wait_for(lambda: readyz(sc.port) == (200, {"healthy": True}), timeout=30)
        assert sc.exchange(name)["bindings_loading"] is None
    finally:
        gate.close()
