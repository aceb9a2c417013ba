"""LIKE: `%`, `_`, ESCAPE, and everything else taken literally (Artemis's translation)."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtroute.selector import compile
from rtroute.selector.values import like_matcher, like_plan

from ..hypothesis_profiles import examples

T, F, U = True, False, None

HEADERS = {
    "quote": "'In God We Trust'",
    "foo": "_foo",
    "punctuation": "!#$&()*+,-./:;<=>?@[\\]^`{|}~",
    "endingUnderScore": "XD7xlJIQn_",
    "path": "a.b.c",
    "multiline": "first\nsecond",
    "percent": "50%",
    "empty": "",
    "number": 5,
    "flag": True,
    "binary": b"abc",
    "emoji": "\U0001f600x",
}


def table(rows):
    return pytest.mark.parametrize("text,expected", rows, ids=[r[0] for r in rows])


@table([
    # from Artemis's SelectorTest.testLikeComparisons
    ("quote LIKE '''In G_d We Trust'''", T),
    ("quote LIKE '''In Gd_ We Trust'''", F),
    ("quote NOT LIKE '''In G_d We Trust'''", F),
    ("quote NOT LIKE '''In Gd_ We Trust'''", T),
    ("foo LIKE '%oo'", T),
    ("foo LIKE '%ar'", F),
    ("foo NOT LIKE '%oo'", F),
    ("foo NOT LIKE '%ar'", T),
    ("foo LIKE '!_%' ESCAPE '!'", T),
    ("quote LIKE '!_%' ESCAPE '!'", F),
    ("foo NOT LIKE '!_%' ESCAPE '!'", F),
    ("quote NOT LIKE '!_%' ESCAPE '!'", T),
    ("punctuation LIKE '!#$&()*+,-./:;<=>?@[\\]^`{|}~'", T),
])
def test_artemis_like_comparisons(outcome, text, expected):
    assert outcome(text, HEADERS) is expected


@table([
    # from Artemis's SelectorTest.testSpecialEscapeLiteral: the escape character escapes only
    # %, _ and itself; anywhere else it is an ordinary pattern character
    ("foo LIKE '%_%' ESCAPE '%'", T),
    ("endingUnderScore LIKE '_D7xlJIQn$_' ESCAPE '$'", T),
    ("endingUnderScore LIKE '_D7xlJIQn__' ESCAPE '_'", T),
    ("endingUnderScore LIKE '%D7xlJIQn%_' ESCAPE '%'", T),
    ("endingUnderScore LIKE '%D7xlJIQn%'  ESCAPE '%'", T),
    ("endingUnderScore LIKE '%D7xlJIQn%%'  ESCAPE '%'", F),
    ("endingUnderScore LIKE '_D7xlJIQn\\_' ESCAPE '\\'", T),
    ("endingUnderScore LIKE '%D7xlJIQn\\_' ESCAPE '\\'", T),
])
def test_artemis_special_escape_literals(outcome, text, expected):
    assert outcome(text, HEADERS) is expected


@table([
    ("percent LIKE '50!%' ESCAPE '!'", T),
    ("percent LIKE '5!%' ESCAPE '!'", F),
    ("percent LIKE '%!%' ESCAPE '!'", T),
    ("foo LIKE '!_foo' ESCAPE '!'", T),
    ("foo LIKE '!__oo' ESCAPE '!'", T),
    ("foo LIKE '!_oo' ESCAPE '!'", F),
    ("foo LIKE '!_f_o' ESCAPE '!'", T),
    ("path LIKE 'a!.b%' ESCAPE '!'", F),   # ! before '.' is an ordinary character
    ("'a!.b' LIKE 'a!.b' ESCAPE '!'", T),
    ("'a!b' LIKE 'a!!b' ESCAPE '!'", T),   # the escape escapes itself
    ("'a!' LIKE 'a!' ESCAPE '!'", T),      # a trailing escape is an ordinary character
    ("'a' LIKE 'a!' ESCAPE '!'", F),
    ("'50%' LIKE '50\\%' ESCAPE '\\'", T),
    ("'50x' LIKE '50\\%' ESCAPE '\\'", F),
])
def test_escape(outcome, text, expected):
    assert outcome(text, HEADERS) is expected


@table([
    ("path LIKE 'a%'", T),
    ("path LIKE '%c'", T),
    ("path LIKE '%.b.%'", T),
    ("path LIKE '%'", T),
    ("path LIKE '%%'", T),
    ("empty LIKE '%'", T),
    ("empty LIKE '_'", F),
    ("empty LIKE ''", T),
    ("path LIKE ''", F),
    ("path LIKE 'a.b.c'", T),
    ("path LIKE 'a.b.c%'", T),
    ("path LIKE '%a.b.c'", T),
    ("path LIKE 'a%c'", T),
    ("path LIKE 'a%b%c'", T),
    ("path LIKE 'a%x%c'", F),
    ("path LIKE 'b%'", F),
    ("path LIKE '%b'", F),
    ("path LIKE '_.b._'", T),
    ("path LIKE '_____'", T),
    ("path LIKE '______'", F),
    ("path LIKE '____'", F),
    ("path LIKE 'A%'", F),            # LIKE is case-sensitive
    ("emoji LIKE '_x'", T),           # _ is one character, even outside the BMP
])
def test_wildcards(outcome, text, expected):
    assert outcome(text, HEADERS) is expected


@table([
    # regex metacharacters in the pattern are taken literally
    ("path LIKE 'a_b_c'", T),
    ("path LIKE 'a.b.c'", T),
    ("'abc' LIKE 'a.c'", F),
    ("'a.c' LIKE 'a.c'", T),
    ("'aaa' LIKE 'a*'", F),
    ("'a*' LIKE 'a*'", T),
    ("'ab' LIKE 'a+b'", F),
    ("'a+b' LIKE 'a+b'", T),
    ("'x' LIKE '[x]'", F),
    ("'[x]' LIKE '[x]'", T),
    ("'a' LIKE 'a|b'", F),
    ("'a|b' LIKE 'a|b'", T),
    ("'ab' LIKE '(ab)'", F),
    ("'(ab)' LIKE '(ab)'", T),
    ("'abc' LIKE '^abc$'", F),
    ("'^abc$' LIKE '^abc$'", T),
    ("'a\\d' LIKE 'a\\d'", T),
    ("'a1' LIKE 'a\\d'", F),
    ("'a{2}' LIKE 'a{2}'", T),
    ("'aa' LIKE 'a{2}'", F),
    ("'a?' LIKE 'a?'", T),
    ("'' LIKE 'a?'", F),
    ("'(?i)A' LIKE '(?i)A'", T),
    ("'a' LIKE '(?i)A'", F),
])
def test_regex_metacharacters_are_literal(outcome, text, expected):
    assert outcome(text, HEADERS) is expected


@table([
    ("multiline LIKE 'first%'", T),    # % and _ match line ends too
    ("multiline LIKE '%second'", T),
    ("multiline LIKE 'first_second'", T),
    ("multiline LIKE 'f%d'", T),
    ("multiline LIKE 'first'", F),
])
def test_wildcards_match_newlines(outcome, text, expected):
    assert outcome(text, HEADERS) is expected


@table([
    ("number LIKE '5'", F),   # LIKE on a non-string is FALSE (not unknown)
    ("number NOT LIKE '5'", T),
    ("flag LIKE 'true'", F),
    ("binary LIKE 'abc'", F),
    ("missing LIKE '%'", U),
    ("missing NOT LIKE '%'", U),
    ("5 LIKE '5'", F),
    ("'5' LIKE '5'", T),
    ("(number = 5) LIKE 'true'", F),
])
def test_like_on_non_strings(outcome, text, expected):
    assert outcome(text, HEADERS) is expected


@pytest.mark.parametrize("pattern,escape,plan", [
    ("abc", None, ("equals", "abc")),
    ("abc%", None, ("prefix", "abc")),
    ("%abc", None, ("suffix", "abc")),
    ("%abc%", None, ("contains", "abc")),
    ("%%abc%%", None, ("contains", "abc")),
    ("%", None, ("contains", "")),
    ("%%", None, ("contains", "")),
    ("", None, ("equals", "")),
    ("a!%b%", "!", ("prefix", "a%b")),
    ("a%b", None, ("literals", ("a", "b"))),
    ("a%%b", None, ("literals", ("a", "b"))),
    ("%a%b", None, ("literals", ("", "a", "b"))),
    ("a!%b%c%", "!", ("literals", ("a%b", "c", ""))),
    ("a_", None, ("segments", (("a", ""),))),
    ("_", None, ("segments", (("", ""),))),
    ("%a_b%c%", None, ("segments", (("",), ("a", "b"), ("c",), ("",)))),
    ("a!_b", "!", ("equals", "a_b")),
])
def test_patterns_are_planned_for_string_methods(pattern, escape, plan):
    assert like_plan(pattern, escape) == plan


@table([
    # segments between % are matched leftmost first, without overlapping, within the ends
    ("'aab' LIKE '%a%a%b'", T),
    ("'aaa' LIKE '%a%a%b'", F),
    ("'ab' LIKE '%a%a%b'", F),
    ("'a' LIKE 'a%a'", F),               # the first and last segments do not overlap
    ("'aa' LIKE 'a%a'", T),
    ("'aba' LIKE '%ab%ba%'", F),
    ("'abba' LIKE '%ab%ba%'", T),
    ("'abab' LIKE 'ab%ab'", T),
    ("'aba' LIKE 'ab%ba'", F),
    ("'a' LIKE '_%_'", F),
    ("'ab' LIKE '_%_'", T),
    ("'abxac' LIKE '%a_c%'", F),
    ("'aabc' LIKE '%a_c%'", T),
    ("'aaab' LIKE '%a_a%b'", T),
    ("'aab' LIKE '%a_a%b'", F),
    ("'xabcxzabc' LIKE '%x_abc%'", T),   # a run found before the segment could start
    ("'abcx_abc' LIKE '%x_abc'", T),
    ("'abab' LIKE '%a_b%'", F),
    ("'abaab' LIKE '%a_b%'", T),          # a run found further on moves the segment on
    ("'abba' LIKE '%ab_b%'", F),
    ("'abxbab_b' LIKE '%ab_b%'", T),
    ("'ab' LIKE '%__%'", T),
    ("'a' LIKE '%__%'", F),
    ("'bab' LIKE '%%a%%'", T),
    ("'ab' LIKE 'a%%b'", T),
    ("'a%bc' LIKE 'a!%%' ESCAPE '!'", T),
    ("'abc' LIKE 'a!%%' ESCAPE '!'", F),
    ("'ab_' LIKE '%!_' ESCAPE '!'", T),
    ("'abc' LIKE '%!_' ESCAPE '!'", F),
    ("'a_b_c' LIKE '%!__!_%' ESCAPE '!'", T),
    ("'x\U0001f600y' LIKE '%_\U0001f600_%'", T),
    ("'a\n\nb\nc' LIKE 'a%b_c'", T),
])
def test_segments_between_percent_signs(outcome, text, expected):
    assert outcome(text, HEADERS) is expected


def artemis_regex(pattern: str, escape: str | None) -> str:
    """Artemis's translation of a LIKE pattern to a regex (what rtroute matched with before
    issue 13): the oracle of the property test below."""
    parts = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape and i + 1 < len(pattern) and pattern[i + 1] in ("%", "_", escape):
            parts.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        parts.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return "".join(parts)


@st.composite
def like_cases(draw):
    """A pattern over a few characters, an ESCAPE (or none), and a value: random, or the
    pattern with its wildcards filled in (which often matches)."""
    pattern = draw(st.text("ab_%\\!", max_size=8))
    escape = draw(st.sampled_from([None, "\\", "!", "%", "_", "a"]))
    if draw(st.booleans()):
        value = draw(st.text("ab_%\\!\n", max_size=10))
    else:
        value = "".join(draw(st.text("ab", max_size=3)) if c == "%" else
                        draw(st.sampled_from("ab_\n")) if c == "_" else c for c in pattern)
    return pattern, escape, value


@settings(max_examples=examples(1500), deadline=None)
@given(like_cases())
def test_matcher_agrees_with_the_regex_translation(case):
    pattern, escape, value = case
    expected = re.fullmatch(artemis_regex(pattern, escape), value, re.DOTALL) is not None
    assert like_matcher(pattern, escape)(value) is expected
    text = f"v LIKE '{pattern}'" + (f" ESCAPE '{escape}'" if escape else "")
    headers = {"v": value}
    assert compile(text).matches(headers) is expected
    assert compile(text).evaluate(headers) is expected
    assert compile(f"NOT ({text})").matches(headers) is not expected
    assert compile(text.replace(" LIKE ", " NOT LIKE ")).matches(headers) is not expected
