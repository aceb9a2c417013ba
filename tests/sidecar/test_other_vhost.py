"""A sidecar in a vhost other than ``/`` follows binding changes through RabbitMQ's event
exchange, which the event plugin publishes in ``/`` only (rtroute.amqp.event_source): before
(#47), its watchers found no event exchange in their vhost and re-listed every binding every
5 s (a third of a core of the broker at 100,000 bindings; a change seen 5-19 s late).

The proof takes the listing away: once the sidecar runs, the management API holds every later
listing of the exchange's bindings, so a binding made at the broker can only be learnt from
an event. Where the event vhost cannot be used (no permission on ``/``), the sidecar polls, and
says so in ``/status``."""
from __future__ import annotations

import time
import uuid
from urllib.parse import quote

import pika
import pytest

from ..conftest import MANAGEMENT_URI, broker_uri_for, wait_for
from ..management_gate import ManagementGate

pytestmark = pytest.mark.broker


def _routed_after_bind(vhost: str, name: str, timeout: float) -> float:
    """Binds a queue to ``name.bindings`` at the broker directly, then publishes to ``name``
    until a message reaches the queue: the seconds from the bind-ok to the first one routed."""
    conn = pika.BlockingConnection(pika.URLParameters(broker_uri_for(vhost)))
    try:
        ch = conn.channel()
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(queue, f"{name}.bindings", "made.at.broker")
        bound = time.monotonic()

        def arrived() -> float | None:
            # a pattern: a literal key goes to NAME.bindings as it is, known binding or not
            ch.basic_publish(name, "made.at.*", b"x")
            if ch.queue_declare(queue, passive=True).method.message_count:
                return time.monotonic() - bound
            return None

        return wait_for(arrived, timeout=timeout, interval=0.01)
    finally:
        if conn.is_open:
            conn.close()


def test_a_binding_made_at_the_broker_routes_through_events_alone(sidecars, scratch_vhost):
    name = f"rtroute-test.events.{uuid.uuid4().hex[:8]}"
    gate = ManagementGate(MANAGEMENT_URI, name + ".bindings")
    try:
        gate.open()  # the first listing goes through
        sc = sidecars("--rtopic", name, "--uri", broker_uri_for(scratch_vhost),
                      "--management-uri", gate.url)
        sc.wait_running(name, bindings=0, timeout=30)
        wait_for(lambda: sc.exchange(name).get("bindings_watch") == "following", timeout=20)
        assert sc.status()["binding_events"] == {"vhost": "/", "following": True,
                                                 "reason": None}
        gate.hold()  # from now on no listing of the bindings completes
        delay = _routed_after_bind(scratch_vhost, name, timeout=30)
        print(f"a binding made at the broker in vhost {scratch_vhost!r} routed through the "
              f"sidecar {delay:.3f} s after its bind-ok")
        assert sc.exchange(name)["bindings_watch"] == "following"
    finally:
        gate.close()


@pytest.fixture
def vhost_only_user(mgmt, scratch_vhost):
    """A user allowed in the scratch vhost alone (not in ``/``, where the events are)."""
    user, password = f"rtroute-test-u-{uuid.uuid4().hex[:6]}", "pw"
    mgmt.request("PUT", f"users/{quote(user, safe='')}",
                 {"password": password, "tags": "management"})
    mgmt.request("PUT", f"permissions/{quote(scratch_vhost, safe='')}/{quote(user, safe='')}",
                 {"configure": ".*", "write": ".*", "read": ".*"})
    yield f"{quote(user, safe='')}:{password}"
    mgmt.request("DELETE", f"users/{quote(user, safe='')}")


def test_without_permission_on_the_event_vhost_it_polls_and_says_so(sidecars, scratch_vhost,
                                                                     vhost_only_user):
    name = f"rtroute-test.poll.{uuid.uuid4().hex[:8]}"
    sc = sidecars("--rtopic", name, "--uri", broker_uri_for(scratch_vhost, vhost_only_user),
                  "--management-uri", MANAGEMENT_URI)
    sc.wait_running(name, bindings=0, timeout=30)
    events = wait_for(lambda: (sc.status() or {}).get("binding_events"), timeout=20)
    assert events["following"] is False and "'/'" in events["reason"], events
    assert sc.exchange(name)["bindings_watch"] == "polling"
    _routed_after_bind(scratch_vhost, name, timeout=30)
    assert "binding watchers poll until the events are back" in sc.log()


def _event_connections(mgmt) -> list[str]:
    """rtroute's event connections (``rtroute events (USER)``)."""
    return [c["name"] for c in mgmt.request("GET", "connections")
            if str(c.get("user_provided_name") or "").startswith("rtroute events (")]


def test_a_lost_event_connection_is_a_gap_until_it_resubscribed_and_listed(
        sidecars, scratch_vhost, mgmt):
    """The event connection is closed (by an operator, here; a node restart): its consumer
    is gone. Until the sidecar has subscribed again and listed, a change could be missed:
    /readyz is 503 meanwhile (the listing is held to show it), then 200; the watcher polls
    while the event connection is away and follows the events again once it is back."""
    name = f"rtroute-test.gap.{uuid.uuid4().hex[:8]}"
    gate = ManagementGate(MANAGEMENT_URI, name + ".bindings")
    try:
        gate.open()
        sc = sidecars("--rtopic", name, "--uri", broker_uri_for(scratch_vhost),
                      "--management-uri", gate.url)
        sc.wait_running(name, bindings=0, timeout=30)
        wait_for(lambda: sc.exchange(name).get("bindings_watch") == "following", timeout=20)
        connections = wait_for(lambda: _event_connections(mgmt), timeout=20)
        gate.hold()
        for connection in connections:
            mgmt.request("DELETE", f"connections/{quote(connection, safe='')}")
        wait_for(lambda: sc.exchange(name).get("bindings_loading"), timeout=20)
        assert not (sc.status() or {}).get("healthy")
        wait_for(lambda: gate.holding, timeout=20)  # subscribed again, listing
        gate.open()
        wait_for(lambda: (sc.status() or {}).get("healthy"), timeout=30)
        # polling while the event connection is away, following once it is back
        wait_for(lambda: sc.exchange(name).get("bindings_watch") == "following", timeout=30)
        _routed_after_bind(scratch_vhost, name, timeout=30)
    finally:
        gate.close()
