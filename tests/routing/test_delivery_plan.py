"""The delivery planner: every destination once, BCC lists that fit one frame."""
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtroute.routing.delivery_plan import Publish, bcc_cost, plan_delivery

from ..hypothesis_profiles import examples

BINDINGS = "x.bindings"
# what one header frame leaves for BCC with the default frame_max (see the router)
FRAME_BUDGET = 131072 - 1024


def copies(plan, dbk, cc=(), queues=()):
    """What RabbitMQ delivers, as a reference simulator: a publish to the bindings exchange
    reaches the destinations of its routing key, of each CC entry and of each BCC entry, once
    per publish; one to the default exchange reaches the queue its routing key names, and (the
    callers keep CC on every publish) each queue of ``queues`` a CC entry names; one to
    another exchange reaches that exchange. ``dbk``: a mapping or a function from key to
    destinations."""
    destinations_of = dbk if callable(dbk) else (lambda k: dbk.get(k, ()))
    got = Counter()
    for p in plan:
        if p.exchange == BINDINGS:
            reached = set()
            for k in (p.routing_key, *cc, *(p.bcc or ())):
                reached.update(destinations_of(k))
        elif p.exchange == "":
            reached = {q(p.routing_key), *(q(c) for c in cc if c in queues)}
        else:
            reached = {("exchange", p.exchange)}
        got.update(reached)
    return got


def q(name):
    return ("queue", name)


def test_small_match_set_is_one_publish_with_bcc():
    dbk = {"a.b": [q("A")], "a.c": [q("A"), q("B")]}
    plan = plan_delivery("x.bindings", "a.*", [], ["a.c", "a.b"], lambda k: dbk.get(k, ()), 1000)
    assert len(plan) == 1 and plan[0].bcc == ("a.b", "a.c") and plan[0].exchange == "x.bindings"
    assert copies(plan, dbk) == {q("A"): 1, q("B"): 1}


def test_exact_key_publish_carries_no_bcc():
    dbk = {"a.b": [q("A")], "c.d": [q("C")], "a.*": [q("literal")]}
    plan = plan_delivery("x.bindings", "a.b", [], ["a.b"], lambda k: dbk.get(k, ()), 1000)
    assert plan == [Publish("x.bindings", "a.b", ())]
    assert copies(plan, dbk) == {q("A"): 1}


def test_keys_reached_through_cc_need_no_bcc_but_others_do():
    dbk = {"a.b": [q("A")], "c.d": [q("C")]}
    plan = plan_delivery("x.bindings", "a.*", ["c.d"], ["c.d"], lambda k: dbk.get(k, ()), 1000)
    assert plan == [Publish("x.bindings", "a.*", ())]
    assert copies(plan, dbk, ["c.d"]) == {q("C"): 1}
    plan = plan_delivery("x.bindings", "a.*", ["c.d"], ["a.b", "c.d"],
                         lambda k: dbk.get(k, ()), 1000)
    assert plan[0].bcc == ("a.b", "c.d")
    assert copies(plan, dbk, ["c.d"]) == {q("A"): 1, q("C"): 1}


def test_no_match_plans_nothing():
    assert plan_delivery("x.bindings", "a", [], [], lambda k: (), 1000) == []


def test_large_set_splits_without_duplicates_keeping_shared_destinations_together():
    # keys i and i + 1500 share a queue (the cover keeps one of them): 1,500 keys still
    # need several frames
    dbk = {f"k.{i}": [q(f"Q{i % 1500}")] for i in range(2000)}
    dbk["k.7"] = [q("Q7"), q("shared")]
    dbk["k.1999"] = [q("Q499"), q("shared")]
    budget = 2000
    plan = plan_delivery(BINDINGS, "k.*", [], list(dbk), lambda k: dbk.get(k, ()), budget)
    assert len(plan) > 1
    assert all(p.bcc is not None and bcc_cost(p.bcc) <= budget for p in plan)
    assert sum(len(p.bcc) for p in plan) == 1500  # one key per queue ("k.1999" for "shared")
    got = copies(plan, dbk)
    assert set(got) == {d for ds in dbk.values() for d in ds}
    assert max(got.values()) == 1


def test_bound_routing_key_sends_what_one_publish_cannot_carry_by_bound_keys():
    dbk = {f"k.{i}": [q(f"Q{i}")] for i in range(500)}
    dbk["k.#"] = [q("literal")]  # a queue bound with the published pattern itself
    plan = plan_delivery(BINDINGS, "k.#", [], list(dbk), lambda k: dbk.get(k, ()), 1500)
    got = copies(plan, dbk)
    assert set(got) == {d for ds in dbk.values() for d in ds}
    assert max(got.values()) == 1
    # one publish of the key as published (a second would reach "literal" again), the rest
    # each with a bound key of its own queue: never the default exchange
    first, *rest = plan
    assert first.exchange == BINDINGS and first.routing_key == "k.#" and first.bcc
    assert rest and all(p == Publish(BINDINGS, p.routing_key, (), "k.#") for p in rest)
    assert {p.routing_key for p in rest} | set(first.bcc) | {"k.#"} == set(dbk)


def test_bound_cc_entry_keeps_the_default_exchange_fallback():
    # every publish to the bindings exchange routes the CC entry again: the rest goes direct
    dbk = {f"k.{i}": [q(f"Q{i}")] for i in range(500)}
    dbk["c"] = [q("C")]
    plan = plan_delivery(BINDINGS, "k.*", ["c"], [*dbk], lambda k: dbk.get(k, ()), 1500)
    got = copies(plan, dbk, ["c"])
    assert set(got) == {d for ds in dbk.values() for d in ds}
    assert max(got.values()) == 1
    first, *rest = plan
    assert first.exchange == BINDINGS and first.routing_key == "k.*" and "c" not in first.bcc
    assert rest and all(p.exchange == "" and p.bcc is None for p in rest)


def test_destinations_the_cc_reaches_need_no_bcc_key():
    keys = [f"server{i}.app1.mod1.info" for i in range(7000)]
    dbk = {k: [q("all")] for k in keys}
    dbk["audit"] = [q("all"), q("audit")]
    plan = plan_delivery(BINDINGS, "#", ["audit"], [*keys, "audit"], lambda k: dbk.get(k, ()),
                         FRAME_BUDGET)
    assert plan == [Publish(BINDINGS, "#", ())]
    assert copies(plan, dbk, ["audit"]) == {q("all"): 1, q("audit"): 1}


def test_group_too_large_for_any_frame_is_reduced_to_a_cover():
    dbk = {f"k.{i}": [q("Big"), ("exchange", "X")] for i in range(1000)}
    dbk["other"] = [q("O")]
    plan = plan_delivery(BINDINGS, "#", [], list(dbk), lambda k: dbk.get(k, ()), 500)
    assert plan == [Publish(BINDINGS, "#", ("k.0", "other"))]
    got = copies(plan, dbk)
    assert got == {q("Big"): 1, ("exchange", "X"): 1, q("O"): 1}


def test_exchange_left_over_is_published_to_directly_with_the_key_as_published():
    # every key reaches X too: one group, too large for the frame; an exchange would route a
    # bound key instead of the key as published, so no key reaching X is a routing key
    dbk = {f"k.{i}": [q(f"Q{i}"), ("exchange", "X")] for i in range(300)}
    plan = plan_delivery(BINDINGS, "k.*", [], list(dbk), lambda k: dbk.get(k, ()), 1000)
    assert Publish("X", "k.*", None) in plan
    assert all(p.bcc is None and p.published_key is None for p in plan)
    got = copies(plan, dbk)
    assert set(got) == {d for ds in dbk.values() for d in ds} and max(got.values()) == 1


def test_wildcard_bindings_reached_by_several_keys_keep_one_copy():
    # RabbitMQ's topic exchange treats a bound "k.*" as a wildcard: every BCC entry "k.N"
    # reaches it, so it must travel with all of them in one publish.
    exact = {f"k.{i}": [q(f"Q{i}")] for i in range(300)}
    wild = [q("wild")]

    def destinations_of(key):
        return exact.get(key, []) + (wild if key.startswith("k.") and key.count(".") == 1 else [])

    plan = plan_delivery(BINDINGS, "zz", [], list(exact), destinations_of, 1000)
    got = copies(plan, destinations_of)
    assert max(got.values()) == 1 and set(got) == {*[d for ds in exact.values() for d in ds],
                                                   q("wild")}


def test_thousands_of_keys_bound_to_one_queue_are_one_publish_with_one_bcc_key():
    keys = [f"server{i}.app1.mod1.info" for i in range(7000)]
    assert bcc_cost(keys) > FRAME_BUDGET
    dbk = {k: [q("all")] for k in keys}
    for routing_key in ("#", "*.app1.mod1.info"):
        plan = plan_delivery(BINDINGS, routing_key, [], keys, lambda k: dbk.get(k, ()),
                             FRAME_BUDGET)
        assert plan == [Publish(BINDINGS, routing_key, (min(keys),))]
        assert copies(plan, dbk) == {q("all"): 1}


def test_queues_each_bound_by_thousands_of_keys_get_one_bcc_key_each():
    dbk = {f"server{i}.app{a}.mod1.info": [q(f"app{a}")] for a in range(5) for i in range(3000)}
    dbk["shared.app0.app1"] = [q("app0"), q("app1")]  # covers two queues at once
    plan = plan_delivery(BINDINGS, "#", [], list(dbk), lambda k: dbk.get(k, ()), FRAME_BUDGET)
    assert plan == [Publish(BINDINGS, "#", ("server0.app2.mod1.info", "server0.app3.mod1.info",
                                            "server0.app4.mod1.info", "shared.app0.app1"))]
    assert copies(plan, dbk) == {q(f"app{a}"): 1 for a in range(5)}


QUEUES = [q(f"Q{i}") for i in range(6)]
EXCHANGES = [("exchange", f"X{i}") for i in range(2)]
KEYS = [f"{word}.{n}" for word in ("a", "bb", "ccc") for n in range(8)]


@st.composite
def deliveries(draw):
    dbk = draw(st.dictionaries(st.sampled_from(KEYS),
                               st.frozensets(st.sampled_from(QUEUES + EXCHANGES), max_size=3),
                               max_size=20))
    matched = draw(st.lists(st.sampled_from(KEYS), max_size=20))
    routing_key = draw(st.sampled_from([*KEYS, "#"]))
    cc = draw(st.lists(st.sampled_from(KEYS), max_size=2))
    budget = draw(st.integers(0, 120))  # up to a dozen keys a frame
    return dbk, matched, routing_key, cc, budget, draw(st.booleans())


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deliveries())
def test_every_destination_of_the_matched_keys_gets_exactly_one_copy(delivery):
    dbk, matched, routing_key, cc, budget, by_matched_key = delivery
    plan = plan_delivery(BINDINGS, routing_key, cc, matched, lambda k: dbk.get(k, ()), budget,
                         by_matched_key)
    got = copies(plan, dbk, cc, queues={name for _, name in QUEUES})
    wanted = {d for k in matched for d in dbk.get(k, ())}
    routed_anyway = {d for k in (routing_key, *cc) for d in dbk.get(k, ())}
    assert set(got) >= wanted
    assert set(got) <= wanted | routed_anyway
    assert all(n == 1 for n in got.values()), (plan, got)
    for p in plan:
        assert not p.bcc or bcc_cost(p.bcc) <= budget
        if p.exchange == BINDINGS and p.routing_key != routing_key:
            assert p.published_key == routing_key and p.bcc == ()


def test_by_matched_key_publishes_one_matched_key_as_the_routing_key():
    dbk = {"a.b": [q("A")], "a.c": [q("A"), q("B")], "c.d": [q("C")]}
    plan = plan_delivery("x.bindings", "a.*", [], ["a.b"], lambda k: dbk.get(k, ()), 1000,
                         by_matched_key=True)
    assert plan == [Publish("x.bindings", "a.b", (), published_key="a.*")]
    # several keys, a CC (routed and seen by the consumer) or an exact key: as without it
    plan = plan_delivery("x.bindings", "a.*", [], ["a.c", "a.b"], lambda k: dbk.get(k, ()),
                         1000, by_matched_key=True)
    assert plan == [Publish("x.bindings", "a.*", ("a.b", "a.c"))]
    plan = plan_delivery("x.bindings", "a.*", ["c.d"], ["a.b"], lambda k: dbk.get(k, ()),
                         1000, by_matched_key=True)
    assert plan == [Publish("x.bindings", "a.*", ("a.b",))]
    plan = plan_delivery("x.bindings", "a.b", [], ["a.b"], lambda k: dbk.get(k, ()), 1000,
                         by_matched_key=True)
    assert plan == [Publish("x.bindings", "a.b", ())]
    assert plan_delivery("x.bindings", "z.*", [], [], lambda k: (), 1000,
                         by_matched_key=True) == []
