"""The executor-side router on plain Arrow batches (no Spark): same answers as the exchanges."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from rtroute.routing import make_exchange
from rtroute.spark.batches import BatchRouter, decode_headers, fingerprint, header_text

from .conftest import plugin_bindings, random_messages


def _exchange(kind: str, bindings):
    exchange = make_exchange(kind)
    for destination, key in bindings:
        exchange.bind(destination, key)
    return exchange


def _batch(messages: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        messages, schema=pa.schema([("id", pa.int64()), ("routing_key", pa.string()),
                                    ("headers", pa.string())]))


@pytest.mark.parametrize("kind", ["rtopic", "topic", "direct", "fanout"])
def test_each_kind_routes_as_its_exchange(kind):
    bindings = plugin_bindings() + [("T", "server1.#"), ("U", "*.app2.*.*")]
    if kind == "rtopic":
        bindings = [(d, k) for d, k in bindings if "*" not in k and "#" not in k]
    messages = random_messages(600, seed=3)
    if kind in ("topic", "direct"):  # concrete routing keys: wildcards are literal words here
        for m in messages:
            m["routing_key"] = m["routing_key"].replace("*", "app1").replace("#", "server2")
    exchange = _exchange(kind, bindings)
    out = BatchRouter(kind, bindings).route_batch(_batch(messages)).to_pylist()
    for message, row in zip(messages, out):
        headers = json.loads(message["headers"]) if message["headers"] else None
        expected = exchange.route(message["routing_key"], headers)
        assert row["error"] is None
        assert row["destinations"] == sorted(expected.destinations), message
        assert dict(row["delivered_headers"]) == {
            k: header_text(v) for k, v in expected.headers.items()}


def test_bad_rows_get_a_reason_and_the_batch_survives():
    rows = [
        {"routing_key": None, "headers": None},
        {"routing_key": "x" * 256, "headers": None},
        {"routing_key": "é" * 128, "headers": None},  # 128 characters, 256 bytes
        {"routing_key": "a", "headers": json.dumps({"CC": "server1.app1.mod1.info"})},
        {"routing_key": "a", "headers": json.dumps({"BCC": 5})},
        {"routing_key": "a", "headers": json.dumps({"CC": None})},
        {"routing_key": "a", "headers": json.dumps(["CC"])},
        {"routing_key": "a", "headers": "{not json"},
        {"routing_key": "a", "headers": json.dumps({"CC": ["x" * 70_000]})},
        {"routing_key": "server1.app1.mod1.info", "headers": None},
    ]
    batch = pa.RecordBatch.from_pylist(rows)
    out = BatchRouter("rtopic", plugin_bindings()).route_batch(batch).to_pylist()
    errors = [row["error"] for row in out]
    assert errors[0] == "routing key is null"
    assert "256 bytes" in errors[1] and "256 bytes" in errors[2]
    assert "406 PRECONDITION_FAILED" in errors[3] and '"CC",longstr' in errors[3]
    assert '"BCC",signedint' in errors[4]
    assert '"CC",void' in errors[5]
    assert "JSON object" in errors[6]
    assert "not valid JSON" in errors[7]
    assert "limit is 65536" in errors[8]
    assert all(row["destinations"] is None and row["delivered_headers"] is None
               for row in out[:-1])
    assert out[-1] == {**rows[-1], "destinations": ["A"], "delivered_headers": [], "error": None}


def test_struct_and_map_headers_treat_null_fields_as_absent():
    struct = pa.array([{"CC": ["server2.#"], "BCC": None, "x": "1"},
                       {"CC": None, "BCC": ["#.error"], "x": None}, None])
    decoded, errors = decode_headers(struct)
    assert decoded == [{"CC": ["server2.#"], "x": "1"}, {"BCC": ["#.error"]}, None]
    assert errors == [None, None, None]
    as_map = pa.array([[("CC", ["server2.#"])], [("BCC", None)]],
                      pa.map_(pa.string(), pa.list_(pa.string())))
    assert decode_headers(as_map)[0] == [{"CC": ["server2.#"]}, {}]


def test_struct_headers_route_like_json_headers():
    router = BatchRouter("rtopic", plugin_bindings())
    batch = pa.RecordBatch.from_pydict({
        "routing_key": ["server1.app1.mod1.info"] * 2,
        "headers": pa.array([{"CC": ["server2.#"], "BCC": ["#.error"]}, None]),
    })
    out = router.route_batch(batch).to_pylist()
    assert out[0]["destinations"] == ["A", "B", "D", "F", "G"]
    assert out[0]["delivered_headers"] == [("CC", '["server2.#"]')]
    assert out[1]["destinations"] == ["A"]


def test_binary_routing_keys_are_decoded_and_bad_utf8_is_an_error():
    batch = pa.RecordBatch.from_pydict({"routing_key": pa.array(
        [b"server1.app1.mod1.info", b"\xff"], pa.binary())})
    out = BatchRouter("rtopic", plugin_bindings()).route_batch(batch, headers_column=None)
    rows = out.to_pylist()
    assert rows[0]["destinations"] == ["A"]
    assert "not valid UTF-8" in rows[1]["error"]


def test_fingerprint_ignores_order_and_duplicates_but_not_kind():
    pairs = plugin_bindings()
    assert fingerprint("rtopic", pairs) == fingerprint("rtopic", reversed(pairs + pairs[:2]))
    assert fingerprint("rtopic", pairs) != fingerprint("topic", pairs)
    assert fingerprint("rtopic", pairs) != fingerprint("rtopic", pairs[1:])


def test_noop_router_matches_nothing_but_still_checks_rows():
    batch = pa.RecordBatch.from_pydict({"routing_key": ["#", None]})
    rows = BatchRouter("rtopic", plugin_bindings(), noop=True).route_batch(batch).to_pylist()
    assert rows[0]["destinations"] == [] and rows[1]["error"] == "routing key is null"


def test_an_archive_binding_is_no_destination_as_with_the_proxy():
    """A listing of NAME.bindings holds the archive stream's binding (key ARCHIVE_KEY, see
    rtroute.routing.rtopic_layout): Spark's router, like the proxy's, never routes to it."""
    from rtroute.routing.rtopic_layout import ARCHIVE_KEY

    router = BatchRouter("rtopic", [("q1", "a.b"), ("archive", ARCHIVE_KEY)])
    routed = router.route_batch(pa.RecordBatch.from_pydict(
        {"routing_key": ["#", "a.b", "*"], "headers": [None, None, None]}))
    assert routed.column("destinations").to_pylist() == [["q1"], ["q1"], []]


@pytest.mark.parametrize("kind, bindings, error", [
    ("rtopic", [("A", "a.b")], None),
    ("nope", [("A", "a.b")], ValueError),
    ("topic", [("A", "w" * 256)], ValueError),
    ("direct", [("A", 3)], TypeError),
    ("fanout", [(None, "a")], TypeError),
    ("rtopic", [("A", "a"), ("B", "é" * 128)], ValueError),
])
def test_the_drivers_check_refuses_what_a_router_refuses(kind, bindings, error):
    """check_bindings (the driver's check, no matcher built) raises what BatchRouter raises."""
    from rtroute.spark.batches import check_bindings

    if error is None:
        check_bindings(kind, bindings)
        BatchRouter(kind, bindings)
        return
    with pytest.raises(error) as by_router:
        BatchRouter(kind, bindings)
    with pytest.raises(error) as by_check:
        check_bindings(kind, bindings)
    assert str(by_check.value) == str(by_router.value)


def test_packed_pairs_unpack_to_the_same_pairs_and_pickle_small():
    import pickle
    import random

    from rtroute.spark.batches import PackedPairs, router_for
    from rtroute.spark.job import route_plan

    rng = random.Random(5)
    words = ["a", "b\n", "c\0d", "é", "z", "w" * 40]
    pairs = sorted({(f"q{rng.randrange(500)}", ".".join(rng.choice(words) for _ in range(4)))
                    for _ in range(5_000)})
    packed = pickle.loads(pickle.dumps(PackedPairs(pairs)))
    assert packed.value == pairs
    assert len(pickle.dumps(PackedPairs(pairs))) < len(pickle.dumps(pairs)) / 2
    assert PackedPairs([]).value == []
    # a plan carrying packed pairs routes as one carrying the pairs themselves
    batch = _batch([{"id": i, "routing_key": key, "headers": None}
                    for i, (_, key) in enumerate(pairs[:50])])
    plain = BatchRouter("rtopic", pairs).route_batch(batch)
    plan = route_plan(pairs, "rtopic", bindings=packed)
    assert router_for(plan).route_batch(batch).equals(plain)
    assert plain.column("destinations").null_count == 0
