"""Diverts created over HTTP, kept in the broker (``persist_diverts``): they outlive the sidecar
and reach its standby. Against the real broker and real `rtroute run` processes."""
from __future__ import annotations

import pytest

from rtroute.config.rtroute_toml import DivertConfig
from rtroute.sidecar.divert_store import divert_json

from ..conftest import wait_for
from .conftest import STORE_PARAMETER, depth, divert_status, http, wait_depth

pytestmark = pytest.mark.broker

PARAMETER = STORE_PARAMETER
TOKEN = "s3cret-token"
HTTP = {"persist_diverts": True, "token": TOKEN}


def test_the_store_keeps_diverts_in_creation_order_and_replaces_by_name(store, mgmt):
    a = DivertConfig(name="a", address="x", forwarding_address="y", filter="k = 1")
    b = DivertConfig(name="b", address="x", forwarding_address="z", exclusive=True)
    store.put(a)
    store.put(b)
    store.put(DivertConfig(name="a", address="x", forwarding_address="w"))
    configs, problems = store.load()
    assert problems == [] and [(c.name, c.forwarding_address) for c in configs] == \
        [("a", "w"), ("b", "z")]
    assert mgmt.global_parameter(PARAMETER)[1] == divert_json(b) == \
        {"name": "b", "address": "x", "forwarding_address": "z", "exclusive": True}
    assert store.remove("a") and not store.remove("a")
    assert store.remove("b")
    assert mgmt.global_parameter(PARAMETER) is None and store.load() == ([], [])


def test_a_bad_stored_entry_is_reported_and_the_others_load(store, mgmt):
    mgmt.put_global_parameter(PARAMETER, [
        {"name": "ok", "address": "x", "forwarding_address": "y"},
        {"name": "bad", "address": "x"},
        "not an object"])
    configs, problems = store.load()
    assert [c.name for c in configs] == ["ok"]
    assert len(problems) == 2 and "forwarding_address" in problems[0]


def test_diverts_created_over_http_outlive_the_sidecar_and_reach_its_standby(
        store, run_config, channel, managed, objects, mgmt):
    name = managed("persist")
    spy = objects.queue(f"{name}.spy")
    exchanges = [{"name": name, "kind": "topic"}]
    first = run_config(exchanges, http=HTTP)
    standby = run_config(exchanges, http=HTTP)
    local = objects.queue(f"{name}.local", bind=(f"{name}.bindings", "#"))
    divert = {"name": f"{name}-spy", "address": name, "forwarding_address": spy,
              "routing_type": "ANYCAST", "filter": "office = 'New York'"}
    code, answer = http(first, "POST", "/diverts", divert, TOKEN)
    assert code == 201 and answer["stored"], answer
    assert mgmt.global_parameter(PARAMETER) == [divert]
    assert first.status()["divert_store"] == PARAMETER
    wait_for(lambda: divert_status(standby, divert["name"]), 20)  # read within the interval
    assert divert_status(standby, divert["name"])["origin"] == "http"

    # the standby takes over with the divert
    first.kill9()
    channel.confirm_delivery()
    channel.basic_publish(name, "k", b"ny", properties=_headers({"office": "New York"}))
    channel.basic_publish(name, "k", b"ldn", properties=_headers({"office": "London"}))
    wait_depth(channel, local, 2)
    wait_depth(channel, spy, 1)

    # a sidecar started now loads it at start; DELETE removes it from the broker too
    late = run_config(exchanges, http=HTTP)
    assert divert_status(late, divert["name"])["forwarding_address"] == spy
    code, answer = http(standby, "DELETE", f"/diverts/{divert['name']}", token=TOKEN)
    assert code == 200, answer
    assert mgmt.global_parameter(PARAMETER) is None
    wait_for(lambda: not divert_status(late, divert["name"]), 20)  # the other one follows
    assert depth(channel, spy) == 1


def test_without_persist_diverts_nothing_is_stored(store, run_config, managed, objects, mgmt):
    name = managed("volatile")
    spy = objects.queue(f"{name}.spy")
    sc = run_config([{"name": name, "kind": "topic"}], http={"token": TOKEN})
    code, answer = http(sc, "POST", "/diverts", {"name": f"{name}-spy", "address": name,
                                                "forwarding_address": spy}, TOKEN)
    assert code == 201 and not answer["stored"]
    assert mgmt.global_parameter(PARAMETER) is None and sc.status()["divert_store"] is None


def _headers(headers):
    import pika

    return pika.BasicProperties(headers=headers)
