"""Diverts end to end over the real broker, through a real `rtroute run -c FILE` process."""
from __future__ import annotations

import collections
import subprocess
import sys
import threading
import time
import urllib.request

import pika
import pytest

from ..conftest import BROKER_URI, wait_for
from ..sidecar.conftest import drain_many, publish_in_batches
from .conftest import config_text, depth, divert_status, drain, http, wait_depth

pytestmark = pytest.mark.broker

NY = {"office": "New York"}
LONDON = {"office": "London"}


def publish(channel, exchange, key, body, headers=None, **props):
    channel.basic_publish(exchange, key, body, pika.BasicProperties(headers=headers, **props))


def bodies(channel, queue):
    return sorted(b.decode() for _, _, b in drain(channel, queue))


def wait_counts(sc, divert, **expected):
    """Waits for a divert's counters (confirms may trail the deliveries a little)."""

    def reached():
        status = divert_status(sc, divert)
        return all(status.get(k) == v for k, v in expected.items())

    wait_for(reached, 10)


def settle(channel, queues_and_counts, timeout=30):
    for queue, count in queues_and_counts:
        wait_depth(channel, queue, count, timeout)
    time.sleep(0.3)


# ------------------------------------------------------------------- exclusive / non-exclusive


def test_artemis_price_example_exclusive_with_filter(run_config, channel, managed, objects):
    """Artemis's divert example: New York prices go to priceForwarding, and only there."""
    prices = managed("priceUpdates")
    forwarding = objects.queue(f"{prices}.priceForwarding")  # STRIP: a queue of that name
    sc = run_config([{"name": prices, "kind": "topic"}],
                    [{"name": f"{prices}-divert", "address": prices,
                      "forwarding_address": forwarding, "filter": "office = 'New York'",
                      "exclusive": True}])
    local = objects.queue(f"{prices}.local", bind=(f"{prices}.bindings", "#"))
    channel.confirm_delivery()
    for i, office in enumerate([NY, LONDON, NY, LONDON, NY]):
        publish(channel, prices, "price.update", f"{i}-{office['office']}".encode(), office)
    settle(channel, [(forwarding, 3), (local, 2)])
    assert bodies(channel, forwarding) == ["0-New York", "2-New York", "4-New York"]
    assert bodies(channel, local) == ["1-London", "3-London"]
    wait_counts(sc, f"{prices}-divert", matched=3, forwarded=3)
    ex = sc.exchange(prices)
    assert (ex["diverted"], ex["routed"], ex["received"]) == (3, 2, 5)


def test_exclusive_without_filter_takes_everything(run_config, channel, managed, objects):
    name = managed("excl")
    target = objects.queue(f"{name}.target")
    run_config([{"name": name, "kind": "direct"}],
               [{"name": f"{name}-all", "address": name, "forwarding_address": target,
                 "exclusive": True, "routing_type": "ANYCAST"}])
    local = objects.queue(f"{name}.local", bind=(f"{name}.bindings", "k"))
    channel.confirm_delivery()
    for i in range(5):
        publish(channel, name, "k", str(i).encode())
    settle(channel, [(target, 5)])
    assert bodies(channel, target) == ["0", "1", "2", "3", "4"]
    assert depth(channel, local) == 0


def test_non_exclusive_copy_to_a_spy_address(run_config, channel, managed, objects):
    name = managed("spy")
    spy_exchange = objects.exchange(f"{name}.spy", "topic")  # MULTICAST to an exchange
    spy = objects.queue(f"{name}.spyq", bind=(spy_exchange, "#"))
    sc = run_config([{"name": name, "kind": "rtopic"}],
                    [{"name": f"{name}-spy", "address": name, "forwarding_address": spy_exchange,
                      "routing_type": "MULTICAST"}])
    local = objects.queue(f"{name}.local", bind=(f"{name}.bindings", "orders.eu.new"))
    sc.wait_running(name, bindings=1)
    channel.confirm_delivery()
    publish(channel, name, "orders.*.new", b"order-1", {"CC": ["audit.x"]}, message_id="m-1")
    settle(channel, [(local, 1), (spy, 1)])
    ((_, local_props, local_body),) = drain(channel, local)
    ((spy_method, spy_props, spy_body),) = drain(channel, spy)
    assert local_body == spy_body == b"order-1"
    assert local_props.message_id == "m-1" and "_AMQ_ORIG_QUEUE" not in local_props.headers
    assert spy_method.routing_key == "orders.*.new" and spy_method.exchange == spy_exchange
    assert spy_props.message_id != "m-1"
    assert spy_props.headers["_AMQ_ORIG_QUEUE"] == f"{name}-spy"
    assert spy_props.headers["CC"] == ["audit.x"]
    wait_counts(sc, f"{name}-spy", matched=1, forwarded=1)


def test_several_diverts_on_one_address_with_mixed_kinds(run_config, channel, managed,
                                                          objects):
    """Two exclusive (both fire when both match), two non-exclusive, one with a filter."""
    name = managed("mixed")
    q = {k: objects.queue(f"{name}.{k}") for k in ("ex1", "ex2", "copy", "eu")}
    run_config([{"name": name, "kind": "topic"}], [
        {"name": f"{name}-copy", "address": name, "forwarding_address": q["copy"],
         "routing_type": "ANYCAST"},
        {"name": f"{name}-ex1", "address": name, "forwarding_address": q["ex1"],
         "exclusive": True, "filter": "urgent = TRUE", "routing_type": "ANYCAST"},
        {"name": f"{name}-eu", "address": name, "forwarding_address": q["eu"],
         "filter": "region = 'eu'", "routing_type": "ANYCAST"},
        {"name": f"{name}-ex2", "address": name, "forwarding_address": q["ex2"],
         "exclusive": True, "filter": "urgent = TRUE AND region = 'eu'",
         "routing_type": "ANYCAST"},
    ])
    local = objects.queue(f"{name}.local", bind=(f"{name}.bindings", "#"))
    channel.confirm_delivery()
    publish(channel, name, "k", b"urgent-eu", {"urgent": True, "region": "eu"})
    publish(channel, name, "k", b"urgent-us", {"urgent": True, "region": "us"})
    publish(channel, name, "k", b"calm-eu", {"urgent": False, "region": "eu"})
    publish(channel, name, "k", b"calm-us", {"region": "us"})
    settle(channel, [(q["ex1"], 2), (q["ex2"], 1), (q["copy"], 2), (q["eu"], 1), (local, 2)])
    assert bodies(channel, q["ex1"]) == ["urgent-eu", "urgent-us"]
    assert bodies(channel, q["ex2"]) == ["urgent-eu"]
    assert bodies(channel, q["copy"]) == ["calm-eu", "calm-us"]
    assert bodies(channel, q["eu"]) == ["calm-eu"]
    assert bodies(channel, local) == ["calm-eu", "calm-us"]


# ------------------------------------------------------------------------------ routing types


def test_each_routing_type(run_config, channel, managed, objects):
    """An exchange X (bound to X.via-exchange) and a queue X share a name; Y is only a queue;
    Z is nothing."""
    name = managed("rtypes")
    x, y, z = f"{name}.X", f"{name}.Y", f"{name}.Z"
    objects.exchange(x, "fanout")
    via_exchange = objects.queue(f"{x}.via-exchange", bind=(x, ""))
    as_queue = objects.queue(x)
    only_queue = objects.queue(y)
    dead = objects.dead_letters()
    diverts = [
        {"name": f"{name}-any", "address": name, "forwarding_address": x,
         "routing_type": "ANYCAST", "filter": "t = 'any'"},
        {"name": f"{name}-multi", "address": name, "forwarding_address": x,
         "routing_type": "MULTICAST", "filter": "t = 'multi'"},
        {"name": f"{name}-pass", "address": name, "forwarding_address": x,
         "routing_type": "PASS", "filter": "t = 'pass'"},
        {"name": f"{name}-strip", "address": name, "forwarding_address": x,
         "filter": "t = 'strip'"},
        {"name": f"{name}-strip-q", "address": name, "forwarding_address": y,
         "routing_type": "STRIP", "filter": "t = 'strip'"},
        {"name": f"{name}-strip-none", "address": name, "forwarding_address": z,
         "filter": "t = 'strip'"},
        {"name": f"{name}-multi-none", "address": name, "forwarding_address": y,
         "routing_type": "MULTICAST", "filter": "t = 'multi'"},
    ]
    sc = run_config([{"name": name, "kind": "fanout"}], diverts)
    targets = (sc.status() or {})["forwarding_addresses"]
    assert targets == {x: "exchange", y: "queue", z: None}
    channel.confirm_delivery()
    publish(channel, name, "", b"any", {"t": "any"})
    publish(channel, name, "", b"multi", {"t": "multi"})
    publish(channel, name, "", b"pass-multicast", {"t": "pass"})
    publish(channel, name, "", b"pass-anycast", {"t": "pass", "_AMQ_ROUTING_TYPE": 1})
    publish(channel, name, "", b"strip", {"t": "strip"})
    settle(channel, [(as_queue, 2), (via_exchange, 3), (only_queue, 1), (dead, 2)])
    got_queue = {b.decode(): p.headers.get("_AMQ_ROUTING_TYPE")
                 for _, p, b in drain(channel, as_queue)}
    assert got_queue == {"any": 1, "pass-anycast": 1}
    got_exchange = {b.decode(): p.headers.get("_AMQ_ROUTING_TYPE")
                    for _, p, b in drain(channel, via_exchange)}
    assert got_exchange == {"multi": 0, "pass-multicast": None, "strip": None}
    ((_, strip_props, strip_body),) = drain(channel, only_queue)
    assert strip_body == b"strip" and "_AMQ_ROUTING_TYPE" not in strip_props.headers
    # rtroute.dead is shared: only this test's diverts' dead letters count here
    reasons = {p.headers["x-rtroute-divert"]: p.headers["x-rtroute-error"]
               for _, p, _ in drain(channel, dead)
               if str((p.headers or {}).get("x-rtroute-divert", "")).startswith(name)}
    assert "no exchange or queue of that name" in reasons[f"{name}-strip-none"]
    assert "no exchange of that name" in reasons[f"{name}-multi-none"]
    wait_counts(sc, f"{name}-strip-none", matched=1, dead_lettered=1, forwarded=0)


def test_forwarding_address_list_and_wildcard_address(run_config, channel, managed, objects):
    eu, us = managed("orders.eu"), managed("orders.us")  # rtroute-test.orders.eu.HEX, ...
    audit1, audit2 = objects.queue(f"{eu}.audit1"), objects.queue(f"{eu}.audit2")
    sc = run_config([{"name": eu, "kind": "topic"}, {"name": us, "kind": "topic"}],
                    [{"name": f"{eu}-audit", "address": "rtroute-test.orders.#",
                      "forwarding_address": f"{audit1}, {audit2}", "routing_type": "ANYCAST"}])
    channel.confirm_delivery()
    publish(channel, eu, "k", b"from-eu")
    publish(channel, us, "k", b"from-us")
    settle(channel, [(audit1, 2), (audit2, 2)])
    for queue in (audit1, audit2):
        got = {b.decode(): p.headers["_AMQ_ORIG_ADDRESS"] for _, p, b in drain(channel, queue)}
        assert got == {"from-eu": eu, "from-us": us}  # the concrete address, not the pattern
    assert divert_status(sc, f"{eu}-audit")["exchanges"] == [eu, us]


# -------------------------------------------------------------------- the copy and transformer


def test_headers_and_properties_of_the_copy(run_config, channel, managed, objects):
    name = managed("hdrs")
    target = objects.exchange(f"{name}.target", "direct")
    queue = objects.queue(f"{name}.q", bind=(target, "diverted.key"))
    run_config([{"name": name, "kind": "rtopic"}],
               [{"name": f"{name}-d", "address": name, "forwarding_address": target,
                 "routing_key": "diverted.key"}])
    channel.confirm_delivery()
    props = {"content_type": "application/json", "delivery_mode": 2, "priority": 3,
             "correlation_id": "c-1", "reply_to": "r", "message_id": "orig-1",
             "timestamp": 1700000000, "type": "t", "app_id": "app", "expiration": "600000"}
    publish(channel, name, "a.b", b'{"x": 1}', {"keep": "me"}, **props)
    settle(channel, [(queue, 1)])
    ((method, got, body),) = drain(channel, queue)
    assert body == b'{"x": 1}' and method.routing_key == "diverted.key"
    assert got.headers == {
        "keep": "me",
        "_AMQ_ORIG_ADDRESS": name,
        "_AMQ_ORIG_QUEUE": f"{name}-d",
        "_AMQ_ORIG_MESSAGE_ID": "orig-1",
        "x-rtroute-hops": 1,  # no _AMQ_ORIG_ROUTING_TYPE: the original had no routing type
    }
    assert got.message_id not in (None, "orig-1")
    for attr, value in props.items():
        if attr != "message_id":
            assert getattr(got, attr) == value, attr  # expiration kept, as Artemis does


def test_transformer_rewrites_copies_and_failures_are_dead_lettered(run_config, channel,
                                                                    managed, objects):
    name = managed("tx")
    good, bad = objects.queue(f"{name}.good"), objects.queue(f"{name}.bad")
    dead = objects.dead_letters()
    failing = {"explode": "transformer raised RuntimeError: no such luck",
               "bad_cc": "'CC' must be an array of routing keys",
               "unencodable": "cannot encode the message's properties"}
    sc = run_config([{"name": name, "kind": "topic"}], [
        {"name": f"{name}-tag", "address": name, "forwarding_address": good,
         "routing_type": "ANYCAST", "transformer": "tests.divert.transformers:tag"},
    ] + [{"name": f"{name}-{f}", "address": name, "forwarding_address": bad,
          "routing_type": "ANYCAST", "transformer": f"tests.divert.transformers:{f}"}
         for f in failing])
    local = objects.queue(f"{name}.local", bind=(f"{name}.bindings", "#"))
    channel.confirm_delivery()
    publish(channel, name, "k", b"hello", message_id="m-tx")
    settle(channel, [(good, 1), (dead, len(failing)), (local, 1)])
    ((_, props, body),) = drain(channel, good)
    assert body == b"HELLO" and props.content_type == "text/plain"
    assert props.headers["x-transformed-by"] == "tag"
    assert props.headers["x-seen-orig-queue"] == f"{name}-tag"
    reasons = {p.headers["x-rtroute-divert"]: (p.headers["x-rtroute-error"], b)
               for _, p, b in drain(channel, dead)}
    for function, reason in failing.items():
        error, dead_body = reasons[f"{name}-{function}"]
        assert reason in error and dead_body == b"hello", function
    assert [b for _, _, b in drain(channel, local)] == [b"hello"]  # the original goes on
    assert depth(channel, bad) == 0 and sc.proc.poll() is None


def test_a_forwarding_exchange_deleted_while_running(run_config, channel, managed, objects):
    """Publishing to a missing exchange closes the channel: the sidecar reconnects, looks the
    address up again, and from then on dead-letters the copies; no original is lost."""
    name = managed("gone")
    target = objects.exchange(f"{name}.target", "fanout")
    copies = objects.queue(f"{name}.copies", bind=(target, ""))
    dead = objects.dead_letters()
    sc = run_config([{"name": name, "kind": "topic"}],
                    [{"name": f"{name}-d", "address": name, "forwarding_address": target,
                      "routing_type": "MULTICAST"}])
    local = objects.queue(f"{name}.local", bind=(f"{name}.bindings", "#"))
    channel.confirm_delivery()
    publish(channel, name, "k", b"before")
    settle(channel, [(copies, 1), (local, 1)])
    channel.exchange_delete(target)
    publish(channel, name, "k", b"after")
    settle(channel, [(local, 2), (dead, 1)], timeout=60)
    # "after" may come twice: its ingress message was redelivered (at-least-once)
    assert set(bodies(channel, local)) == {"after", "before"}
    ((_, props, body),) = drain(channel, dead)
    assert body == b"after" and "no exchange of that name" in props.headers["x-rtroute-error"]
    status = sc.status()
    assert status["connects"] >= 2 and status["forwarding_addresses"][target] is None


# ------------------------------------------------------------------------ chains and loops


KINDS = ["topic", "direct", "fanout", "headers", "rtopic"]


@pytest.mark.slow
def test_a_chain_of_25_diverts_across_managed_exchanges(run_config, channel, managed,
                                                        objects):
    """Artemis tests a 25-hop divert chain; here through every managed exchange kind."""
    hops = 25
    names = [managed(f"chain{i}") for i in range(hops + 1)]
    exchanges = [{"name": n, "kind": KINDS[i % len(KINDS)]}  # the default max_hops
                 for i, n in enumerate(names)]
    exchanges[-1]["kind"] = "topic"
    diverts = [{"name": f"{names[i]}-next", "address": names[i],
                "forwarding_address": names[i + 1], "exclusive": True}
               for i in range(hops)]
    sc = run_config(exchanges, diverts)
    end = objects.queue(f"{names[-1]}.end", bind=(f"{names[-1]}.bindings", "#"))
    early = objects.queue(f"{names[0]}.early", bind=(f"{names[0]}.bindings", "#"))
    channel.confirm_delivery()
    for i in range(20):
        publish(channel, names[0], "chain.key", str(i).encode(), {"n": i}, message_id=f"m{i}")
    settle(channel, [(end, 20)], timeout=60)
    got = drain(channel, end)
    assert sorted(int(b) for _, _, b in got) == list(range(20))
    for method, props, _ in got:
        assert method.routing_key == "chain.key"
        assert props.headers["x-rtroute-hops"] == hops
        assert props.headers["_AMQ_ORIG_ADDRESS"] == names[-2]
        assert props.headers["_AMQ_ORIG_QUEUE"] == f"{names[-2]}-next"
    assert depth(channel, early) == 0
    for d in diverts:
        wait_counts(sc, d["name"], matched=20, forwarded=20)


def test_config_with_a_divert_cycle_is_refused(tmp_path):
    path = tmp_path / "cyclic.toml"
    path.write_text(config_text(
        [{"name": "A"}, {"name": "B"}],
        [{"name": "ab", "address": "A", "forwarding_address": "B"},
         {"name": "ba", "address": "B", "forwarding_address": "A"}]))
    result = subprocess.run([sys.executable, "-m", "rtroute.cli", "run", "-c", str(path)],
                            check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "closes a cycle A -> B -> A (diverts 'ab', 'ba')" in result.stderr


def test_a_loop_through_broker_bindings_is_cut_by_the_hop_limit(run_config, channel, managed,
                                                                 objects):
    """A -> X by a divert, X -> A by an exchange binding: no divert cycle, still a loop."""
    name = managed("loop")
    x = objects.exchange(f"{name}.X", "fanout")
    dead = objects.dead_letters()
    sc = run_config([{"name": name, "kind": "topic", "max_hops": 3}],
                    [{"name": f"{name}-out", "address": name, "forwarding_address": x,
                      "exclusive": True}])
    channel.exchange_bind(name, x)  # the way back, invisible to the cycle check
    channel.confirm_delivery()
    publish(channel, name, "k", b"round and round", message_id="loop-1")
    settle(channel, [(dead, 1)])
    ((_, props, body),) = drain(channel, dead)
    assert body == b"round and round"
    assert props.headers["x-rtroute-hops"] == 4
    assert "hop limit reached" in props.headers["x-rtroute-error"]
    assert "allows 3 (max_hops)" in props.headers["x-rtroute-error"]
    wait_counts(sc, f"{name}-out", matched=4, forwarded=3, dead_lettered=1)
    assert sc.exchange(name)["received"] == 4 and sc.proc.poll() is None


# --------------------------------------------------------------------- run-time create/destroy


def test_create_and_destroy_diverts_over_http(run_config, channel, managed, objects):
    name = managed("http")
    other = managed("http2")
    spy = objects.queue(f"{name}.spy")
    token = "s3cret-token"
    sc = run_config([{"name": name, "kind": "topic"}, {"name": other, "kind": "topic"}],
                    http={"token": token})
    local = objects.queue(f"{name}.local", bind=(f"{name}.bindings", "#"))
    body = {"name": f"{name}-spy", "address": name, "forwarding_address": spy,
            "filter": "office = 'New York'"}
    assert http(sc, "POST", "/diverts", body)[0] == 401  # a token is configured
    code, answer = http(sc, "POST", "/diverts", body, token)
    assert code == 201, answer
    assert answer["divert"]["origin"] == "http" and answer["warnings"] == []
    assert http(sc, "POST", "/diverts", body, token)[0] == 409
    code, answer = http(sc, "POST", "/diverts", dict(body, name="x", filter="office ="), token)
    assert code == 400 and "filter" in answer["error"]
    code, answer = http(sc, "POST", "/diverts", dict(body, name="y", address="nope"), token)
    assert code == 400 and "matches no managed exchange" in answer["error"]
    # a divert that would close a cycle is refused at creation
    assert http(sc, "POST", "/diverts", {"name": "to-other", "address": name,
                                         "forwarding_address": other}, token)[0] == 201
    code, answer = http(sc, "POST", "/diverts", {"name": "back", "address": other,
                                                 "forwarding_address": name}, token)
    assert code == 400 and "closes a cycle" in answer["error"]
    assert http(sc, "DELETE", "/diverts/to-other", token=token)[0] == 200

    channel.confirm_delivery()
    publish(channel, name, "k", b"ny-1", NY)
    publish(channel, name, "k", b"ldn-1", LONDON)
    settle(channel, [(spy, 1), (local, 2)])
    assert bodies(channel, spy) == ["ny-1"]
    code, listed = http(sc, "GET", "/diverts", token=token)
    assert code == 200 and [d["name"] for d in listed] == [f"{name}-spy"]
    assert (listed[0]["matched"], listed[0]["forwarded"]) == (1, 1)
    metrics = http_metrics(sc, token)
    assert f'rtroute_divert_forwarded_total{{divert="{name}-spy",vhost="/"}} 1.0' in metrics

    code, answer = http(sc, "DELETE", f"/diverts/{name}-spy", token=token)
    assert code == 200 and answer["deleted"]["forwarded"] == 1
    assert http(sc, "DELETE", f"/diverts/{name}-spy", token=token)[0] == 404
    publish(channel, name, "k", b"ny-2", NY)
    settle(channel, [(local, 3)])
    assert depth(channel, spy) == 0
    assert sc.proc.poll() is None


def http_metrics(sc, token):
    request = urllib.request.Request(f"http://127.0.0.1:{sc.port}/metrics")
    request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=5) as r:
        return r.read().decode()


# ---------------------------------------------------------------------------------- kill -9


def publish_many(name: str, count: int, done: threading.Event) -> None:
    publish_in_batches(BROKER_URI, name, (("k", str(i).encode(), pika.BasicProperties(
        delivery_mode=2, message_id=f"m{i}", headers={"even": i % 2 == 0}))
        for i in range(count)))
    done.set()


def ids_in(channel, queue):
    return collections.Counter(int(b) for _, _, b in drain_many(channel, queue))


@pytest.mark.slow
def test_kill_9_mid_stream_loses_neither_originals_nor_copies(run_config, channel, managed,
                                                              objects):
    name, chained = managed("kill9"), managed("kill9b")
    count, prefetch = 20_000, 500
    spy = objects.queue(f"{name}.spy")
    exchanges = [{"name": name, "kind": "topic", "prefetch": prefetch},
                 {"name": chained, "kind": "topic", "prefetch": prefetch}]
    diverts = [{"name": f"{name}-spy", "address": name, "forwarding_address": spy,
                "filter": "even = TRUE", "routing_type": "ANYCAST"},
               {"name": f"{name}-chain", "address": name, "forwarding_address": chained}]
    sc = run_config(exchanges, diverts)
    local = objects.queue(f"{name}.local", bind=(f"{name}.bindings", "#"))
    downstream = objects.queue(f"{chained}.local", bind=(f"{chained}.bindings", "#"))
    done = threading.Event()
    threading.Thread(target=publish_many, args=(name, count, done), daemon=True).start()
    wait_for(lambda: depth(channel, local) > count // 4, 60)
    sc.kill9()
    survivor = run_config(exchanges, diverts)
    assert done.wait(120)
    settle(channel, [(local, count), (spy, count // 2), (downstream, count)], timeout=120)
    expected = {local: set(range(count)), downstream: set(range(count)),
                spy: set(range(0, count, 2))}
    for queue, ids in expected.items():
        got = ids_in(channel, queue)
        assert set(got) == ids, queue  # nothing lost
        duplicates = sum(n - 1 for n in got.values())
        # only messages in flight at the kill come twice: two prefetch windows bound them
        assert duplicates <= 2 * prefetch, (queue, duplicates)
    assert survivor.exchange(name)["redelivered"] <= prefetch
    assert survivor.exchange(name)["received"] > 0  # the kill was mid-stream


def test_xpath_filter_reads_the_xml_body(run_config, channel, managed, objects):
    """Artemis's XPATH filters: the divert decodes the body only for such a filter."""
    orders = managed("orders")
    eu = objects.queue(f"{orders}.eu")
    sc = run_config([{"name": orders, "kind": "topic"}],
                    [{"name": f"{orders}-eu", "address": orders, "forwarding_address": eu,
                      "filter": "XPATH '/order/region=\"eu\"'", "exclusive": True}])
    rest = objects.queue(f"{orders}.rest", bind=(f"{orders}.bindings", "#"))
    channel.confirm_delivery()
    for body in (b"<order><region>eu</region></order>", b"<order><region>us</region></order>",
                 b"{\"region\": \"eu\"}", b""):
        publish(channel, orders, "order.new", body)
    settle(channel, [(eu, 1), (rest, 3)])
    assert [b for _m, _p, b in drain(channel, eu)] == [b"<order><region>eu</region></order>"]
    assert len(drain(channel, rest)) == 3
    wait_counts(sc, f"{orders}-eu", matched=1, forwarded=1)
