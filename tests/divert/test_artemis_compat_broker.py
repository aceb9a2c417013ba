"""Drop-in compatibility with Artemis's diverts, against the real broker and real `rtroute run`
processes: ``_AMQ_ORIG_ROUTING_TYPE`` only when the original had a routing type, a divert name
used twice in the file, Artemis's key names and ``updateDivert`` over HTTP, and run-time
diverts kept in the broker across a restart."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pika
import pytest

from .conftest import STORE_PARAMETER, depth, divert_status, drain, http, wait_depth

pytestmark = pytest.mark.broker

PARAMETER = STORE_PARAMETER
TOKEN = "s3cret-token"
PERSIST = {"persist_diverts": True, "token": TOKEN}


def publish(channel, exchange, body, headers=None, key="k"):
    channel.basic_publish(exchange, key, body, pika.BasicProperties(headers=headers))


def bodies(channel, queue):
    return sorted(b.decode() for _, _, b in drain(channel, queue))


def raw_request(sc, method, path, body, headers):
    request = urllib.request.Request(f"http://127.0.0.1:{sc.port}{path}", data=body,
                                     method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=15) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


# ------------------------------------------------------------------ 1. _AMQ_ORIG_ROUTING_TYPE


def test_orig_routing_type_only_when_the_original_carried_one(run_config, channel, managed,
                                                               objects):
    name = managed("origtype")
    target = objects.queue(f"{name}.target")
    run_config([{"name": name, "kind": "fanout"}],
               [{"name": f"{name}-d", "address": name, "forwarding_address": target,
                 "routing_type": "ANYCAST"}])
    channel.confirm_delivery()
    publish(channel, name, b"none")
    publish(channel, name, b"multicast", {"_AMQ_ROUTING_TYPE": 0})
    publish(channel, name, b"anycast", {"_AMQ_ROUTING_TYPE": 1})
    publish(channel, name, b"not-a-type", {"_AMQ_ROUTING_TYPE": 7})
    wait_depth(channel, target, 4)
    got = {b.decode(): p.headers for _, p, b in drain(channel, target)}
    assert {body: h.get("_AMQ_ORIG_ROUTING_TYPE", "absent") for body, h in got.items()} == {
        "none": "absent", "multicast": 0, "anycast": 1, "not-a-type": "absent"}
    assert all(h["_AMQ_ROUTING_TYPE"] == 1 for h in got.values())  # ANYCAST copies


# ------------------------------------------------------------- 2. a name used twice in the file


def test_a_divert_name_used_twice_runs_the_first_and_warns_with_the_line(run_config, channel,
                                                                         managed, objects):
    name = managed("twice")
    first, second = objects.queue(f"{name}.first"), objects.queue(f"{name}.second")
    d = f"{name}-d"
    sc = run_config([{"name": name, "kind": "fanout"}],
                    [{"name": d, "address": name, "forwarding_address": first},
                     {"name": d, "address": name, "forwarding_address": second}])
    assert divert_status(sc, d)["forwarding_address"] == first
    assert len([x for x in sc.status()["diverts"] if x["name"] == d]) == 1
    assert f"divert '{d}': name used twice (first defined on line" in sc.log()
    channel.confirm_delivery()
    publish(channel, name, b"m")
    wait_depth(channel, first, 1)
    assert depth(channel, second) == 0


# ------------------------------------------------------------- 3. Artemis names and updates


def test_artemis_key_names_and_updates_over_http(run_config, channel, managed, objects):
    name = managed("update")
    ny, other = objects.queue(f"{name}.ny"), objects.queue(f"{name}.other")
    local = f"{name}.local"
    sc = run_config([{"name": name, "kind": "topic"}], http={"token": TOKEN})
    objects.queue(local, bind=(f"{name}.bindings", "#"))
    d = f"{name}-d"
    artemis = {"name": d, "address": name, "forwardingAddress": ny, "exclusive": True,
               "filterString": "office = 'New York'", "routingType": "ANYCAST"}
    code, answer = http(sc, "POST", "/diverts", {**artemis, "forwarding-address": other},
                        TOKEN)
    assert code == 400 and "two spellings of forwarding_address" in answer["error"]
    code, answer = http(sc, "POST", "/diverts", {**artemis, "forwarding-address": ny}, TOKEN)
    assert code == 201, answer
    assert answer["divert"]["forwarding_address"] == ny and answer["divert"]["exclusive"]
    channel.confirm_delivery()
    publish(channel, name, b"ny-1", {"office": "New York"})
    publish(channel, name, b"ldn-1", {"office": "London"})
    wait_depth(channel, ny, 1)
    wait_depth(channel, local, 1)

    # Artemis's updateDivert: filter and forwarding address change, the counters go on
    code, answer = http(sc, "PATCH", f"/diverts/{d}",
                        {"filter-string": "office = 'London'", "forwarding-address": other},
                        TOKEN)
    assert code == 200, answer
    assert (answer["divert"]["filter"], answer["divert"]["forwarding_address"],
            answer["divert"]["matched"]) == ("office = 'London'", other, 1)
    assert answer["stored"] is False
    publish(channel, name, b"ny-2", {"office": "New York"})
    publish(channel, name, b"ldn-2", {"office": "London"})
    wait_depth(channel, other, 1)
    wait_depth(channel, local, 2)
    assert bodies(channel, ny) == ["ny-1"]
    assert bodies(channel, other) == ["ldn-2"]
    assert bodies(channel, local) == ["ldn-1", "ny-2"]

    # what updateDivert cannot change is refused, and the divert stays as it was
    code, answer = http(sc, "PATCH", f"/diverts/{d}", {"exclusive": False}, TOKEN)
    assert code == 400 and "exclusive cannot be changed" in answer["error"]
    code, answer = http(sc, "PUT", f"/diverts/{d}", {"address": name,
                                                     "forwarding_address": ny}, TOKEN)
    assert code == 400 and "exclusive cannot be changed" in answer["error"]
    # PUT: the whole divert; left out, the filter is gone
    code, answer = http(sc, "PUT", f"/diverts/{d}", {"address": name, "exclusive": True,
                                                     "forwarding_address": ny,
                                                     "routing_type": "ANYCAST"}, TOKEN)
    assert code == 200 and answer["divert"]["filter"] is None, answer
    publish(channel, name, b"any", {"office": "Paris"})
    wait_depth(channel, ny, 1)
    assert bodies(channel, ny) == ["any"]
    code, answer = http(sc, "PATCH", "/diverts/nope", {"filter": "a = 1"}, TOKEN)
    assert code == 404


def test_updates_pass_the_same_checks_as_other_changes(run_config, managed, objects):
    name = managed("upauth")
    target = objects.queue(f"{name}.t")
    sc = run_config([{"name": name, "kind": "topic"}],
                    [{"name": f"{name}-file", "address": name, "forwarding_address": target}],
                    http={"token": TOKEN,
                          "allowed_transformers": ["tests.divert.transformers:tag"]})
    path = f"/diverts/{name}-file"
    body = json.dumps({"filter": "a = 1"}).encode()
    json_type = {"Content-Type": "application/json"}
    bearer = {**json_type, "Authorization": f"Bearer {TOKEN}"}
    for method in ("PUT", "PATCH"):
        assert raw_request(sc, method, path, body, json_type) == 401
        assert raw_request(sc, method, path, body, {**bearer, "Origin": "http://evil.test"}) \
            == 403
        assert raw_request(sc, method, path, body, {**bearer, "Host": "evil.test"}) == 403
        assert raw_request(sc, method, path, body,
                           {**bearer, "Content-Type": "text/plain"}) == 415
        assert raw_request(sc, method, path, b"{not json", bearer) == 400
    assert divert_status(sc, f"{name}-file")["filter"] is None  # none of them changed it

    # the transformer allow-list applies to updates, of file diverts too
    code, answer = http(sc, "PATCH", path, {"transformer": "os:system"}, TOKEN)
    assert code == 400 and "not allowed" in answer["error"]
    code, answer = http(sc, "PATCH", path, {"transformerClassName":
                                            "tests.divert.transformers:tag"}, TOKEN)
    assert code == 200, answer
    assert answer["divert"]["transformer"] == "tests.divert.transformers:tag"
    assert any("config file" in w for w in answer["warnings"])


# --------------------------------------------------- 4. persisted run-time diverts and restarts


def test_a_stored_divert_survives_a_restart_and_routes_and_delete_forgets_it(
        store, run_config, channel, managed, objects, mgmt, sidecars):
    name = managed("restart")
    spy = objects.queue(f"{name}.spy")
    exchanges = [{"name": name, "kind": "topic"}]
    first = run_config(exchanges, http=PERSIST)
    config_file = first.proc.args[first.proc.args.index("-c") + 1]
    d = f"{name}-spy"
    code, answer = http(first, "POST", "/diverts",
                        {"name": d, "address": name, "forwarding-address": spy,
                         "routing-type": "ANYCAST", "filter-string": "office = 'New York'"},
                        TOKEN)
    assert code == 201 and answer["stored"], answer
    code, answer = http(first, "PATCH", f"/diverts/{d}", {"filterString": "office = 'Paris'"},
                        TOKEN)
    assert code == 200 and answer["stored"], answer
    assert [e["filter"] for e in mgmt.global_parameter(PARAMETER)] == ["office = 'Paris'"]
    assert first.terminate() == 0

    # a new process from the same file, which does not name the divert
    second = sidecars("-c", config_file)
    second.status = lambda: _status(second)
    second.wait_running(name)
    status = divert_status(second, d)
    assert (status["origin"], status["filter"], status["forwarding_address"]) == \
        ("http", "office = 'Paris'", spy)
    channel.confirm_delivery()
    publish(channel, name, b"paris", {"office": "Paris"})
    publish(channel, name, b"ny", {"office": "New York"})
    wait_depth(channel, spy, 1)
    assert bodies(channel, spy) == ["paris"]

    code, answer = http(second, "DELETE", f"/diverts/{d}", token=TOKEN)
    assert code == 200, answer
    assert mgmt.global_parameter(PARAMETER) is None
    assert second.terminate() == 0
    third = sidecars("-c", config_file)
    third.status = lambda: _status(third)
    third.wait_running(name)
    assert divert_status(third, d) == {}


def test_a_file_divert_wins_over_a_stored_one_of_the_same_name(store, run_config, channel,
                                                               managed, objects):
    name = managed("filewins")
    from_file, from_store = objects.queue(f"{name}.file"), objects.queue(f"{name}.store")
    d = f"{name}-d"
    store.put(_config(d, name, from_store))
    sc = run_config([{"name": name, "kind": "fanout"}],
                    [{"name": d, "address": name, "forwarding_address": from_file}],
                    http=PERSIST)
    status = divert_status(sc, d)
    assert (status["origin"], status["forwarding_address"]) == ("config", from_file)
    assert f"stored divert {d} ignored: the config file defines a divert of that name, and " \
           "the file wins" in sc.log()
    channel.confirm_delivery()
    publish(channel, name, b"m")
    wait_depth(channel, from_file, 1)
    assert depth(channel, from_store) == 0
    assert [c.name for c in store.load()[0]] == [d]  # left in the broker for the others


def _config(name, address, forwarding):
    from rtroute.config.rtroute_toml import DivertConfig

    return DivertConfig(name=name, address=address, forwarding_address=forwarding,
                        routing_name=name)


def _status(sc):
    code, status = http(sc, "GET", "/status", token=TOKEN) if sc.proc.poll() is None \
        else (0, None)
    return status if code == 200 else None
