"""A durable x-rtopic exchange served by the sidecar survives a restart of the broker's node.

The node is restarted with ``rabbitmqctl stop_app`` and ``start_app`` (never a full stop: other
tests share the node). That reloads the metadata store as a node restart does, which the test
checks while the app is down (:data:`STORE_PROBE` must find nothing of it): ``stop_app`` stops
the ``rabbit`` application and, with it, on RabbitMQ 4.3 (Khepri) the ``khepri`` application,
its Ra server ``rabbitmq_metadata`` and every ``rabbit_khepri_*`` ETS projection, so that
``start_app`` starts a new Ra server that rebuilds the store from its log and snapshot on
disk, projections included; on 3.10 and 4.0 (Mnesia) the ``mnesia`` application stops and
reloads its disc copies. Queues stop too and recover their persistent messages from disk.
What ``stop_app`` leaves is the Erlang VM (loaded code, the processes of applications outside
RabbitMQ's), which a node restart would renew; the boot steps run again all the same, and
those are what the x-rtopic plugin 4.0.9 gets wrong (its durable bindings stop routing after a
restart). On Khepri every exchange is recovered, transient ones too (RabbitMQ's
``rabbit_db_exchange:recover_in_khepri``: "transient exchanges are deprecated in Khepri"),
after ``start_app`` as after a node restart; a transient queue goes with both. Measured here
(2026-11-27, from ``stop_app`` until AMQP and the management API answer again, over 3-5 runs):
3.4-9.4 s on 4.3.6 (its ``stop_app`` 0.6-6.0 s), 2.5-3.4 s on 4.0.5,
7.4-8.0 s on 3.10.8 (its ``stop_app`` alone about 5.8 s); the test prints them.

The sidecar keeps running through the restart, frozen (SIGSTOP) from just before the
publish that must outlive the restart until the layout has been checked: so what the test
finds after the restart is what the broker recovered, not what the sidecar declared again
when it reconnected (its declarations are idempotent and would hide a lost exchange), and a
message stays in the ingress queue. Thawed, it finds its connection gone and reconnects.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any, Callable

import pika
import pytest

from rtroute.amqp import ManagementClient, NotFound

from ..conftest import BROKER_URI, broker_ctl, management_client, wait_for
from .conftest import depth, drain, wait_depth

pytestmark = pytest.mark.broker

# what of the metadata store still runs on the node (an Erlang list, "[]" when nothing): the
# applications that hold it, the Khepri store's Ra server and Khepri's ETS projections
STORE_PROBE = (
    "[A || {A, _, _} <- application:which_applications(), "
    "lists:member(A, [rabbit, mnesia, khepri])]"
    " ++ [rabbitmq_metadata || whereis(rabbitmq_metadata) =/= undefined]"
    " ++ [T || T <- ets:all(), is_atom(T), lists:prefix(\"rabbit_khepri_\", atom_to_list(T))].")
# the longest a node of this machine may take to stop or start its app (4.3 takes ~5 s each)
NODE_TIMEOUT = 120.0

# destination -> binding key, made before the restart; the keys of the publishes below
BOUND = {"a": "s.a.x", "b": "s.b.x", "c": "t.a.x"}


def metadata_store() -> str:
    """``khepri`` or ``mnesia``: the metadata store of the node under test (this also skips
    the test, through ``broker_ctl``, when no rabbitmqctl controls that node)."""
    enabled = broker_ctl("eval", "rabbit_feature_flags:is_enabled(khepri_db).").stdout.strip()
    return "khepri" if enabled == "true" else "mnesia"


def _answers(check: Callable[[], Any]) -> bool:
    try:
        check()
        return True
    except Exception:  # noqa: BLE001 - not yet: connection refused, 503, a closing node
        return False


def _amqp_check() -> None:
    pika.BlockingConnection(pika.URLParameters(BROKER_URI)).close()


def restart_node(mgmt: ManagementClient) -> dict[str, float]:
    """``stop_app``, a look at what of the metadata store still runs, and ``start_app``, done
    even when the rest fails; returns once AMQP and the management API answer again, with the
    seconds each step took (``outage``: from ``stop_app`` until both answer). Fails the test
    when the metadata store outlived ``stop_app`` (the restart would prove nothing)."""
    timings: dict[str, float] = {}
    started = time.monotonic()
    still_up = "not looked at"
    try:
        broker_ctl("stop_app", timeout=NODE_TIMEOUT)
        timings["stop_app"] = time.monotonic() - started
        still_up = broker_ctl("eval", STORE_PROBE).stdout.strip()
    finally:
        resumed = time.monotonic()
        broker_ctl("start_app", timeout=NODE_TIMEOUT)
        timings["start_app"] = time.monotonic() - resumed
    wait_for(lambda: _answers(_amqp_check), NODE_TIMEOUT, 0.2)
    wait_for(lambda: _answers(mgmt.overview), NODE_TIMEOUT, 0.2)
    timings["outage"] = time.monotonic() - started
    assert still_up == "[]", f"stop_app left the metadata store running: {still_up}"
    return timings


def layout_snapshot(mgmt: ManagementClient, exchanges: list[str], queues: list[str]
                    ) -> dict[str, Any]:
    """What the management API says of ``exchanges`` (type, flags, arguments, the bindings
    from each) and of ``queues`` (flags, arguments); ``"absent"`` for one it does not know."""
    shot: dict[str, Any] = {}
    for name in exchanges:
        try:
            ex = mgmt.exchange(name)
            shot[f"exchange {name}"] = (ex["type"], ex["durable"], ex["auto_delete"],
                                        ex["internal"], ex["arguments"])
        except NotFound:
            shot[f"exchange {name}"] = "absent"
        shot[f"bindings of {name}"] = sorted(
            (b.destination_type, b.destination, b.routing_key)
            for b in mgmt.exchange_bindings(name))
    for name in queues:
        try:
            q = mgmt.queue(name)
            shot[f"queue {name}"] = (q["durable"], q["auto_delete"], q["arguments"])
        except NotFound:
            shot[f"queue {name}"] = "absent"
    return shot


def assert_layout_recovered(mgmt: ManagementClient, before: dict[str, Any],
                            exchanges: list[str], queues: list[str]) -> None:
    """The layout snapshot equals ``before`` (within a few seconds: the management API may
    answer before the last queue of the vhost has registered again)."""
    deadline = time.monotonic() + 10
    while True:
        after = layout_snapshot(mgmt, exchanges, queues)
        if after == before or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert after == before, "the broker did not recover the layout as it was"


def _body_list(channel: Any, queue: str) -> list[bytes]:
    return [body for _, _, body in drain(channel, queue)]


def test_durable_layout_routes_after_a_node_restart(sidecars, channel, managed):
    """Durable bindings made before the restart route a wildcard publish after it, to exactly
    the queues bound then; a persistent message confirmed before the restart, still in the
    ingress queue, is routed after it; the sidecar reconnects by itself."""
    store = metadata_store()
    mgmt = management_client(timeout=5)
    name = managed("restart")
    ingress = f"rtroute.ingress.{name}"
    queues = {dest: f"{name}.{dest}" for dest in BOUND}
    sc = sidecars("--rtopic", name)
    sc.wait_running(name)
    for dest, key in BOUND.items():
        channel.queue_declare(queues[dest], durable=True)
        managed.queues.append(queues[dest])
        channel.queue_bind(queues[dest], f"{name}.bindings", key)
    sc.wait_running(name, bindings=len(BOUND))
    channel.confirm_delivery()
    persistent = pika.BasicProperties(delivery_mode=2)
    channel.basic_publish(name, "s.*.x", b"m0", persistent, mandatory=True)
    for dest in "ab":
        wait_depth(channel, queues[dest], 1)
        assert _body_list(channel, queues[dest]) == [b"m0"]  # the sidecar serves
    exchanges = [name, f"{name}.bindings"]
    layout = [ingress, *queues.values()]
    before = layout_snapshot(mgmt, exchanges, layout)

    os.kill(sc.proc.pid, signal.SIGSTOP)
    frozen = True
    try:
        # delivered to the frozen sidecar and never acked: back in the queue at stop_app
        channel.basic_publish(name, "s.*.x", b"m1", persistent, mandatory=True)
        channel.connection.close()  # the node's restart closes it anyway
        timings = restart_node(mgmt)

        assert_layout_recovered(mgmt, before, exchanges, layout)
        conn = pika.BlockingConnection(pika.URLParameters(BROKER_URI))
        ch = conn.channel()
        ch.confirm_delivery()
        wait_for(lambda: depth(ch, ingress) == 1, 30)
        # NAME still feeds the ingress queue (mandatory: refused if it did not), before the
        # sidecar could declare anything again
        ch.basic_publish(name, "#.a.x", b"m2", persistent, mandatory=True)
        assert depth(ch, ingress) == 2

        thawed = time.monotonic()
        os.kill(sc.proc.pid, signal.SIGCONT)
        frozen = False
        wait_for(lambda: depth(ch, ingress) == 0 and depth(ch, queues["c"]) == 1, 60)
        timings["sidecar_back"] = time.monotonic() - thawed
        sc.wait_running(name, bindings=len(BOUND))
        ch.basic_publish(name, "s.b.#", b"m3", persistent, mandatory=True)
        wait_depth(ch, queues["b"], 2)
        wait_depth(ch, queues["a"], 2)
        got = {dest: _body_list(ch, q) for dest, q in queues.items()}
        assert got == {"a": [b"m1", b"m2"], "b": [b"m1", b"m3"], "c": [b"m2"]}
        status = sc.exchange(name)
        assert status["unroutable"] == 0 and status["dead_lettered"] == 0
        assert (sc.status() or {}).get("connects", 0) >= 2  # the same process reconnected
        conn.close()
    finally:
        if frozen:
            os.kill(sc.proc.pid, signal.SIGCONT)
    print(f"\nnode restart ({store}): " + ", ".join(
        f"{step} {seconds:.1f} s" for step, seconds in timings.items()))
