"""The delivery planner: every destination once, BCC lists that fit one frame."""
from collections import Counter

from rtroute.sidecar.delivery import Publish, bcc_cost, plan_delivery


def copies(plan, dbk, routing_key, cc=()):
    """What RabbitMQ would deliver: per publish, the union of routing key, CC and BCC routes."""
    got = Counter()
    for p in plan:
        if p.bcc is None:
            got[("exchange", p.exchange) if p.exchange else ("queue", p.routing_key)] += 1
            continue
        reached = set()
        for k in (routing_key, *cc, *p.bcc):
            reached.update(dbk.get(k, ()))
        got.update(reached)
    return got


def q(name):
    return ("queue", name)


def test_small_match_set_is_one_publish_with_bcc():
    dbk = {"a.b": [q("A")], "a.c": [q("A"), q("B")]}
    plan = plan_delivery("x.bindings", "a.*", [], ["a.c", "a.b"], lambda k: dbk.get(k, ()), 1000)
    assert len(plan) == 1 and plan[0].bcc == ("a.b", "a.c") and plan[0].exchange == "x.bindings"
    assert copies(plan, dbk, "a.*") == {q("A"): 1, q("B"): 1}


def test_exact_key_publish_carries_no_bcc():
    dbk = {"a.b": [q("A")], "c.d": [q("C")], "a.*": [q("literal")]}
    plan = plan_delivery("x.bindings", "a.b", [], ["a.b"], lambda k: dbk.get(k, ()), 1000)
    assert plan == [Publish("x.bindings", "a.b", ())]
    assert copies(plan, dbk, "a.b") == {q("A"): 1}


def test_keys_reached_through_cc_need_no_bcc_but_others_do():
    dbk = {"a.b": [q("A")], "c.d": [q("C")]}
    plan = plan_delivery("x.bindings", "a.*", ["c.d"], ["c.d"], lambda k: dbk.get(k, ()), 1000)
    assert plan == [Publish("x.bindings", "a.*", ())]
    assert copies(plan, dbk, "a.*", ["c.d"]) == {q("C"): 1}
    plan = plan_delivery("x.bindings", "a.*", ["c.d"], ["a.b", "c.d"],
                         lambda k: dbk.get(k, ()), 1000)
    assert plan[0].bcc == ("a.b", "c.d")
    assert copies(plan, dbk, "a.*", ["c.d"]) == {q("A"): 1, q("C"): 1}


def test_no_match_plans_nothing():
    assert plan_delivery("x.bindings", "a", [], [], lambda k: (), 1000) == []


def test_large_set_splits_without_duplicates_keeping_shared_destinations_together():
    dbk = {f"k.{i}": [q(f"Q{i % 50}")] for i in range(2000)}
    dbk["k.7"] = [q("Q7"), q("shared")]
    dbk["k.1999"] = [q("Q49"), q("shared")]
    budget = 2000
    plan = plan_delivery("x.bindings", "k.*", [], list(dbk), lambda k: dbk.get(k, ()), budget)
    assert len(plan) > 1
    assert all(p.bcc is not None and bcc_cost(p.bcc) <= budget for p in plan)
    got = copies(plan, dbk, "k.*")
    assert set(got) == {d for ds in dbk.values() for d in ds}
    assert max(got.values()) == 1


def test_bound_routing_key_forces_direct_fallback_instead_of_duplicates():
    dbk = {f"k.{i}": [q(f"Q{i}")] for i in range(500)}
    dbk["k.#"] = [q("literal")]  # a queue bound with the published pattern itself
    plan = plan_delivery("x.bindings", "k.#", [], list(dbk), lambda k: dbk.get(k, ()), 1500)
    got = copies(plan, dbk, "k.#")
    assert set(got) == {d for ds in dbk.values() for d in ds}
    assert max(got.values()) == 1
    assert any(p.bcc is None for p in plan)


def test_group_too_large_for_any_frame_goes_direct():
    dbk = {f"k.{i}": [q("Big"), ("exchange", "X")] for i in range(1000)}
    dbk["other"] = [q("O")]
    plan = plan_delivery("x.bindings", "#", [], list(dbk), lambda k: dbk.get(k, ()), 500)
    got = copies(plan, dbk, "#")
    assert got == {q("Big"): 1, ("exchange", "X"): 1, q("O"): 1}


def test_wildcard_bindings_reached_by_several_keys_keep_one_copy():
    # RabbitMQ's topic exchange treats a bound "k.*" as a wildcard: every BCC entry "k.N"
    # reaches it, so it must travel with all of them in one publish.
    exact = {f"k.{i}": [q(f"Q{i}")] for i in range(300)}
    wild = [q("wild")]

    def destinations_of(key):
        return exact.get(key, []) + (wild if key.startswith("k.") and key.count(".") == 1 else [])

    plan = plan_delivery("x.bindings", "zz", [], list(exact), destinations_of, 1000)
    got = Counter()
    for p in plan:
        reached = set()
        for k in ("zz", *(p.bcc or ())):
            reached.update(destinations_of(k))
        if p.bcc is None:
            reached = {q(p.routing_key)} if not p.exchange else {("exchange", p.exchange)}
        got.update(reached)
    assert max(got.values()) == 1 and set(got) == {*[d for ds in exact.values() for d in ds],
                                                   q("wild")}


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
