"""LIKE: `%`, `_`, ESCAPE, and everything else taken literally (Artemis's translation)."""
from __future__ import annotations

import pytest

from rtroute.selector.values import like_plan

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
    ("%", None, ("contains", "")),
    ("a!%b%", "!", ("prefix", "a%b")),
    ("a%b", None, ("regex", "a.*b")),
    ("a_", None, ("regex", "a.")),
])
def test_simple_patterns_avoid_regexes(pattern, escape, plan):
    assert like_plan(pattern, escape) == plan
