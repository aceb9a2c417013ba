"""The delivery planner (``RTopicTable.plan``, src_c/reach.h and its twin in reference.py)
against an obvious oracle: on random binding tables, churn, keys and CC, the keys it picks
reach exactly the destinations the publish reaches, the routing key and CC aside, at most one
key per destination; native and twin agree on what was matched."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtroute.core import reference
from rtroute.core.keys import split_words

from ..hypothesis_profiles import examples
from .conftest import NATIVE

WORDS = ["a", "b", "c", "", "ü"]
word = st.sampled_from(WORDS)
concrete = st.lists(word, min_size=0, max_size=4).map(".".join)
pattern = st.lists(st.sampled_from(WORDS + ["*", "#", "#"]), min_size=0, max_size=5).map(
    ".".join)
destination = st.tuples(st.sampled_from(["queue", "exchange"]), st.sampled_from("qrstuvw"))
operation = st.tuples(st.booleans(), destination, concrete)  # (bind?, destination, key)
SETTINGS = settings(max_examples=examples(300), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def oracle(bound, queries, n_literal):
    """(the destinations reached, those the literal keys reach, the keys matched)."""
    matched = {k for k in {k for _, k in bound}
               for q in queries if reference.glob_match(split_words(q), split_words(k))}
    reached = {d for d, k in bound if k in matched}
    literal = {d for d, k in bound if k in queries[:n_literal]}
    return reached, literal, matched


def check(table, bound, queries, n_literal):
    reached, literal, matched = oracle(bound, queries, n_literal)
    chosen, listed, destinations, skipped = table.plan(queries, n_literal, want_matched=True)
    assert sorted(listed) == sorted(matched)
    assert (destinations, skipped) == (len(reached), len(literal))
    assert table.plan(queries, n_literal)[1:] == (len(matched), destinations, skipped)
    assert chosen == sorted(chosen) and len(set(chosen)) == len(chosen)
    covered = set(literal)
    for key in chosen:
        reach = {d for d, k in bound if k == key}
        assert reach and reach <= reached, f"{key!r} reaches {reach - reached}"
        assert reach - covered, f"{key!r} adds nothing"
        covered |= reach
    assert covered == reached
    assert len(chosen) <= len(reached - literal)
    return chosen


def tables():
    impls = [reference.RTopicTable]
    if NATIVE is not None:
        impls.append(NATIVE.RTopicTable)
    return [cls() for cls in impls]


@SETTINGS
@given(st.lists(operation, max_size=60), st.lists(pattern, min_size=1, max_size=4),
       st.data())
def test_the_plan_reaches_exactly_the_matched_destinations(operations, queries, data):
    n_literal = data.draw(st.integers(0, len(queries)))
    if data.draw(st.booleans()):  # a literal that is a bound key
        keys = [k for _, _, k in operations]
        if keys:
            queries[0] = data.draw(st.sampled_from(keys))
    bound: set = set()
    impls = tables()
    for add, dest, key in operations:
        expected = (dest, key) not in bound if add else (dest, key) in bound
        for table in impls:
            assert (table.bind(dest, key) if add else table.unbind(dest, key)) is expected
        (bound.add if add else bound.discard)((dest, key))
    for table in impls:
        assert table.binding_count() == len(bound)
        assert sorted(table) == sorted({k for _, k in bound})
        check(table, bound, queries, n_literal)


@pytest.mark.parametrize("cls_name", ["reference", "native"])
def test_a_hash_over_many_keys_of_few_queues_publishes_one_key_per_queue(cls_name):
    if cls_name == "native" and NATIVE is None:
        pytest.skip("extension not built")
    table = (NATIVE if cls_name == "native" else reference).RTopicTable()
    n = 20_000 if cls_name == "native" else 600
    bound = set()
    for i in range(n):
        dest = ("queue", f"q{i % 100}")
        key = f"orders.{i}.eu" if i % 7 else f"shared.{i % 3}"  # some keys reach many queues
        table.bind(dest, key)
        bound.add((dest, key))
    chosen = check(table, bound, ["#"], 0)
    assert len(chosen) <= 100
    chosen = check(table, bound, ["orders.*.eu", "shared.1"], 2)
    assert len(chosen) <= 100


def test_a_shared_key_covers_the_queues_that_have_none_of_their_own():
    """q2 and q3 are reached by one key together; q3 has a key of its own too: one key for
    both, one for q1, whichever own key of q1."""
    for table in tables():
        for dest, key in [("q1", "a.b"), ("q1", "a.c"), ("q2", "a.d"), ("q3", "a.d"),
                          ("q3", "b")]:
            table.bind(("queue", dest), key)
        chosen, matched, destinations, skipped = table.plan(["a.*"], 1)
        assert (matched, destinations, skipped) == (3, 3, 0)
        assert chosen in (["a.b", "a.d"], ["a.c", "a.d"])
        assert table.plan(["a.d"], 1)[0] == []  # the routing key reaches both itself
        table.unbind(("queue", "q3"), "a.d")  # now q2 owns a.d, q3 owns b
        assert table.plan(["#"], 0)[0] in (["a.b", "a.d", "b"], ["a.c", "a.d", "b"])
        with pytest.raises(ValueError):
            table.plan(["#"], 2)
        assert not table.unbind(("queue", "q9"), "a.b") and not table.unbind(("queue", "q1"), 3)
