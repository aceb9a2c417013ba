"""The proxy against the real x-rtopic plugin: one client scenario (tests/proxy/parity.py, and
its Node amqplib twin tests/proxy/node/parity.js) run through the proxy in front of the broker
under test, compared step by step with what the same client observed with the plugin
(recorded in tests/proxy/parity/: plugin v3.10.5 on RabbitMQ 3.10.8, plugin v4.0.9 on 4.0.5;
RabbitMQ 4.3, where no plugin starts, is compared with the 4.0.5 plugin's).

Every step must match but those of :data:`DIFFERENCES`, which must really differ (so the list
cannot go stale) and which docs/proxy.md's "Differences from the plugin" states, each in the words
given here. Re-record after a change of the scenario::

    ../shared/rtopic-plugin/node.sh start
    python -m tests.proxy.parity record amqp://guest:guest@127.0.0.1:5702/%2F \\
        tests/proxy/parity/plugin-3.10-pika.json
    node tests/proxy/node/parity.js amqp://guest:guest@127.0.0.1:5702/%2F  # -> *-node.json

With ``RTROUTE_TEST_PLUGIN_URI`` set (a broker running the plugin), the scenario also runs
against it live and must give the recorded observations.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ..node_amqplib import amqplib_script
from .parity import observe

pytestmark = pytest.mark.broker
HERE = Path(__file__).parent
RECORDED = HERE / "parity"
PROXY_DOCS = HERE.parent.parent / "docs" / "proxy.md"  # its "Differences from the plugin"

# step -> (the brokers it differs on: "3" and/or "4", the words docs/proxy.md uses for it)
DIFFERENCES: dict[str, tuple[str, str]] = {
    "no_headers_table": ("34", ("a message that matched a wildcard or went by `BCC` arrives with "
                               "an empty headers table where the plugin's has none")),
    "literal_wildcard_binding": ("3", ("on RabbitMQ 3.x a binding key with a literal `*`/`#` "
                                      "word is a wildcard")),
}
# the steps whose only difference is the empty headers table (see _without_empty_headers)
_HEADERS_TABLE_STEPS = ("table", "exchange_to_exchange", "many_keys", "big_body")


def _major(broker_version: tuple[int, ...]) -> str:
    return "3" if broker_version[0] == 3 else "4"


def _recorded(broker_version: tuple[int, ...], client: str) -> dict:
    plugin = "3.10" if broker_version[0] == 3 else "4.0"
    return json.loads((RECORDED / f"plugin-{plugin}-{client}.json").read_text())


def _without_empty_headers(observed):
    """The observation with every empty headers table dropped (pika's shape: [body, exchange,
    routing key, {"headers": {}}])."""
    text = json.dumps(observed, sort_keys=True).replace(', {"headers": {}}]', ", {}]")
    return json.loads(text)


def _compare(got: dict, want: dict, major: str, shown: set[str] | None = None) -> None:
    """``shown``: the differences this client can see (default: all of DIFFERENCES)."""
    differing = set()
    for step in sorted(set(got) | set(want)):
        if got.get(step) == want.get(step):
            continue
        if step in _HEADERS_TABLE_STEPS and _without_empty_headers(got.get(step)) == \
                want.get(step):
            differing.add("no_headers_table")
            continue
        differing.add(step)
        assert step in DIFFERENCES and major in DIFFERENCES[step][0], (
            f"{step}: through the proxy {json.dumps(got.get(step))[:800]}\n"
            f"with the plugin {json.dumps(want.get(step))[:800]}")
    expected = {step for step, (brokers, _) in DIFFERENCES.items() if major in brokers
                and (shown is None or step in shown)}
    assert differing == expected, "DIFFERENCES lists a difference the suite no longer shows"


def test_the_docs_list_exactly_the_differences_the_suite_shows():
    text = " ".join(PROXY_DOCS.read_text().split())
    for step, (_, words) in DIFFERENCES.items():
        assert words in text, f"docs/proxy.md: the difference {step!r} is not stated as {words!r}"


def test_a_pika_client_sees_the_plugin_through_the_proxy(proxies, broker_version):
    proxy = proxies()
    _compare(observe(proxy.uri), _recorded(broker_version, "pika"), _major(broker_version))


def test_a_node_amqplib_client_sees_the_plugin_through_the_proxy(proxies, broker_version):
    script = amqplib_script(HERE / "node", "parity.js")
    proxy = proxies()
    got = json.loads(subprocess.run(["node", str(script), proxy.uri], capture_output=True,
                                    check=True, text=True, timeout=120).stdout)
    # amqplib reports an absent headers table as {} (so the empty table is invisible to it),
    # and its scenario has no literal wildcard binding
    _compare(got, _recorded(broker_version, "node"), _major(broker_version), shown=set())


@pytest.mark.skipif(not os.environ.get("RTROUTE_TEST_PLUGIN_URI"),
                    reason="RTROUTE_TEST_PLUGIN_URI names no broker with the x-rtopic plugin")
def test_the_live_plugin_still_gives_the_recorded_observations(broker_version):
    got = observe(os.environ["RTROUTE_TEST_PLUGIN_URI"])
    assert got == _recorded(broker_version, "pika")
