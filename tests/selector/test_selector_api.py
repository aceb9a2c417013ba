"""The public contract of rtroute.selector, and its limits on hostile input."""
from __future__ import annotations

import pytest

from rtroute.selector import MAX_DEPTH, MAX_LENGTH, Selector, SelectorError, compile


def test_documented_example():
    sel = compile("office = 'New York' AND price BETWEEN 10 AND 20")
    assert sel.matches({"office": "New York", "price": 12}) is True
    assert sel.matches({"office": "New York", "price": 25}) is False
    assert sel.matches({"office": "New York"}) is False          # unknown does not match
    assert sel.evaluate({"office": "New York"}) is None
    assert sel.evaluate({"office": "London", "price": 12}) is False
    with pytest.raises(SelectorError) as caught:
        compile("price >")
    assert caught.value.position == 7


def test_matches_returns_a_bool():
    sel = compile("a = 1 OR b LIKE 'x%' OR c IN ('y') OR d BETWEEN 1 AND 2 OR e")
    for headers in ({}, {"a": 1}, {"b": "xy"}, {"c": "y"}, {"d": 1.5}, {"e": True}, {"e": 1}):
        assert type(sel.matches(headers)) is bool


def test_selector_exposes_its_text_names_and_source():
    sel = compile("a = 1 AND \"b c\" IS NULL")
    assert isinstance(sel, Selector)
    assert sel.text == "a = 1 AND \"b c\" IS NULL"
    assert sel.identifiers == {"a", "b c"}
    assert "def matches" in sel.source
    assert repr(sel) == "Selector('a = 1 AND \"b c\" IS NULL')"


def test_compiled_selectors_are_cached_by_text():
    assert compile("a = 1") is compile("a = 1")


def test_generated_code_only_sees_its_own_namespace():
    # identifiers and literals are data, never code
    name = "__import__('os')"
    value = "x'); import os; ('"
    sel = compile('"' + name + '" = ' + "'" + value.replace("'", "''") + "' AND \"h\" = 1")
    assert sel.matches({name: value}) is False
    assert sel.evaluate({name: value, "h": 1}) is True


def test_selector_longer_than_the_limit_is_rejected():
    text = "a = '" + "x" * MAX_LENGTH + "'"
    with pytest.raises(SelectorError) as caught:
        compile(text)
    assert "longer than" in str(caught.value)


def test_selector_at_the_length_limit_is_accepted():
    head = "a IN ('"
    text = head + "x" * (MAX_LENGTH - len(head) - 2) + "')"
    assert len(text) == MAX_LENGTH
    assert compile(text).matches({"a": "x" * (MAX_LENGTH - len(head) - 2)}) is True


@pytest.mark.parametrize("make", [
    lambda n: "(" * n + "a = 1" + ")" * n,
    lambda n: "NOT " * n + "a",
    lambda n: "-" * n + "a = 1",
    lambda n: "- " * n + "a = 1",
    lambda n: "a" + " + a" * n + " = 1",
    lambda n: "a = " + "1 + (" * n + "b" + ")" * n,
    lambda n: "(a = 1) = " * n + "TRUE",
    lambda n: "(" * n + "a = 1" + " AND (b < 2 OR c LIKE 'x%'))" * n,
], ids=["parentheses", "not", "minus", "spaced-minus", "chain", "nested-sum", "equalities",
        "conditions"])
def test_nesting_deeper_than_the_limit_is_rejected(make):
    with pytest.raises(SelectorError) as caught:
        compile(make(MAX_DEPTH + 1))
    assert "nested too deeply" in str(caught.value)
    with pytest.raises(SelectorError):
        compile(make(10 * MAX_DEPTH))


@pytest.mark.parametrize("text", [
    "(" * (MAX_DEPTH - 2) + "a = 1" + ")" * (MAX_DEPTH - 2),
    "NOT " * (MAX_DEPTH - 2) + "a",
    "a" + " + a" * (MAX_DEPTH - 2) + " = 1",
    "(" * (MAX_DEPTH - 2) + "a" + ")" * (MAX_DEPTH - 2) + " BETWEEN 1 AND 2",
    "(a = 1) = " * (MAX_DEPTH - 2) + "TRUE",
    "a < " + "(1 + (" * ((MAX_DEPTH - 4) // 2) + "b" + "))" * ((MAX_DEPTH - 4) // 2),
])
def test_nesting_up_to_the_limit_compiles_and_runs(text):
    sel = compile(text)
    sel.matches({"a": 1, "b": 2})
    sel.evaluate({"a": 1, "b": 2})


def test_hostile_input_never_exhausts_the_stack():
    hostile = [
        "(" * 100_000,
        "NOT " * 15_000,
        "-" * 60_000,
        "a" + " OR a" * 10_000,               # a wide chain is fine: it is not nested
        "a = 1" + " + 1" * 15_000,
        "a IN (" + ", ".join(["'x'"] * 12_000) + ")",
        "'" + "''" * 30_000,
        "/*" * 30_000,
    ]
    for text in hostile:
        try:
            sel = compile(text[:MAX_LENGTH])
        except SelectorError:
            continue
        sel.matches({"a": True})


def test_wide_selectors_compile():
    text = " OR ".join(f"a = {i}" for i in range(3000))
    sel = compile(text)
    assert sel.matches({"a": 2999}) is True
    assert sel.matches({"a": 3000}) is False
