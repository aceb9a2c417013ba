"""A vhost's bindings from a definitions export (rtroute.amqp.definitions_export): the parse
against json.loads, the batching rule (a listing is never served by an export that started
before it was asked for), and, on the real broker, the rule per version that decides where
the export is used at all."""
from __future__ import annotations

import json
import threading
import uuid

import pika
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtroute.amqp import ManagementClient
from rtroute.amqp.definitions_export import (
    EXPORT_FROM,
    DefinitionsExports,
    ExportRefused,
    exported_bindings,
)
from rtroute.amqp.management_listing import ListingProgress

NAMES = st.sampled_from(["a", "b", "c", "x]", 'q"1', "{}", "ü"])
VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                      lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=6)
BINDING = st.fixed_dictionaries({
    "source": NAMES, "vhost": st.just("v"), "destination": NAMES,
    "destination_type": st.sampled_from(["queue", "exchange"]),
    "routing_key": st.text(max_size=8),
    "arguments": st.dictionaries(st.text(max_size=4), VALUES, max_size=3)})


@settings(max_examples=200, deadline=None)
@given(bindings=st.lists(BINDING, max_size=12), exchanges=st.sets(NAMES),
       extra=st.dictionaries(st.sampled_from(["queues", "policies", "rabbit_version", "z"]),
                             VALUES, max_size=4),
       bindings_first=st.booleans(), sources=st.sets(NAMES, max_size=3),
       indent=st.sampled_from([None, 1]))
def test_the_bindings_of_the_exchanges_asked_for_as_json_loads_reads_them(
        bindings, exchanges, extra, bindings_first, sources, indent):
    document = {"bindings": bindings, "exchanges": [{"name": n, "type": "direct"}
                                                      for n in sorted(exchanges)]}
    document = {**document, **extra} if bindings_first else {**extra, **document}
    rows, named = exported_bindings(json.dumps(document, indent=indent).encode(), sources)
    assert named == exchanges & sources
    assert rows == {source: [(b["destination"], b["destination_type"], b["routing_key"],
                              b["arguments"]) for b in bindings if b["source"] == source]
                    for source in sources}


@pytest.mark.parametrize("text", [b"[]", b'{"bindings": {}}', b'{"bindings": [1', b"{",
                                  b'{"a" 1}'])
def test_what_is_no_definitions_export_is_refused(text):
    with pytest.raises((ValueError, TypeError, LookupError)):
        exported_bindings(text, ["a"])


def _export(bindings: list[dict], exchanges: list[str]) -> bytes:
    return json.dumps({"bindings": bindings,
                       "exchanges": [{"name": n} for n in exchanges]}).encode()


def _binding(source: str, key: str) -> dict:
    return {"source": source, "destination": "q", "destination_type": "queue",
            "routing_key": key, "arguments": {}}


def test_a_listing_asked_for_while_an_export_runs_waits_for_the_next_one():
    """The gap-free rule: an export that started before a listing was asked for may miss a
    change made between the two (the watcher subscribed to events just before asking), so it
    must not serve that listing."""
    first_started, release = threading.Event(), threading.Event()
    bindings = [_binding("x", "old")]
    calls = []

    def fetch(vhost: str, progress: ListingProgress) -> bytes:
        calls.append(vhost)
        snapshot = _export(list(bindings), ["x", "y"])
        if len(calls) == 1:
            first_started.set()
            release.wait(5)
        return snapshot

    exports = DefinitionsExports(fetch, lambda: EXPORT_FROM)
    results: dict[str, list] = {}
    early = threading.Thread(target=lambda: results.__setitem__(
        "early", exports.bindings("v", "x", ListingProgress("x"))))
    early.start()
    assert first_started.wait(5)
    bindings.append(_binding("x", "new"))  # a change after the first export began
    late = threading.Thread(target=lambda: results.__setitem__(
        "late", exports.bindings("v", "x", ListingProgress("x"))))
    late.start()
    release.set()
    early.join(5)
    late.join(5)
    assert [row[2] for row in results["early"]] == ["old"]
    assert [row[2] for row in results["late"]] == ["old", "new"]
    assert len(calls) == 2


def test_listings_asked_for_together_share_one_export():
    gate = threading.Event()
    calls = []

    def fetch(vhost: str, progress: ListingProgress) -> bytes:
        calls.append(vhost)
        gate.wait(5)
        return _export([_binding("x", "kx"), _binding("y", "ky")], ["x", "y", "z"])

    exports = DefinitionsExports(fetch, lambda: (4, 3, 6))
    blocker = threading.Thread(target=exports.bindings, args=("v", "x", ListingProgress("x")))
    blocker.start()  # the first export runs (held by the gate): the others form a batch
    while not calls:
        gate.wait(0.01)
    out: dict[str, list] = {}
    threads = [threading.Thread(target=lambda n=n: out.__setitem__(
        n, exports.bindings("v", n, ListingProgress(n)))) for n in ("x", "y", "z")]
    for thread in threads:
        thread.start()
    gate.set()
    for thread in (blocker, *threads):
        thread.join(5)
    assert len(calls) == 2  # the blocker's, and one for the three
    assert out == {"x": [("q", "queue", "kx", {})], "y": [("q", "queue", "ky", {})], "z": []}


def test_a_missing_exchange_a_failure_a_refusal_and_an_older_broker():
    exports = DefinitionsExports(lambda v, p: _export([], ["x"]), lambda: (4, 3, 0))
    with pytest.raises(LookupError):
        exports.bindings("v", "gone", ListingProgress("gone"))

    def failing(vhost: str, progress: ListingProgress) -> bytes:
        raise OSError("reset")

    with pytest.raises(OSError, match="reset"):
        DefinitionsExports(failing, lambda: (4, 3)).bindings("v", "x", ListingProgress("x"))

    refused_calls = []

    def refused(vhost: str, progress: ListingProgress) -> bytes:
        refused_calls.append(vhost)
        raise ExportRefused("HTTP 401")

    exports = DefinitionsExports(refused, lambda: (4, 3))
    assert exports.bindings("v", "x", ListingProgress("x")) is None
    assert exports.bindings("v", "x", ListingProgress("x")) is None
    assert refused_calls == ["v"] and not exports.usable  # asked once, then the listings

    for version in [(4, 0, 5), (3, 10, 8), (4, 2, 9)]:
        older = DefinitionsExports(lambda v, p: pytest.fail("exported"), lambda v=version: v)
        assert older.bindings("v", "x", ListingProgress("x")) is None


def test_an_export_only_for_an_exchange_that_holds_half_of_the_vhost_or_before_the_first():
    """A vhost of many small exchanges is exported once (its sizes learnt), then each is
    listed; an exchange with half of the vhost's bindings or more is exported again."""
    calls = []

    def fetch(vhost: str, progress: ListingProgress) -> bytes:
        calls.append(vhost)
        return _export([_binding("big", f"k{i}") for i in range(10)]
                       + [_binding(f"s{i}", "k") for i in range(5)],
                       ["big"] + [f"s{i}" for i in range(5)])

    exports = DefinitionsExports(fetch, lambda: EXPORT_FROM)
    assert len(exports.bindings("v", "s0", ListingProgress("s0"))) == 1  # the first: exported
    assert exports.bindings("v", "s1", ListingProgress("s1")) is None  # 1 of 15: listed
    assert exports.bindings("v", "new", ListingProgress("new")) is None  # unknown: listed
    assert len(exports.bindings("v", "big", ListingProgress("big"))) == 10  # 10 of 15
    grown = ListingProgress("s2", expected=8)  # its own last listing found 8: half of 15
    assert exports.bindings("v", "s2", grown) == [("q", "queue", "k", {})]
    assert len(calls) == 3
    assert len(exports.bindings("w", "s3", ListingProgress("s3"))) == 1  # another vhost: its own
    assert len(calls) == 4


@pytest.mark.broker
def test_where_the_export_keeps_every_binding_it_is_used_and_lists_what_the_listing_does(
        broker_uri, mgmt, broker_version, names):
    """The rule per version: RabbitMQ 3.10.8 and 4.0.5 leave the bindings to exclusive queues
    out of a definitions export (so rtroute lists the exchange there); 4.3.6 keeps them (so
    rtroute reads the export). Either way the client gives what the exchange's listing gives:
    an exclusive queue, a transient auto-delete queue, an exchange, arguments."""
    source, target = names.exchange(), names.exchange("dest")
    conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        ch = conn.channel()
        ch.exchange_declare(source, "direct", auto_delete=True)
        ch.exchange_declare(target, "fanout", auto_delete=True)
        exclusive = ch.queue_declare("", exclusive=True).method.queue
        transient = ch.queue_declare("", auto_delete=True).method.queue
        ch.queue_bind(exclusive, source, "k.exclusive", arguments={"x-n": 1, "s": "t"})
        ch.queue_bind(transient, source, "k.transient")
        ch.exchange_bind(target, source, "k.exchange")
        listing = {(b.destination, b.destination_type, b.routing_key, json.dumps(b.arguments))
                   for b in mgmt.exchange_bindings(source)}
        export = mgmt.request("GET", "definitions/%2F")
        in_export = {b["destination"] for b in export["bindings"] if b["source"] == source}
        keeps_exclusive = exclusive in in_export
        if broker_version >= EXPORT_FROM:
            assert keeps_exclusive  # 4.3.6: every binding is in the export
        elif broker_version[:2] in ((3, 10), (4, 0)):
            assert not keeps_exclusive  # why the export is not used there
        client = ManagementClient.from_amqp_uri(broker_uri, mgmt.base_url.rsplit("api/", 1)[0])
        got = {(b.destination, b.destination_type, b.routing_key, json.dumps(b.arguments))
               for b in client.iter_exchange_bindings(source)}
        assert got == listing and len(got) == 3
        assert client.exports.usable == (broker_version >= EXPORT_FROM)
    finally:
        conn.close()


@pytest.mark.broker
def test_a_user_who_may_not_export_gets_the_listing(broker_uri, mgmt, names):
    user, password = f"rtroute-test-{uuid.uuid4().hex[:8]}", "pw"
    mgmt.request("PUT", f"users/{user}", {"password": password, "tags": "management"})
    try:
        mgmt.request("PUT", f"permissions/%2F/{user}",
                     {"configure": ".*", "write": ".*", "read": ".*"})
        source = names.exchange()
        conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
        try:
            ch = conn.channel()
            ch.exchange_declare(source, "direct", auto_delete=True)
            queue = ch.queue_declare("", exclusive=True).method.queue
            ch.queue_bind(queue, source, "k")
            base = mgmt.base_url.rsplit("api/", 1)[0].replace("://", f"://{user}:{password}@")
            client = ManagementClient([base])
            assert [(b.destination, b.routing_key) for b in
                    client.iter_exchange_bindings(source)] == [(queue, "k")]
            # refused at the first try on 4.3 (401), never tried on older brokers
            assert not client.exports.usable
        finally:
            conn.close()
    finally:
        mgmt.request("DELETE", f"users/{user}")
