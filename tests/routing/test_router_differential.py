"""The router's decisions with the native planner and with its pure-Python twin, on random
binding tables, keys and headers: each republish, routed as RabbitMQ routes it on a direct
``NAME.bindings`` (the routing key, CC and BCC looked up literally), reaches exactly the
destinations the x-rtopic rules name, each once; both decide alike on errors and unroutables."""
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rtroute.core import reference
from rtroute.core.keys import split_words
from rtroute.routing.exchange_router import ExchangeRouter

from ..core.conftest import NATIVE
from ..hypothesis_profiles import examples

pytestmark = pytest.mark.skipif(NATIVE is None, reason="extension not built")

WORDS = ["a", "b", "c", ""]
concrete = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(".".join)
pattern = st.lists(st.sampled_from(WORDS + ["*", "#"]), min_size=1, max_size=4).map(".".join)
destination = st.tuples(st.just("queue"), st.sampled_from("pqrstu"))
headers = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={
        "CC": st.lists(pattern, max_size=3),
        "BCC": st.lists(pattern, max_size=3),
        "x-rtroute-bcc": st.lists(pattern, max_size=2),
        "n": st.integers(),  # a header that changes per message
    }),
)
SETTINGS = settings(max_examples=examples(200), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def routers(bindings):
    native = ExchangeRouter("x", bindings_type="direct")
    twin = ExchangeRouter("x", bindings_type="direct")
    twin._table = reference.RTopicTable()  # the pure-Python planner, same router around it
    for router in (native, twin):
        for dest, key in bindings:
            router.bind(dest, key)
    return native, twin


def expected(bindings, routing_key, hdrs):
    queries = [routing_key]
    for name in ("CC", "BCC", "x-rtroute-bcc"):
        queries += (hdrs or {}).get(name, [])
    return {d for d, k in bindings
            if any(reference.glob_match(split_words(q), split_words(k)) for q in queries)}


def delivered(bindings, decision, hdrs):
    """Where RabbitMQ delivers the republishes: each destination once per publish."""
    copies: list = []
    for publish in decision.publishes:
        assert publish.exchange == "x.bindings" and publish.bcc is not None
        keys = {publish.routing_key, *(decision.headers or {}).get("CC", []), *publish.bcc}
        copies += list({d for d, k in bindings if k in keys})
    return copies


@SETTINGS
@given(st.lists(st.tuples(destination, concrete), max_size=25), pattern, headers)
def test_native_and_twin_deliver_exactly_the_matched_destinations(bindings, routing_key, hdrs):
    native, twin = routers(bindings)
    bindings = set(bindings)
    want = expected(bindings, routing_key, hdrs)
    for router in (native, twin):
        (decision,) = router.decide_many([(routing_key, hdrs)])
        assert decision.error is None
        assert decision.unroutable == (not want)
        if want:
            copies = delivered(bindings, decision, hdrs)
            assert sorted(copies) == sorted(want)  # every one, once
            assert len(decision.publishes) == 1
            assert len(decision.publishes[0].bcc) <= len(want)
        assert "BCC" not in decision.headers and "x-rtroute-bcc" not in decision.headers
    assert native.decide_many([(routing_key, hdrs)])[0].matched == \
        twin.decide_many([(routing_key, hdrs)])[0].matched


# a batch of keys without headers: literal ones (some repeated, one non-ASCII, one too long
# for a routing key) and patterns; binding keys with '*'/'#' words too (a topic NAME.bindings
# treats them as wildcards: no short cut there)
_batch_keys = st.lists(st.one_of(concrete, pattern, st.sampled_from(["é.a", "a" * 300])),
                       min_size=2, max_size=8)


def _outcome(decision):
    return (decision.publishes, decision.headers, decision.error, decision.unroutable,
            decision.matched if decision.error is None else None)


@SETTINGS
@given(st.lists(st.tuples(destination, pattern), max_size=25), _batch_keys,
       st.sampled_from(["topic", "direct"]), st.sampled_from([None, "ae"]))
def test_a_batch_of_literal_keys_is_decided_as_its_plans_decide(bindings, keys, bindings_type,
                                                                 alternate):
    """The literal keys' short cut of decide_many (no planning) decides what the planned path
    decides: the same publishes, matched keys, unroutables and errors."""
    def router():
        made = ExchangeRouter("x", bindings_type=bindings_type, alternate_exchange=alternate)
        for dest, key in bindings:
            made.bind(dest, key)
        return made

    short = [_outcome(d) for d in router().decide_many([(k, None) for k in keys])]
    planned_router = router()
    planned_router.routes_as_published = lambda *_args: False
    planned = [_outcome(d) for d in planned_router.decide_many([(k, None) for k in keys])]
    assert short == planned


def test_a_batch_of_literal_keys_is_not_planned():
    """10,000 literal keys in turn: each decided without the planner, repeats sharing one
    decision (the publisher's frame cache checks it by identity)."""
    router = ExchangeRouter("x", bindings_type="direct", alternate_exchange="ae")
    router.bind(("queue", "p"), "a.b")

    def refuse(*_args):
        raise AssertionError("planned")

    router._plan = refuse
    first, again, other = router.decide_many([("a.b", None), ("a.b", None), ("c.d", None)])
    assert first is again and first.matched == ("a.b",) and not first.unroutable
    assert [(p.exchange, p.routing_key, p.bcc) for p in first.publishes] == \
        [("x.bindings", "a.b", ())]
    assert other.unroutable and other.matched == () and \
        [(p.routing_key, p.bcc) for p in other.publishes] == [("c.d", ())]


def test_literal_decisions_are_kept_across_batches():
    """A literal key's decision is made once, not per batch (10,000 keys in turn recur
    batch after batch), and made again once its key is bound or unbound."""
    router = ExchangeRouter("x", bindings_type="direct")
    router.bind(("queue", "p"), "a.b")
    (first,) = router.decide_many([("a.b", None), ("a.b", None)])[:1]
    assert router.decide_many([("a.b", None), ("c.d", None)])[0] is first
    router.unbind(("queue", "p"), "a.b")
    gone = router.decide_many([("a.b", None), ("c.d", None)])[0]
    assert gone.unroutable and gone.publishes == []
    router.bind(("queue", "q"), "a.b")
    back = router.decide_many([("a.b", None), ("c.d", None)])[0]
    assert not back.unroutable and back is not first


# literal keys only (on bindings without '*'/'#' words every path is the short cut's, whose
# decisions do not depend on the order of binding), few of them and two queues, so that a key
# is often decided, then bound or unbound, then decided again
_few = st.sampled_from(["a", "a.b", "b"])
_two = st.tuples(st.just("queue"), st.sampled_from("pq"))
_ops = st.lists(st.one_of(
    st.tuples(st.just("bind"), _two, _few),
    st.tuples(st.just("unbind"), _two, _few),
    st.tuples(st.just("alternate"), st.sampled_from([None, "ae", "other"])),
    st.tuples(st.just("take"), st.lists(st.tuples(_two, _few), max_size=4)),
    st.tuples(st.just("decide"), st.lists(st.one_of(_few, st.just("é.a")), min_size=2,
                                          max_size=4))), max_size=16)


@SETTINGS
@given(st.lists(st.tuples(_two, _few), max_size=4), _ops,
       st.sampled_from(["topic", "direct"]))
@example([(("queue", "p"), "a")], [("decide", ["a", "b"]), ("unbind", ("queue", "p"), "a"),
                                  ("decide", ["a", "b"]), ("bind", ("queue", "q"), "b"),
                                  ("decide", ["a", "b"]), ("alternate", "ae"),
                                  ("decide", ["a", "b"]), ("take", [(("queue", "p"), "a")]),
                                  ("decide", ["a", "b"])], "direct")
def test_a_router_that_lives_decides_as_a_new_one(bindings, ops, bindings_type):
    """Literal decisions kept across batches never outlive what made them: after any binding
    change, re-listing or change of alternate exchange, a batch is decided as by a router
    made afresh with the same bindings (no decision kept)."""
    living = ExchangeRouter("x", bindings_type=bindings_type)
    for dest, key in bindings:
        living.bind(dest, key)
    for op in ops:
        if op[0] == "bind":
            living.bind(op[1], op[2])
        elif op[0] == "unbind":
            living.unbind(op[1], op[2])
        elif op[0] == "alternate":
            living.alternate_exchange = op[1]
        elif op[0] == "take":
            fresh = ExchangeRouter("x", bindings_type=bindings_type)
            for dest, key in op[1]:
                fresh.bind(dest, key)
            living.take_bindings(fresh)
        else:
            new = ExchangeRouter("x", bindings_type=bindings_type,
                                 alternate_exchange=living.alternate_exchange)
            for dest, key in living.bindings():
                new.bind(dest, key)
            batch = [(k, None) for k in op[1]]
            assert [_outcome(d) for d in living.decide_many(batch)] == \
                [_outcome(d) for d in new.decide_many(batch)]


_plain_headers = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={"n": st.integers(), "s": st.text(max_size=40),
                                        "big": st.just("x" * 900)}),
    headers)


@SETTINGS
@given(st.lists(st.tuples(destination, pattern), max_size=25),
       st.lists(st.tuples(st.one_of(concrete, pattern), _plain_headers), min_size=2,
                max_size=8),
       st.sampled_from(["topic", "direct"]), st.sampled_from([None, "ae"]),
       st.sampled_from([131072, 1200, 1100]))
def test_a_batch_with_headers_is_decided_as_each_message_alone(bindings, messages,
                                                                bindings_type, alternate,
                                                                frame_max):
    """decide_many plans a message whose headers hold no CC, BCC or alias as its key alone
    (shared with the batch) and gives it its headers: the same decision as deciding it
    alone, a BCC that the headers crowd out of the frame (small frame_max) included."""
    router = ExchangeRouter("x", bindings_type=bindings_type, alternate_exchange=alternate,
                            frame_max=frame_max)
    for dest, key in bindings:
        router.bind(dest, key)
    batch = [_outcome(d) for d in router.decide_many(messages)]
    alone = [_outcome(router.decide(key, hdrs)) for key, hdrs in messages]
    assert batch == alone


def test_literal_keys_with_headers_are_not_planned():
    """A literal key whose headers hold no CC, BCC or alias (a sequence number per message)
    takes the literal keys' short cut too, with its own headers."""
    router = ExchangeRouter("x", bindings_type="direct")
    router.bind(("queue", "p"), "a.b")

    def refuse(*_args):
        raise AssertionError("planned")

    router._plan = refuse
    first, second = router.decide_many([("a.b", {"n": 1}), ("a.b", {"n": 2})])
    assert (first.headers, second.headers) == ({"n": 1}, {"n": 2})
    assert first.publishes == second.publishes and first.matched == ("a.b",)
    assert [(p.routing_key, p.bcc) for p in first.publishes] == [("a.b", ())]
