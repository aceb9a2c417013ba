"""Shared checks for the selector tests."""
from __future__ import annotations

from typing import Any, Callable

import pytest

from rtroute.bench.selector import AstInterpreter
from rtroute.selector import MessageFacts, compile

PREFIXES = ("convert_string_expressions:", "hyphenated_props:", "no_convert_string_expressions:",
            "no_hyphenated_props:")


def three_valued(text: str, headers: dict | None = None,
                 message: MessageFacts | None = None) -> bool | None:
    """The three-valued result of `text`, after checking that every view of it agrees:
    `matches` is True exactly for TRUE, `NOT (text)` matches exactly for FALSE, and the
    AST-walking baseline gives the same answer."""
    selector = compile(text)
    result = selector.evaluate(headers, message)
    assert result in (True, False, None)
    assert selector.matches(headers, message) is (result is True), text
    if not text.lstrip().startswith(PREFIXES) and text.strip():
        negation = compile(f"NOT ({text})")
        assert negation.matches(headers, message) is (result is False), text
        assert AstInterpreter(text).evaluate(headers, message) is result, text
    return result


@pytest.fixture
def outcome() -> Callable[..., Any]:
    """`outcome(text, headers=None, message=None)` -> True, False or None (unknown)."""
    return three_valued
