"""Three-valued logic: truth tables of AND, OR and NOT with unknown, and what is unknown.

Mirrors Artemis's UnknownHandlingSelectorTest: a missing property (or one holding NULL) is
unknown; an unknown selector does not match, and neither does its negation.
"""
from __future__ import annotations

import itertools

import pytest

T, F, U = True, False, None
OPERANDS = {T: "trueProp", F: "falseProp", U: "unknownProp"}
HEADERS = {"trueProp": True, "falseProp": False, "nullProp": None}


def kleene_and(a, b):
    if a is F or b is F:
        return F
    if a is U or b is U:
        return U
    return T


def kleene_or(a, b):
    if a is T or b is T:
        return T
    if a is U or b is U:
        return U
    return F


@pytest.mark.parametrize("a,b", list(itertools.product((T, F, U), repeat=2)))
def test_and_truth_table(outcome, a, b):
    assert outcome(f"{OPERANDS[a]} AND {OPERANDS[b]}", HEADERS) is kleene_and(a, b)


@pytest.mark.parametrize("a,b", list(itertools.product((T, F, U), repeat=2)))
def test_or_truth_table(outcome, a, b):
    assert outcome(f"{OPERANDS[a]} OR {OPERANDS[b]}", HEADERS) is kleene_or(a, b)


@pytest.mark.parametrize("a", (T, F, U))
def test_not_truth_table(outcome, a):
    assert outcome(f"NOT {OPERANDS[a]}", HEADERS) is (None if a is U else not a)
    assert outcome(f"not({OPERANDS[a]})", HEADERS) is (None if a is U else not a)


@pytest.mark.parametrize("a,b,c", list(itertools.product((T, F, U), repeat=3)))
def test_chains_of_and_or_follow_kleene(outcome, a, b, c):
    x, y, z = OPERANDS[a], OPERANDS[b], OPERANDS[c]
    assert outcome(f"{x} AND {y} AND {z}", HEADERS) is kleene_and(kleene_and(a, b), c)
    assert outcome(f"{x} OR {y} OR {z}", HEADERS) is kleene_or(kleene_or(a, b), c)
    assert outcome(f"{x} AND {y} OR {z}", HEADERS) is kleene_or(kleene_and(a, b), c)
    assert outcome(f"{x} OR {y} AND {z}", HEADERS) is kleene_or(a, kleene_and(b, c))
    assert outcome(f"NOT ({x} OR {y}) AND NOT {z}", HEADERS) is kleene_and(
        None if kleene_or(a, b) is U else not kleene_or(a, b), None if c is U else not c)


@pytest.mark.parametrize("prop", ["unknownProp", "nullProp"])
@pytest.mark.parametrize("condition", [
    "{} = 0", "{} > 0", "{} >= 0", "{} < 0", "{} <= 0", "{} <> 0",
    "{} LIKE 'zero'", "{} NOT LIKE 'zero'", "{} IN ('zero')", "{} NOT IN ('zero')",
    "{} BETWEEN 1 AND 2", "{} NOT BETWEEN 1 AND 2",
    "-{} = 0", "+{} = 0", "{} * 2 = 0", "{} / 2 = 0", "{} + 2 = 0", "{} - 2 = 0",
    "{} % 2 = 0", "{} = 'x'", "{} = TRUE", "{} = 1.5", "{} > 1.5",
])
def test_comparison_with_null_is_unknown(outcome, prop, condition):
    assert outcome(condition.format(prop), HEADERS) is None


@pytest.mark.parametrize("prop", ["unknownProp", "nullProp"])
def test_is_null_is_never_unknown(outcome, prop):
    assert outcome(f"{prop} IS NULL", HEADERS) is True
    assert outcome(f"{prop} IS NOT NULL", HEADERS) is False
    assert outcome("trueProp IS NULL", HEADERS) is False
    assert outcome("trueProp IS NOT NULL", HEADERS) is True


def test_unknown_does_not_match_and_neither_does_its_negation():
    from rtroute.selector import compile

    assert compile("unknownProp = 1").matches(HEADERS) is False
    assert compile("NOT (unknownProp = 1)").matches(HEADERS) is False
    assert compile("NOT NOT (unknownProp = 1)").matches(HEADERS) is False
    assert compile("unknownProp = 1 OR trueProp").matches(HEADERS) is True
