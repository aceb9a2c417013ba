"""Header value types (as pika decodes them) and the Artemis modes set by prefixes."""
from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest

from rtroute.selector import compile
from rtroute.selector.values import JLong, java_double_str

T, F, U = True, False, None

HEADERS = {
    "bin": b"abc",
    "bin2": b"abc",
    "barr": bytearray(b"abc"),
    "dec": Decimal("2.50"),
    "when": datetime(2024, 1, 1, tzinfo=timezone.utc),
    "naive": datetime(2024, 1, 1),
    "arr": [1, "a"],
    "table": {"k": 1},
    "table2": {"k": 1},
    "none": None,
    "yes": True,
    "n": 5,
    "s": "abc",
}


def table(rows):
    return pytest.mark.parametrize("text,expected", rows, ids=[r[0] for r in rows])


@table([
    # binary is not a string (Artemis treats AMQP binary so): never equal to a string,
    # not LIKE-able, IN on it is unknown, ordering it aborts
    ("bin = 'abc'", F),
    ("bin <> 'abc'", T),
    ("bin LIKE 'a%'", F),
    ("bin IN ('abc')", U),
    ("bin IS NULL", F),
    ("bin = bin2", T),
    ("bin = barr", T),
    ("bin = s", F),
    ("bin > 1", U),
    ("bin + 1 = 1", U),
    ("bin", F),
])
def test_binary_values(outcome, text, expected):
    assert outcome(text, HEADERS) is expected


@table([
    # a Decimal is a number
    ("dec = 2.5", T),
    ("dec > 2", T),
    ("dec + 1 = 3.5", T),
    ("dec BETWEEN 2 AND 3", T),
    ("dec = '2.50'", F),
    # a datetime is epoch milliseconds (a Long)
    ("when = 1704067200000", T),
    ("when > 1700000000000", T),
    ("naive = 1704067200000", T),   # naive datetimes are UTC, as pika writes them
    ("when + 1 = 1704067200001", T),
])
def test_decimal_and_datetime_values(outcome, text, expected):
    assert outcome(text, HEADERS) is expected


@table([
    # arrays and nested tables are values of their own kind
    ("arr = 1", F),
    ("arr IS NOT NULL", T),
    ("arr IN ('a')", U),
    ("arr LIKE '%'", F),
    ("arr > 1", U),
    ("table = 1", F),
    ("table = table2", T),
    ("table <> 'k'", T),
    ("table", F),
    # None (AMQP void) is NULL
    ("none IS NULL", T),
    ("none = 1", U),
    # a boolean is not a number
    ("yes = 1", F),
    ("yes + 1 = 2", U),
])
def test_arrays_tables_void_and_booleans(outcome, text, expected):
    assert outcome(text, HEADERS) is expected


def test_headers_may_be_none_or_any_mapping():
    from types import MappingProxyType

    selector = compile("a IS NULL")
    assert selector.matches(None) is True
    assert compile("a = 1").matches(MappingProxyType({"a": 1})) is True


def test_int_subclasses_and_str_subclasses_behave_as_their_base():
    import enum

    class Level(enum.IntEnum):
        HIGH = 9

    class Name(str):
        pass

    assert compile("level = 9").matches({"level": Level.HIGH}) is True
    assert compile("level > 8").matches({"level": Level.HIGH}) is True
    assert compile("name = 'x'").matches({"name": Name("x")}) is True
    assert compile("name LIKE 'x'").matches({"name": Name("x")}) is True
    assert compile("name IN ('x')").matches({"name": Name("x")}) is True


@table([
    ("convert_string_expressions:n = '5'", T),
    ("convert_string_expressions:'5' = n", T),
    ("convert_string_expressions:sn = 5", T),
    ("convert_string_expressions:sn > 4", T),
    ("convert_string_expressions:sn BETWEEN 4 AND 6", T),
    ("convert_string_expressions:sd > 1", F),       # Integer.valueOf('2.5') fails: FALSE
    ("convert_string_expressions:sd > 1.0", T),
    ("convert_string_expressions:sd = 2.5", T),
    ("convert_string_expressions:strue = TRUE", T),
    ("convert_string_expressions:sTRUE = TRUE", T),
    ("convert_string_expressions:syes = FALSE", T),   # Boolean.valueOf: only 'true' is true
    ("convert_string_expressions:yes = 'true'", T),
    ("convert_string_expressions:s = 5", F),
    ("convert_string_expressions:sbig = 5", F),       # does not fit an Integer
    ("convert_string_expressions:sbig = 3000000000", T),
    ("convert_string_expressions:sn * 2 = 10", T),    # strings become numbers in arithmetic
    ("convert_string_expressions:sd * 2 = 5", T),
    ("convert_string_expressions:sn - 1 = 4", T),
    ("convert_string_expressions:sn + 1 = 51", T),    # ...but a string on the left of + concatenates
    ("convert_string_expressions:s * 2 = 2", U),       # not a number: aborts
    ("convert_string_expressions:sexp > 999.0", T),   # Double.valueOf syntax
    ("convert_string_expressions:shex = 3.0", T),
    ("convert_string_expressions:ssuffix = 1.5", T),
    ("convert_string_expressions:spadded = 1.5", T),  # Double.valueOf trims blanks
    ("convert_string_expressions:spadded = 1", F),    # Integer.valueOf does not
    ("convert_string_expressions:snan = 0 / 0", T),
    ("sn = 5", F),
    ("no_convert_string_expressions:sn = 5", F),
    ("convert_string_expressions:no_convert_string_expressions:sn = 5", F),
])
def test_convert_string_expressions_mode(outcome, text, expected):
    headers = {"n": 5, "sn": "5", "sd": "2.5", "strue": "true", "sTRUE": "TRUE", "syes": "yes",
               "yes": True, "s": "abc", "sbig": "3000000000", "sexp": "1e3", "shex": "0x1.8p1",
               "ssuffix": "1.5f", "spadded": " 1.5 ", "snan": "NaN"}
    assert outcome(text, headers) is expected


def test_convert_string_expressions_mode_is_reported():
    assert compile("convert_string_expressions:a = '1'").convert_string_expressions is True
    assert compile("a = '1'").convert_string_expressions is False


@table([
    ("hyphenated_props:foo-bar = 'x'", T),
    ("hyphenated_props:foo-bar-2 = 'y'", T),
    ("hyphenated_props:foo - bar = 1", T),          # with blanks, '-' is still subtraction
    ("hyphenated_props:\"foo-bar\" = 'x'", T),
    ("hyphenated_props:convert_string_expressions:n-1 = '5'", T),
    ("convert_string_expressions:hyphenated_props:n-1 = '5'", T),
    ("  hyphenated_props:foo-bar = 'x'", T),        # the filter is trimmed first
    ("foo-bar = 'x'", F),                           # foo - bar: 3 - 2 = 'x' is FALSE
    ("no_hyphenated_props:foo-bar = 1", T),
])
def test_hyphenated_props_mode(outcome, text, expected):
    headers = {"foo-bar": "x", "foo-bar-2": "y", "foo": 3, "bar": 2, "n-1": 5}
    assert outcome(text, headers) is expected


def test_hyphenated_props_mode_is_reported():
    assert compile("hyphenated_props:a-b = 1").hyphenated_props is True


@pytest.mark.parametrize("value,text", [
    (1.0, "1.0"), (-2.5, "-2.5"), (100.0, "100.0"), (1e7, "1.0E7"), (9999999.0, "9999999.0"),
    (0.001, "0.001"), (0.0001, "1.0E-4"), (1.5e-5, "1.5E-5"), (1e21, "1.0E21"),
    (123456789.0, "1.23456789E8"), (0.1, "0.1"), (1 / 3, "0.3333333333333333"),
    (0.0, "0.0"), (-0.0, "-0.0"), (float("nan"), "NaN"), (float("inf"), "Infinity"),
    (float("-inf"), "-Infinity"), (1.7976931348623157e308, "1.7976931348623157E308"),
])
def test_doubles_print_as_java_does_in_concatenation(value, text):
    assert java_double_str(value) == text


def test_jlong_is_an_int():
    assert JLong(5) == 5 and hash(JLong(5)) == hash(5) and repr(JLong(5)) == "JLong(5)"
    assert str(JLong(5)) == f"{JLong(5)}" == "5"
