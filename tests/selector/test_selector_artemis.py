"""Artemis's own selector test cases (artemis-selector SelectorTest), on equivalent headers."""
from __future__ import annotations

import pytest

from rtroute.selector import SelectorError, compile


def artemis_message(**extra):
    """The properties of SelectorTest.createMessage()."""
    headers = {
        "JMSType": "selector-test",
        "JMSMessageID": "connection:1:1:1:1",
        "name": "James",
        "location": "London",
        "byteProp": 123,
        "byteProp2": 33,
        "shortProp": 123,
        "intProp": 123,
        "longProp": 123,
        "floatProp": 123.0,
        "doubleProp": 123.0,
        "rank": 123,
        "version": 2,
        "quote": "'In God We Trust'",
        "foo": "_foo",
        "punctuation": "!#$&()*+,-./:;<=>?@[\\]^`{|}~",
        "endingUnderScore": "XD7xlJIQn_",
        "trueProp": True,
        "falseProp": False,
    }
    headers.update(extra)
    return headers


CASES = [
    # testBooleanSelector
    ("(trueProp OR falseProp) AND trueProp", True),
    ("(trueProp OR falseProp) AND falseProp", False),
    # testJMSPropertySelectors
    ("JMSType = 'selector-test'", True),
    ("JMSType = 'crap'", False),
    ("JMSMessageID = 'connection:1:1:1:1'", True),
    ("JMSMessageID = 'id:not-test:1:1:1:1'", False),
    # testBasicSelectors
    ("name = 'James'", True),
    ("rank > 100", True),
    ("rank >= 123", True),
    ("rank >= 124", False),
    # testPropertyTypes
    ("byteProp = 123", True), ("byteProp = 10", False),
    ("byteProp2 = 33", True), ("byteProp2 = 10", False),
    ("shortProp = 123", True), ("shortProp = 10", False),
    ("intProp = 123", True), ("intProp = 10", False),
    ("longProp = 123", True), ("longProp = 10", False),
    ("floatProp = 123", True), ("floatProp = 10", False),
    ("doubleProp = 123", True), ("doubleProp = 10", False),
    # testAndSelectors
    ("name = 'James' and rank < 200", True),
    ("name = 'James' and rank > 200", False),
    ("name = 'Foo' and rank < 200", False),
    ("unknown = 'Foo' and anotherUnknown < 200", False),
    # testOrSelectors
    ("name = 'James' or rank < 200", True),
    ("name = 'James' or rank > 200", True),
    ("name = 'Foo' or rank < 200", True),
    ("name = 'Foo' or rank > 200", False),
    ("unknown = 'Foo' or anotherUnknown < 200", False),
    # testPlus
    ("rank + 2 = 125", True),
    ("(rank + 2) = 125", True),
    ("125 = (rank + 2)", True),
    ("rank + version = 125", True),
    ("rank + 2 < 124", False),
    ("name + '!' = 'James!'", True),
    # testMinus
    ("rank - 2 = 121", True),
    ("rank - version = 121", True),
    ("rank - 2 > 122", False),
    # testMultiply
    ("rank * 2 = 246", True),
    ("rank * version = 246", True),
    ("rank * 2 < 130", False),
    # testDivide
    ("rank / version = 61.5", True),
    ("rank / 3 > 100.0", False),
    ("rank / 3 > 100", False),
    ("version / 2 = 1", True),
    # testBetween
    ("rank between 100 and 150", True),
    ("rank between 10 and 120", False),
    # testIn
    ("name in ('James', 'Bob', 'Gromit')", True),
    ("name in ('Bob', 'James', 'Gromit')", True),
    ("name in ('Gromit', 'Bob', 'James')", True),
    ("name in ('Gromit', 'Bob', 'Cheddar')", False),
    ("name not in ('Gromit', 'Bob', 'Cheddar')", True),
    # testIsNull
    ("dummy is null", True),
    ("dummy is not null", False),
    ("name is not null", True),
    ("name is null", False),
    # testFloatComparisons
    ("1.0 < 1.1", True), ("-1.1 < 1.0", True), ("1.0E1 < 1.1E1", True), ("-1.1E1 < 1.0E1", True),
    ("1. < 1.1", True), ("-1.1 < 1.", True), ("1.E1 < 1.1E1", True), ("-1.1E1 < 1.E1", True),
    (".1 < .5", True), ("-.5 < .1", True), (".1E1 < .5E1", True), ("-.5E1 < .1E1", True),
    ("4E10 < 5E10", True), ("5E8 < 5E10", True), ("-4E10 < 2E10", True), ("-5E8 < 2E2", True),
    ("4E+10 < 5E+10", True), ("4E-10 < 5E-10", True),
    # testStringQuoteParsing
    ("quote = '''In God We Trust'''", True),
]


@pytest.mark.parametrize("text,expected", CASES, ids=[c[0] for c in CASES])
def test_artemis_selector_test_cases(outcome, text, expected):
    assert bool(outcome(text, artemis_message())) is expected


def test_artemis_like_with_model_properties():
    selector = compile("modelClassId LIKE 'com.whatever.something.%' AND modelInstanceId = '170' "
                       "AND (modelRequestError IS NULL OR modelCorrelatedClientId = 'whatever')")
    message = artemis_message(modelClassId="com.whatever.something.foo.bar",
                              modelInstanceId="170", modelRequestError="abc",
                              modelCorrelatedClientId="whatever")
    assert selector.matches(message) is True
    message["modelCorrelatedClientId"] = "shouldFailNow"
    assert selector.matches(message) is False
    del message["modelRequestError"]
    assert selector.matches(message) is True


def test_artemis_mats_henricson_use_cases():
    message = artemis_message()
    assert compile("SessionserverId=1870414179").matches(message) is False
    message["SessionserverId"] = 1870414179
    assert compile("SessionserverId=1870414179").matches(message) is True
    message["SessionserverId"] = 1234
    assert compile("SessionserverId=1870414179").matches(message) is False
    not_in = compile("Command NOT IN ('MirrorLobbyRequest', 'MirrorLobbyReply')")
    assert not_in.matches(message) is False
    for command, expected in (("Cheese", True), ("MirrorLobbyRequest", False),
                              ("MirrorLobbyReply", False)):
        message["Command"] = command
        assert not_in.matches(message) is expected


@pytest.mark.parametrize("text", [
    "3+5",
    "True AND 3+5",
    "=TEST 'test'",
    "prop1 = prop2 foo AND string = 'Test'",
    "a = 1 AMD  b = 2",
])
def test_artemis_invalid_selectors(text):
    with pytest.raises(SelectorError):
        compile(text)


@pytest.mark.parametrize("text", ["x = 1 and y = 2", "(x = 1) and (y = 2)",
                                  "((x = 1) and (y = 2))"])
def test_artemis_parentheses_around_conditions(text):
    assert compile(text).matches({"x": 1, "y": 2}) is True
    assert compile(text).matches({"x": 1, "y": 3}) is False
