"""Routing decisions of one managed exchange: alias BCC, dead letters, unroutable."""
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtroute.routing.exchange_router import ExchangeRouter
from rtroute.routing.rtopic_layout import ARCHIVE_KEY
from rtroute.sidecar.demo import PLUGIN_QUEUES

PLUGIN = PLUGIN_QUEUES  # the rtopic plugin README's queues A-F and their keys


@pytest.fixture
def router():
    r = ExchangeRouter("logs")
    for q, k in PLUGIN.items():
        r.bind(("queue", q), k)
    return r


def test_matched_keys_go_in_one_bcc_publish_to_the_bindings_exchange(router):
    (d,) = router.decide_many([("*.app1.mod1.info", {"CC": ["#.warning"], "x": 1})])
    assert d.error is None and not d.unroutable
    (p,) = d.publishes
    assert p.exchange == "logs.bindings" and p.routing_key == "*.app1.mod1.info"
    assert set(p.bcc) == {PLUGIN["A"], PLUGIN["F"], PLUGIN["D"]}
    assert d.headers == {"CC": ["#.warning"], "x": 1}


def test_bcc_alias_routes_like_bcc_and_is_removed(router):
    (d,) = router.decide_many([("nothing", {"x-rtroute-bcc": ["#.error", 5]})])
    assert d.publishes[0].bcc == (PLUGIN["B"],)
    assert d.headers == {}


def test_configurable_alias_name():
    r = ExchangeRouter("logs", bcc_alias="secret-copies")
    r.bind(("queue", "q"), "a.b")
    (d,) = r.decide_many([("z", {"secret-copies": ["a.*"], "x-rtroute-bcc": ["zz"]})])
    assert d.publishes[0].bcc == ("a.b",)
    assert d.headers == {"x-rtroute-bcc": ["zz"]}


@pytest.mark.parametrize(
    "key,headers,reason",
    [
        ("a", {"x-rtroute-bcc": "a.b"}, "must be an array"),
        ("a", {"CC": "a.b"}, "unacceptable_type_in_header"),
        ("a" * 256, None, "255"),
        (b"\xff", None, "UTF-8"),
        (None, None, "must be str"),
        ("a", {"CC": ["x" * 70000]}, "65536"),
    ],
)
def test_malformed_messages_are_dead_lettered_with_a_reason(router, key, headers, reason):
    decisions = router.decide_many([(key, headers), ("#.error", None)])
    assert reason in decisions[0].error and decisions[0].publishes == []
    assert decisions[1].error is None and decisions[1].publishes  # the batch goes on


def test_messages_of_one_key_without_headers_share_a_decision_in_a_batch(router):
    long_key = "a" * 256
    decisions = router.decide_many([
        ("*.app1.mod1.info", None), (long_key, None), ("*.app1.mod1.info", {"x": 1}),
        ("*.app1.mod1.info", None), (long_key, None), ("#.error", None),
        ("*.app1.mod1.info", None)])
    first, bad, with_headers, again, bad_again, other, last = decisions
    assert again is first and last is first and first.error is None and first.publishes
    assert with_headers is not first and with_headers.headers == {"x": 1}
    assert with_headers.publishes == first.publishes
    # a bad key is refused each time it comes, never given another message's decision
    assert "255" in bad.error and "255" in bad_again.error
    assert other is not first and other.publishes[0].bcc == (PLUGIN["B"],)


def test_unroutable_without_and_with_alternate_exchange(router):
    (d,) = router.decide_many([("server9.#", None)])
    assert d.unroutable and d.publishes == []
    r = ExchangeRouter("logs", alternate_exchange="logs.unroutable")
    (d,) = r.decide_many([("server9.#", None)])
    assert d.unroutable and d.publishes[0].exchange == "logs.bindings"
    assert d.publishes[0].bcc == ()


def test_replace_bindings_and_unbind(router):
    router.unbind(("queue", "A"), PLUGIN["A"])
    assert router.decide_many([("server1.app1.mod1.info", None)])[0].unroutable
    router.replace_bindings([(("queue", "Z"), "z.z")])
    assert router.bindings() == [(("queue", "Z"), "z.z")]
    assert router.decide_many([("#", None)])[0].publishes[0].bcc == ("z.z",)


def test_hostile_pattern_against_many_bindings_is_answered():
    r = ExchangeRouter("big")
    for i in range(100_000):
        r.bind(("queue", f"q{i % 100}"), f"s{i % 10}.a{i % 7}.m{i}")
    (d,) = r.decide_many([("#.#.#.#.#", None)])
    delivered = {k for p in d.publishes for k in (p.bcc or ())}
    direct = [p for p in d.publishes if p.bcc is None]
    assert len(delivered) + len(direct) > 0 and d.error is None


def test_literal_wildcard_binding_is_planned_as_rabbitmq_routes_it():
    r = ExchangeRouter("w", frame_max=1500)
    r.bind(("queue", "wild"), "k.*")  # RabbitMQ's topic NAME.bindings: a wildcard
    for i in range(200):
        r.bind(("queue", f"q{i}"), f"k.{i}")
    r.bind(("queue", "other"), "z.z")
    assert r.destinations_of("k.7") == {("queue", "q7"), ("queue", "wild")}
    (d,) = r.decide_many([("#", None)])
    # "k.*" ties every k.N key to "wild": too many for one frame, so that group is delivered
    # queue by queue, and every destination still gets exactly one copy
    got = Counter()
    for p in d.publishes:
        if p.bcc is None:
            got[("queue", p.routing_key)] += 1
        else:
            got.update({dest for k in (p.routing_key, *p.bcc) for dest in r.destinations_of(k)})
    assert set(got.values()) == {1}
    assert set(got) == {("queue", "wild"), ("queue", "other"), *[("queue", f"q{i}")
                                                                for i in range(200)]}


def test_a_direct_bindings_exchange_matches_literal_wildcard_words_literally():
    r = ExchangeRouter("w", bindings_type="direct")
    r.bind(("queue", "wild"), "k.*")
    r.bind(("queue", "q7"), "k.7")
    assert r.destinations_of("k.7") == {("queue", "q7")}  # as the plugin: plain words
    assert r.destinations_of("k.*") == {("queue", "wild")}
    r.bindings_type = "topic"  # what RabbitMQ's topic NAME.bindings would do
    assert r.destinations_of("k.7") == {("queue", "q7"), ("queue", "wild")}


@pytest.mark.parametrize(("version", "expected"), [
    ("3.10.8", "topic"), ("3.13.7", "topic"), ("4.0.5", "direct"), ("4.1.0-rc.1", "direct"),
    ("5.0.0", "direct"), (None, "topic"), ("", "topic"), ("unknown", "topic")])
def test_bindings_exchange_type_per_broker_version(version, expected):
    from rtroute.routing.delivery_plan import bindings_exchange_type

    assert bindings_exchange_type(version) == expected


def test_the_bcc_budget_leaves_room_for_the_whole_headers_table_of_routing_headers():
    """The ingress decodes only CC/BCC/the alias (RoutingHeaders) but tells the table's full
    size: the BCC lists planned must leave room for every other entry."""
    from rtroute.sidecar.ingress import RoutingHeaders

    r = ExchangeRouter("b", frame_max=4096)
    for i in range(300):
        r.bind(("queue", f"q{i}"), f"k.{i}")

    def bcc_bytes(headers):
        (d,) = r.decide_many([("k.*", headers)])
        assert d.error is None
        return max(sum(len(k) + 5 for k in p.bcc or ()) for p in d.publishes)

    small = bcc_bytes(None)
    assert small > 2000
    assert bcc_bytes(RoutingHeaders({}, 2500)) <= 4096 - 1024 - 2500  # other entries only
    assert bcc_bytes(RoutingHeaders({"CC": ["z"]}, 2500)) <= 4096 - 1024 - 2500


def test_bindings_can_be_read_from_another_thread_while_they_change():
    # a status page or a publisher's caller reads them while the ioloop thread binds
    import sys
    import threading

    router = ExchangeRouter("x")
    done = threading.Event()

    def churn():
        for i in range(6_000):
            router.bind(("queue", f"q{i % 7}"), f"k{i}.a")
            if i % 3 == 0:
                router.unbind(("queue", f"q{i % 7}"), f"k{i}.a")
        done.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows
    try:
        thread = threading.Thread(target=churn)
        thread.start()
        reads = 0
        while not done.is_set():
            router.bindings()
            router.binding_count()
            reads += 1
        thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert reads > 0
    assert router.binding_count() == len(router.bindings()) == 6_000 - 2_000


def test_the_bcc_holds_one_key_per_queue_not_every_matched_key():
    """A wildcard matching 10 keys of one queue and 10 of another travels as two BCC entries
    (RabbitMQ routes each entry separately: cost follows destinations, not matched keys); the
    routing key and CC reach their queues without one; ``matched`` still lists every key."""
    r = ExchangeRouter("w", bindings_type="direct")
    for i in range(10):
        r.bind(("queue", "q1"), f"eu.{i}")
        r.bind(("queue", "q2"), f"us.{i}")
    r.bind(("queue", "q3"), "us.0")  # us.0 reaches q2 and q3: one key for both
    (d,) = r.decide_many([("*.*", None)])
    (p,) = d.publishes
    assert p.routing_key == "*.*" and len(p.bcc) == 2
    assert p.bcc[0].startswith("eu.") and p.bcc[1] == "us.0"
    assert len(d.matched) == 20 and d.matched[0] == "eu.0"
    (d,) = r.decide_many([("eu.3", {"CC": ["us.1"], "BCC": ["us.*"]})])
    assert d.publishes[0].bcc == ("us.0",)  # q3: us.1 (CC) reaches q2 only
    (d,) = r.decide_many([("us.0", {"CC": ["eu.1"]})])
    assert d.publishes[0].bcc == ()


def test_a_hash_publish_over_20000_bindings_names_each_of_100_queues_once():
    r = ExchangeRouter("w", bindings_type="direct")
    for i in range(20_000):
        r.bind(("queue", f"q{i % 100}"), f"k.{i}")
    (d,) = r.decide_many([("#", {"h": 1})])
    (p,) = d.publishes
    assert len(p.bcc) == 100 and {r.destinations_of(k).pop() for k in p.bcc} == \
        {("queue", f"q{i}") for i in range(100)}
    assert len(d.matched) == 20_000


_DESTS = st.sampled_from([("queue", "q1"), ("queue", "q2"), ("exchange", "x1")])
_KEYS = st.sampled_from(["a", "a.b", "a.*", "#", "b.#.c", ARCHIVE_KEY])


@settings(deadline=None)
@given(st.lists(st.tuples(_DESTS, _KEYS), max_size=12),
       st.lists(st.tuples(_DESTS, _KEYS), max_size=12),
       st.sampled_from(["topic", "direct"]), st.lists(_KEYS, max_size=4))
def test_take_bindings_makes_the_union_and_routes_as_binding_each_would(
        mine, listed, bindings_type, keys):
    """A router filled in another thread (the proxy's first listing), taken by the loop's
    router that learned some bindings meanwhile: the bindings are the union, and decisions
    are those of one router bound with both, one binding at a time."""
    ours = ExchangeRouter("x", "rtopic", bindings_type=bindings_type)
    reference = ExchangeRouter("x", "rtopic", bindings_type=bindings_type)
    fresh = ExchangeRouter("x", "rtopic")
    for destination, key in mine:
        ours.bind(destination, key)
        reference.bind(destination, key)
    for destination, key in listed:
        fresh.bind(destination, key)
        reference.bind(destination, key)
    ours.take_bindings(fresh)
    assert ours.bindings() == reference.bindings() == sorted(set(mine) | set(listed))
    assert ours.binding_count() == reference.binding_count()
    for destination, _key in mine + listed:  # an archive stream's binding is kept too
        assert ours.archived_to(destination) == reference.archived_to(destination)
    for key in keys:
        assert ours.destinations_of(key) == reference.destinations_of(key)
        # the same destinations reached (which binding key stands for a destination in the
        # BCC may differ: any one that reaches it only is right)
        assert _reached(ours, key) == _reached(reference, key)


def _reached(router: ExchangeRouter, key: str) -> set:
    decision = router.decide(key)
    return {d for p in decision.publishes
            for k in ((p.routing_key,) if p.published_key is None else (p.published_key,)) + tuple(p.bcc)
            for d in router.destinations_of(k)}


def test_a_literal_key_routes_as_published_where_the_bindings_exchange_routes_it_alike():
    """ExchangeRouter.routes_as_published: a key with no '*'/'#' is sent as it is (no BCC)
    on a direct NAME.bindings, or a topic one without wildcard keys; not by matched key."""
    r = ExchangeRouter("logs", bindings_type="topic")
    r.bind(("queue", "q1"), "a.b")
    assert r.routes_as_published("a.b") and r.routes_as_published(b"c.d")
    assert not r.routes_as_published("a.*") and not r.routes_as_published(b"#.b")
    (d,) = r.decide_many([("a.b", None)])
    assert [(p.routing_key, p.bcc) for p in d.publishes] == [("a.b", ())]
    r.bind(("queue", "q2"), "a.*")  # a topic NAME.bindings treats it as a wildcard
    assert not r.routes_as_published("a.b")
    r.bindings_type = "direct"
    assert r.routes_as_published("a.b")
    assert not ExchangeRouter("logs", bindings_type="direct",
                              by_matched_key=True).routes_as_published("a.b")
