"""Malformed selectors: each is rejected with the position of the fault and what was expected."""
from __future__ import annotations

import pytest

from rtroute.selector import SelectorError, compile

# (selector, 0-based position of the fault, a fragment of the message)
MALFORMED = [
    # incomplete or misplaced operands
    ("price >", 7, "expected an expression"),
    ("a = 1 AND", 9, "after AND"),
    ("AND a = 1", 0, "expected an expression"),
    ("a = 1 OR OR b = 1", 9, "expected an expression"),
    ("=TEST 'test'", 0, "expected an expression"),
    ("a == 1", 3, "expected an expression"),
    ("a = -", 5, "expected an expression"),
    ("(", 1, "expected an expression"),
    ("()", 1, "expected an expression"),
    ("NOT", 3, "expected an expression"),
    ("/* only a comment */", 20, "expected an expression"),
    ("hyphenated_props:", 17, "expected an expression"),
    ("a = 1 --", 8, "expected an expression"),       # no line end: two minus signs
    # trailing garbage
    ("prop1 = prop2 foo AND string = 'Test'", 14, "expected an operator"),
    ("a = 1 AMD  b = 2", 6, "expected an operator"),
    ("a = 1)", 5, "expected an operator"),
    ("a = 'x' ESCAPE 'y'", 8, "expected an operator"),
    ("a = 1 b = 2", 6, "expected an operator"),
    # parentheses
    ("(a = 1", 6, "')' to close the '(' at position 0"),
    ("((a = 1) AND (b = 2)", 20, "')' to close"),
    # not a condition where one is needed (Artemis: "will not result in a boolean value")
    ("3 + 5", 0, "expected a condition"),
    ("True AND 3+5", 9, "expected a condition after AND"),
    ("'abc'", 0, "expected a condition"),
    ("- a", 0, "expected a condition"),
    ("NOT 3", 4, "expected a condition after NOT"),
    ("NOT 'a'", 4, "expected a condition after NOT"),
    ("a AND 1", 6, "expected a condition after AND"),
    ("1 OR a", 0, "expected a condition before OR"),
    ("1.5", 0, "expected a condition"),
    # NULL and booleans beside =
    ("x = NULL", 4, "IS NULL"),
    ("NULL = x", 0, "IS NULL"),
    ("x <> NULL", 5, "IS NULL"),
    ("TRUE = 1", 7, "cannot be compared"),
    ("FALSE <> 'x'", 9, "cannot be compared"),
    # string literals and conditions beside < > <= >= and in BETWEEN
    ("a > 'x'", 4, "cannot be compared with >"),
    ("'x' < a", 0, "cannot be compared with <"),
    ("a >= TRUE", 5, "cannot be compared"),
    ("a <= NULL", 5, "cannot be compared"),
    ("a BETWEEN 'a' AND 'c'", 10, "cannot be compared with BETWEEN"),
    ("a BETWEEN 1 AND 'c'", 16, "cannot be compared with BETWEEN"),
    ("'a' BETWEEN 1 AND 2", 0, "cannot be compared with BETWEEN"),
    ("(a = 1) > 2", 1, "a condition cannot be compared"),
    ("a < b < c", 0, "a condition cannot be compared"),
    ("a BETWEEN 1 2", 12, "AND (BETWEEN low AND high)"),
    ("a BETWEEN 1 OR 2", 12, "AND (BETWEEN low AND high)"),
    # IN
    ("a IN (1, 2)", 6, "string literal"),
    ("a IN ()", 6, "string literal"),
    ("a IN ('x'", 9, "',' or ')'"),
    ("a IN ('x',)", 10, "string literal"),
    ("a IN 'x'", 5, "'('"),
    ("'a' IN ('a')", 0, "identifier before IN"),
    ("a + 1 IN ('a')", 0, "identifier before IN"),
    ("a IN ('x') IN ('y')", 0, "identifier before IN"),
    # LIKE
    ("a LIKE b", 7, "string literal"),
    ("a LIKE 5", 7, "string literal"),
    ("a LIKE 'x' ESCAPE 'ab'", 18, "exactly one character"),
    ("a LIKE 'x' ESCAPE ''", 18, "exactly one character"),
    ("a LIKE 'x' ESCAPE", 17, "one character"),
    # NOT and IS
    ("a NOT b", 6, "expected LIKE, BETWEEN or IN after NOT"),
    ("a NOT", 5, "expected LIKE, BETWEEN or IN after NOT"),
    ("a NOT = 1", 6, "expected LIKE, BETWEEN or IN after NOT"),
    ("a IS 1", 5, "NULL or NOT NULL"),
    ("a IS NOT 1", 9, "NULL or NOT NULL"),
    ("a IS", 4, "NULL or NOT NULL"),
    # lexical errors
    ("a = 'unterminated", 4, "unterminated string literal"),
    ('"unterminated = 1', 0, "unterminated quoted identifier"),
    ("a = 1 /* open", 6, "unterminated comment"),
    ("a != 1", 2, "use '<>'"),
    ("a = @", 4, "unexpected character '@'"),
    ("a = \u2018x\u2019", 4, "straight single quotes"),
    ("a = .e5", 4, "unexpected character '.'"),
    ("a = 08", 4, "octal"),
    ("a = 0x", 4, "malformed number"),
    ("a = 1abc", 4, "malformed number"),
    ("a = 1.2.3", 4, "malformed number"),
    ("a = 1e", 4, "malformed number"),
    ("a = 1e5L", 4, "malformed number"),
    ("a = 9223372036854775808", 4, "64-bit range"),
    ("a = 0x10000000000000000", 4, "64-bit range"),
    ("a = 02000000000000000000000", 4, "64-bit range"),
    ("a\u00e9 = 1", 1, "unexpected character"),   # identifiers are ASCII, as in Artemis
    ("a = 1 \u00a0", 6, "unexpected character"),  # only space, tab, CR, LF, FF are blanks
    # XPATH / XQUERY: a string literal follows; the XPath is compiled with the selector
    ("XPATH //a", 6, "a string literal (the XPATH expression) after XPATH"),
    ("XQUERY 5", 7, "a string literal (the XQUERY expression) after XQUERY"),
    ("XPATH '//a['", 6, "invalid XPath expression"),
    ("a = 1 AND XPATH 'nope()'", 16, "unknown XPath function nope()"),
    # modes are prefixes, spelled exactly
    ("CONVERT_STRING_EXPRESSIONS:a = '1'", 26, "unexpected character ':'"),
]


@pytest.mark.parametrize("text,position,fragment", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_selector_is_rejected_with_its_position(text, position, fragment):
    with pytest.raises(SelectorError) as caught:
        compile(text)
    error = caught.value
    assert error.position == position, str(error)
    assert fragment in str(error)
    assert error.text == text
    assert f"(at position {position})" in str(error)


def test_there_are_at_least_forty_malformed_selectors():
    assert len(MALFORMED) >= 40


def test_error_message_names_what_was_expected_and_what_was_found():
    with pytest.raises(SelectorError) as caught:
        compile("price >")
    assert caught.value.reason == (
        "expected an expression (a literal, an identifier or '(') after '>' but found end "
        "of input")
    assert caught.value.pointer() == "price >\n       ^"


def test_error_positions_count_from_the_start_of_the_text_including_prefixes():
    with pytest.raises(SelectorError) as caught:
        compile("convert_string_expressions:a > 'x'")
    assert caught.value.position == len("convert_string_expressions:a > ")


def test_selector_error_is_a_value_error():
    with pytest.raises(ValueError):
        compile("a =")


def test_a_selector_must_be_text():
    with pytest.raises(TypeError):
        compile(b"a = 1")  # type: ignore[arg-type]
