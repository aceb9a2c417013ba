"""The plugin's permissions through the proxy (tests/proxy/permission_parity.py's scenario):
for each permission set, what a user may do with an x-rtopic exchange ``NAME`` through the
proxy is what the same client saw with the plugin (recorded in tests/proxy/parity/: plugin
v3.10.5 on RabbitMQ 3.10.8, v4.0.9 on 4.0.5; RabbitMQ 4.3 is compared with the 4.0.5 plugin's),
with pika and with Node's amqplib, but the one difference docs/proxy.md states: a user allowed
``NAME`` but not ``NAME.bindings`` is refused by the broker's own check on ``NAME.bindings``,
and the refusal names it.

With ``RTROUTE_TEST_PLUGIN_URI`` and ``RTROUTE_TEST_PLUGIN_MANAGEMENT_URI`` set (a broker
running the plugin), the scenario also runs against it live and must give the recorded
observations."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rtroute.amqp.management import ManagementClient

from ..node_amqplib import amqplib_script
from .permission_parity import node_client, observe, pika_client

pytestmark = pytest.mark.broker
HERE = Path(__file__).parent
PROXY_DOCS = HERE.parent.parent / "docs" / "proxy.md"
CLIENTS = {"pika": pika_client, "node": node_client}


def _recorded(broker_version: tuple[int, ...]) -> dict:
    plugin = "3.10" if broker_version[0] == 3 else "4.0"
    return json.loads((HERE / "parity" / f"permissions-plugin-{plugin}.json").read_text())


def _refused_on_bindings(outcome, client: str) -> bool:
    """``outcome`` is the broker's 403 naming ``NAME.bindings``, as ``client`` reports it."""
    return isinstance(outcome, list) and outcome[0] == 403 and \
        "exchange 'NAME.bindings' in vhost '/' refused for user 'USER'" in outcome[1]


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_user_may_do_through_the_proxy_what_the_plugin_allows(
        proxies, management_uri, broker_version, client):
    if client == "node":
        amqplib_script(HERE / "node", "permissions.js")
    proxy = proxies()
    got = observe(proxy.uri, management_uri, CLIENTS[client])
    want = _recorded(broker_version)[client]
    assert set(got) == set(want)
    for permissions in sorted(want):
        if permissions == "exactly_name":  # the difference docs/proxy.md states
            assert want[permissions] == {"bind": "ok", "publish": "ok", "received": [
                "from the administrator", "from the user"]}
            assert _refused_on_bindings(got[permissions]["bind"], client), got[permissions]
            assert _refused_on_bindings(got[permissions]["publish"], client), got[permissions]
            assert got[permissions]["received"] == []
            continue
        assert got[permissions] == want[permissions], permissions


def test_the_docs_state_the_permission_difference():
    text = " ".join(PROXY_DOCS.read_text().split())
    assert "a user allowed exactly `NAME` but not `NAME.bindings`" in text


@pytest.mark.skipif(not (os.environ.get("RTROUTE_TEST_PLUGIN_URI") and
                         os.environ.get("RTROUTE_TEST_PLUGIN_MANAGEMENT_URI")),
                    reason="RTROUTE_TEST_PLUGIN_URI and RTROUTE_TEST_PLUGIN_MANAGEMENT_URI name "
                           "no broker with the x-rtopic plugin")
def test_the_live_plugin_still_gives_the_recorded_permissions():
    uri, management = (os.environ["RTROUTE_TEST_PLUGIN_URI"],
                       os.environ["RTROUTE_TEST_PLUGIN_MANAGEMENT_URI"])
    version = ManagementClient(management).overview()["rabbitmq_version"]
    got = observe(uri, management, pika_client)
    assert got == _recorded((int(version.split(".")[0]),))["pika"]
