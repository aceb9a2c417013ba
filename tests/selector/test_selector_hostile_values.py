"""Values from publishers cannot make a selector slow or raise (issue 13).

A LIKE pattern with several `%` used to be a backtracking regex: `%a%a%a%a%a%a%a%a%b` on
3,000 `a`s ran for hours at full CPU, holding the GIL. Each case here runs under a 10 s alarm
(it takes milliseconds), so a regression fails the test instead of hanging the suite.
"""
from __future__ import annotations

import math
import re
import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtroute.selector import compile
from rtroute.selector.values import _FAILED, java_parse_double, java_parse_int, like_matcher

from ..hypothesis_profiles import examples

ALARM_SECONDS = 10


@pytest.fixture(autouse=True)
def alarm():
    """Fail the test (rather than hang) after ALARM_SECONDS; regex matching is interrupted too."""
    def expire(signum, frame):
        pytest.fail(f"took more than {ALARM_SECONDS} s: super-linear again?")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(ALARM_SECONDS)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("pattern,value,expected", [
    ("%a%a%a%a%a%a%a%a%b", "a" * 3_000, False),
    ("%a%a%a%a%a%a%a%a%b", "a" * 100_000, False),
    ("%a%a%b", "a" * 8_192, False),
    ("%a%a%a%a%a%a%a%a%b%", "a" * 100_000, False),   # the middle `b` is sought to the end
    ("%a%a%a%a%a%a%a%a%b", "a" * 100_000 + "b", True),
    ("%a_a%a_a%a_a%b_", "a" * 100_000, False),
    ("%a_b%", "a" * 100_000, False),                 # a candidate at every position
    ("%aaaa_b%", "a" * 100_000, False),
    ("%a_b%", "a" * 100_000 + "cb", True),
    ("%a_b%", "ab" * 50_000, False),                 # every run found, never together
    ("%a_b_a_b_c%", "ab" * 50_000, False),
    ("%" + "a%" * 50 + "b", "a" * 100_000, False),
], ids=["8-percent-3k", "8-percent-100k", "2-percent-8k", "middle-b-100k", "matches-100k",
        "underscores-100k", "a_b-100k", "aaaa_b-100k", "a_b-matches-100k", "a_b-on-ab-100k",
        "a_b_a_b_c-on-ab-100k", "50-percent-100k"])
def test_like_takes_linear_time_on_pathological_values(pattern, value, expected):
    selector = compile(f"office LIKE '{pattern}'")
    negated = compile(f"office NOT LIKE '{pattern}'")
    headers = {"office": value}
    assert like_matcher(pattern, None)(value) is expected
    assert selector.matches(headers) is expected
    assert selector.evaluate(headers) is expected
    assert negated.matches(headers) is not expected


@pytest.mark.parametrize("text,value,expected", [
    ("convert_string_expressions: price > 5.5", "1" * 64_000 + "x", False),
    ("convert_string_expressions: price > 5.5", "0x" + "1" * 64_000 + "x", False),
    ("convert_string_expressions: price > 5.5", "1" * 64_000 + ".5", True),
    ("convert_string_expressions: price > 5", "1" * 100_000, False),  # too big for a long
    ("convert_string_expressions: price = 5", "0" * 100_000 + "5", True),
    ("convert_string_expressions: price * 1 = 5", "0" * 100_000 + "5", True),
    ("convert_string_expressions: price * 1 = 5", "1" * 100_000, False),
], ids=["double-64k", "hex-64k", "double-64k-valid", "long-100k-digits", "leading-zeros",
        "arithmetic-leading-zeros", "arithmetic-100k-digits"])
def test_number_conversion_is_linear_and_never_raises(text, value, expected):
    assert compile(text).matches({"price": value}) is expected


# Double.valueOf's syntax as the regex had it before issue 13 (quadratic on long digit runs):
# the oracle for the unambiguous one.
_OLD_JAVA_DOUBLE = re.compile(
    r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)|"
    r"(0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+))[fFdD]?",
    re.ASCII,
)


@pytest.mark.parametrize(("text", "value"), [
    ("0X1P1100", math.inf), ("-0x1p1100d", -math.inf), ("0x1p-1100", 0.0), ("1e400", math.inf)])
def test_a_double_beyond_range_is_infinity_or_zero_as_in_java(text, value):
    # found by the property below in CI: float.fromhex raised OverflowError out of the parser
    assert java_parse_double(text) == value


@settings(max_examples=examples(1000), deadline=None)
@given(st.text("0123456789.eExXpPaAfFdD+-", max_size=10))
def test_double_syntax_is_unchanged(text):
    result = java_parse_double(text)
    assert (result is not _FAILED) is bool(_OLD_JAVA_DOUBLE.fullmatch(text))


@settings(max_examples=examples(500), deadline=None)
@given(st.sampled_from(["", "+", "-"]), st.text("0\u0660", max_size=30),
       st.text("0123456789\u0661", max_size=22))
def test_long_parsing_skips_any_number_of_leading_zeros(sign, zeros, digits):
    text = sign + zeros + digits
    if not zeros + digits:
        assert java_parse_int(text, 64) is _FAILED
        return
    value = int(text)  # the oracle: few enough digits for int()
    for bits in (32, 64):
        result = java_parse_int(text, bits)
        if -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
            assert result == value
        else:
            assert result is _FAILED
