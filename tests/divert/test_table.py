"""The divert table as pure logic: which diverts fire, in Artemis's order, and the cycle check."""
from __future__ import annotations

import pytest

from rtroute.config.rtroute_toml import DivertConfig
from rtroute.divert import DivertError, DivertExists, DivertTable, find_cycle
from rtroute.selector import MessageFacts


def divert(name, address="prices", forwarding="fwd", **kw):
    kw.setdefault("routing_name", name)
    return DivertConfig(name=name, address=address, forwarding_address=forwarding, **kw)


def table(*diverts, exchanges=("prices", "orders.eu", "orders.us", "fwd", "other")):
    t = DivertTable(list(exchanges))
    for d in diverts:
        t.add(d)
    return t


def fired(t, exchange, headers):
    verdict = t.evaluate(exchange, headers)
    return [d.name for d in verdict.fired], verdict.original


NY = {"office": "New York"}
LONDON = {"office": "London"}


def test_artemis_exclusive_filter_example_takes_new_york_only():
    t = table(divert("prices-divert", forwarding="priceForwarding",
                     filter="office = 'New York'", exclusive=True))
    assert fired(t, "prices", NY) == (["prices-divert"], False)
    assert fired(t, "prices", LONDON) == ([], True)
    assert fired(t, "prices", {}) == ([], True)  # unknown (NULL) does not match


def test_exclusive_without_filter_takes_every_message():
    t = table(divert("all", exclusive=True))
    assert fired(t, "prices", LONDON) == (["all"], False)
    assert fired(t, "prices", None) == (["all"], False)


def test_every_matching_exclusive_fires_in_declaration_order_and_nothing_else():
    t = table(divert("spy", forwarding="spy"),
              divert("ex2", filter="office = 'New York'", exclusive=True),
              divert("ex1", exclusive=True),
              divert("spy2", forwarding="spy2"))
    assert fired(t, "prices", NY) == (["ex2", "ex1"], False)
    assert fired(t, "prices", LONDON) == (["ex1"], False)


def test_without_a_matching_exclusive_non_exclusives_fire_and_the_original_goes_on():
    t = table(divert("ex", filter="office = 'New York'", exclusive=True),
              divert("spy", forwarding="spy"),
              divert("ldn", forwarding="ldn", filter="office = 'London'"))
    assert fired(t, "prices", LONDON) == (["spy", "ldn"], True)
    assert fired(t, "prices", {"office": "Paris"}) == (["spy"], True)


def test_diverts_sharing_a_routing_name_take_turns():
    t = table(divert("a", routing_name="shared"), divert("b", routing_name="shared"),
              divert("c", routing_name="shared"), divert("solo"))
    got = [fired(t, "prices", {})[0] for _ in range(6)]
    assert got == [["a", "solo"], ["b", "solo"], ["c", "solo"]] * 2


def test_a_turn_skips_diverts_whose_filter_does_not_match():
    t = table(divert("a", routing_name="rr", filter="x = 1"),
              divert("b", routing_name="rr", filter="x = 2"),
              divert("c", routing_name="rr"))
    # position 0: a does not match x=2, b does -> b fires and the turn moves to c
    assert fired(t, "prices", {"x": 2})[0] == ["b"]
    assert fired(t, "prices", {"x": 2})[0] == ["c"]
    assert fired(t, "prices", {"x": 2})[0] == ["b"]  # wraps past a (no match) to b
    assert fired(t, "prices", {"x": 3})[0] == ["c"]
    # nobody matches: nothing fires and the turn stays where it was
    t2 = table(divert("a", routing_name="rr", filter="x = 1"),
               divert("b", routing_name="rr", filter="x = 1"))
    assert fired(t2, "prices", {"x": 9})[0] == []
    assert fired(t2, "prices", {"x": 1})[0] == ["a"]


def test_default_routing_names_are_unique_so_every_matching_divert_fires():
    t = table(divert("a"), divert("b"), divert("c", filter="x = 1"))
    assert fired(t, "prices", {"x": 1})[0] == ["a", "b", "c"]
    assert fired(t, "prices", {"x": 1})[0] == ["a", "b", "c"]


def test_wildcard_address_watches_every_matching_exchange_with_its_own_turns():
    t = table(divert("a", address="orders.#", routing_name="rr", forwarding="audit"),
              divert("b", address="orders.*", routing_name="rr", forwarding="audit"))
    assert t.watches("orders.eu") and t.watches("orders.us") and not t.watches("prices")
    assert fired(t, "orders.eu", {})[0] == ["a"]
    assert fired(t, "orders.us", {})[0] == ["a"]  # its own position
    assert fired(t, "orders.eu", {})[0] == ["b"]
    assert fired(t, "prices", {}) == ([], True)
    assert t.exchanges_of(t.get("a")) == ["orders.eu", "orders.us"]


def test_matched_counts_only_diverts_that_fire():
    t = table(divert("a", routing_name="rr"), divert("b", routing_name="rr"),
              divert("ny", filter="office = 'New York'"))
    for headers in (NY, LONDON, NY):
        t.evaluate("prices", headers)
    assert {d.name: d.matched for d in t} == {"a": 2, "b": 1, "ny": 2}


def test_filters_on_standard_fields_get_the_message_facts():
    t = table(divert("big", filter="AMQSize > 3 AND JMSPriority = 7"))
    assert t.needs_message("prices")
    facts = MessageFacts({"priority": 7}, body_size=10, exchange="prices")
    assert [d.name for d in t.evaluate("prices", {}, facts).fired] == ["big"]
    assert t.evaluate("prices", {}, MessageFacts({"priority": 7}, 2, "prices")).fired == []


def test_add_and_remove_at_run_time():
    t = table(divert("a"))
    t.add(divert("b", exclusive=True))
    assert fired(t, "prices", {}) == (["b"], False)
    assert t.remove("b").name == "b"
    assert fired(t, "prices", {}) == (["a"], True)
    t.remove("a")
    assert not t.watches("prices") and len(t) == 0
    with pytest.raises(KeyError):
        t.remove("a")


def test_two_diverts_on_one_address_keep_it_watched_until_both_go():
    t = table(divert("a", address="orders.#"), divert("b", address="orders.#"))
    t.remove("a")
    assert fired(t, "orders.eu", {})[0] == ["b"]


@pytest.mark.parametrize("config,message", [
    (divert("a"), "divert 'a' exists already"),
    (divert("z", address="nowhere"), "address 'nowhere' matches no managed exchange"),
    (divert("z", filter="price >"), "divert 'z': filter:"),
    (divert("z", routing_type="ANYCAST", routing_key="k"), "routing_key cannot apply"),
    (divert("z", transformer="no_such_module_xyz:f"), "cannot import 'no_such_module_xyz'"),
    (divert("z", transformer="tests.divert.transformers:nope"), "has no function 'nope'"),
    (divert("z", routing_type="BROADCAST"), "routing_type must be one of"),
])
def test_a_divert_that_cannot_run_is_refused(config, message):
    t = table(divert("a"))
    with pytest.raises(DivertError, match=None) as info:
        t.add(config)
    assert message in str(info.value)
    assert len(t) == 1


def test_a_name_taken_is_a_conflict():
    with pytest.raises(DivertExists):
        table(divert("a"), divert("a", forwarding="other"))


def test_creating_a_divert_that_closes_a_cycle_is_refused():
    t = table(divert("p-to-fwd", address="prices", forwarding="fwd"))
    with pytest.raises(DivertError) as info:
        t.add(divert("fwd-to-p", address="fwd", forwarding="other, prices"))
    assert "closes a cycle prices -> fwd -> prices (diverts 'p-to-fwd', 'fwd-to-p')" \
        in str(info.value)
    # ANYCAST goes to a queue: no way back through a managed exchange, so no cycle
    t.add(divert("fwd-to-queue", address="fwd", forwarding="prices", routing_type="ANYCAST"))


def test_find_cycle_reports_the_loop_and_the_closing_divert():
    diverts = [divert("ab", "A", "B"), divert("bc", "B", "C"), divert("ca", "C", "A")]
    cycle = find_cycle(["A", "B", "C"], diverts)
    assert cycle.exchanges == ("A", "B", "C", "A")
    assert cycle.closing == 2 and cycle.target == "A"
    assert find_cycle(["A", "B", "C"], diverts[:2]) is None


def test_update_changes_filter_and_forwarding_in_place_keeping_position_and_counters():
    t = table(divert("a", filter="office = 'London'", exclusive=True),
              divert("b", exclusive=True), divert("c"))
    assert fired(t, "prices", NY) == (["b"], False)
    a = t.get("a")
    assert fired(t, "prices", LONDON) == (["a", "b"], False) and a.matched == 1
    updated = t.update(divert("a", forwarding="fwd, other", filter="office = 'New York'",
                              exclusive=True, routing_type="ANYCAST"))
    assert updated is a and a.matched == 1  # the same divert, its counters go on
    assert a.forwarding_addresses == ("fwd", "other") and a.routing_type == "ANYCAST"
    assert fired(t, "prices", NY) == (["a", "b"], False)  # still first among the exclusives
    assert fired(t, "prices", LONDON) == (["b"], False)
    t.update(divert("a", exclusive=True))  # no filter: every message
    assert fired(t, "prices", LONDON) == (["a", "b"], False)
    assert t.get("a").selector.needs_message is False


def test_update_of_a_filter_on_standard_fields_asks_for_the_message_facts():
    t = table(divert("a", filter="office = 'x'"))
    assert not t.needs_message("prices")
    t.update(divert("a", filter="JMSPriority > 4"))
    assert t.needs_message("prices")


@pytest.mark.parametrize("change,message", [
    ({"exclusive": True}, "exclusive cannot be changed"),
    ({"address": "orders.eu"}, "address cannot be changed"),
    ({"routing_name": "g"}, "routing_name cannot be changed"),
    ({"filter": "a >"}, "filter"),
    ({"routing_type": "SIDEWAYS"}, "routing_type must be one of"),
    ({"forwarding": "prices"}, "cycle"),
])
def test_an_update_that_cannot_apply_leaves_the_divert_unchanged(change, message):
    t = table(divert("a", filter="office = 'London'"),
              divert("back", address="other", forwarding="prices"))
    before = t.get("a").config
    kw = {"filter": "office = 'London'", **change}
    if "forwarding" in kw:
        kw["forwarding"] = "other"  # prices -> other -> prices
    with pytest.raises(DivertError, match=message):
        t.update(divert("a", **kw))
    assert t.get("a").config is before
    assert fired(t, "prices", LONDON) == (["a"], True)


def test_update_of_an_unknown_divert_is_a_key_error():
    with pytest.raises(KeyError):
        table().update(divert("nope"))
