"""JMS / SQL-92 message selectors, as ActiveMQ Artemis evaluates them (its filters).

    from rtroute.selector import compile, MessageFacts, SelectorError

    sel = compile("office = 'New York' AND price BETWEEN 10 AND 20")
    sel.matches({"office": "New York", "price": 12})          # True
    sel.matches({"office": "New York"})                       # False: price unknown
    sel.evaluate({"office": "New York"})                      # None (unknown)

    prio = compile("JMSPriority > 4 AND AMQAddress = 'orders'")
    prio.matches(props.headers, message=MessageFacts(props, len(body), method.exchange))

    xml = compile("XPATH '/order/region=\"eu\"' AND price > 10")
    xml.matches(props.headers, body=b"<order><region>eu</region></order>")   # reads the body
    xml.needs_body                                                           # True

A selector is compiled once to Python code; `matches` is then a plain function call. Header
values may be str, bytes, bool, int, float, Decimal, datetime, None, lists and nested tables
(see `rtroute.selector.values` for how each compares). Identifiers name headers, except the
standard JMS*/AMQ* fields which resolve from a `MessageFacts` when one is passed (see
`rtroute.selector.fields`). `XPATH 'expr'` evaluates XPath 1.0 over the body passed as
`body=` (see `rtroute.selector.xpath`); callers pass it only where `needs_body` is set.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Callable

from rtroute.selector.compiler import compile_functions, identifiers, uses_body, uses_fields
from rtroute.selector.errors import SelectorError
from rtroute.selector.fields import STANDARD_FIELDS, MessageFacts
from rtroute.selector.parser import MAX_DEPTH, parse
from rtroute.selector.xpath import MAX_XML_BODY

__all__ = [
    "MAX_DEPTH",
    "MAX_LENGTH",
    "MAX_XML_BODY",
    "STANDARD_FIELDS",
    "MessageFacts",
    "Selector",
    "SelectorError",
    "compile",
]

MAX_LENGTH = 65536
"""Longest selector text accepted, in characters."""

CONVERT_STRING_EXPRESSIONS = "convert_string_expressions:"
HYPHENATED_PROPS = "hyphenated_props:"
_PREFIXES = {
    CONVERT_STRING_EXPRESSIONS: ("convert", True),
    HYPHENATED_PROPS: ("hyphenated", True),
    "no_" + CONVERT_STRING_EXPRESSIONS: ("convert", False),
    "no_" + HYPHENATED_PROPS: ("hyphenated", False),
}
_JAVA_TRIMMED = "".join(chr(c) for c in range(33))  # String.trim() drops chars <= ' '


def _match_all(headers: Mapping[str, Any] | None, message: MessageFacts | None = None,
               body: bytes | str | None = None) -> bool:
    return True


class Selector:
    """A compiled selector.

    Attributes:
        text: the selector as given.
        matches: `matches(headers, message=None, body=None) -> bool`. `headers` is the mapping
            of message properties (AMQP headers; None counts as empty); `message` is an
            optional `MessageFacts` from which the JMS*/AMQ* identifiers resolve; `body` is the
            message body (bytes, or an already decoded str), read only by XPATH terms: None
            means no body, and XPATH is then FALSE. True only when the selector evaluates to
            TRUE: FALSE and unknown (NULL) do not match, and neither does an evaluation that
            Artemis would abort (such as arithmetic on a string).
        evaluate: `evaluate(headers, message=None, body=None) -> True | False | None`, the
            three-valued result (None for unknown and for an aborted evaluation).
        identifiers: the header and field names the selector reads.
        needs_message: whether it reads a standard field, i.e. whether passing a
            `MessageFacts` can change the result.
        needs_body: whether it has an XPATH term, i.e. whether passing `body` can change the
            result (callers that have the body in pieces need to join it only then).
        convert_string_expressions: the `convert_string_expressions:` mode (strings compared
            with or used as numbers/booleans are converted first).
        hyphenated_props: the `hyphenated_props:` mode (`-` allowed inside identifiers).
        source: the generated Python source (empty for the empty selector).
    """

    __slots__ = (
        "convert_string_expressions",
        "evaluate",
        "hyphenated_props",
        "identifiers",
        "matches",
        "needs_body",
        "needs_message",
        "source",
        "text",
    )

    def __init__(self, text: str, matches: Callable[..., bool],
                 evaluate: Callable[..., bool | None], names: frozenset[str],
                 needs_message: bool, convert: bool, hyphenated: bool, source: str,
                 needs_body: bool = False) -> None:
        self.text = text
        self.matches = matches
        self.evaluate = evaluate
        self.identifiers = names
        self.needs_message = needs_message
        self.needs_body = needs_body
        self.convert_string_expressions = convert
        self.hyphenated_props = hyphenated
        self.source = source

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"


@functools.lru_cache(maxsize=1024)
def _compile_cached(text: str) -> Selector:
    if len(text) > MAX_LENGTH:
        raise SelectorError(f"selector longer than {MAX_LENGTH} characters", MAX_LENGTH, None)
    stripped = text.strip(_JAVA_TRIMMED)
    if not stripped:
        # Artemis: a blank filter is no filter at all
        return Selector(text, _match_all, _match_all, frozenset(), False, False, False, "")
    start = len(text) - len(text.lstrip(_JAVA_TRIMMED))
    end = start + len(stripped)
    modes = {"convert": False, "hyphenated": False}
    found = True
    while found:
        found = False
        for prefix, (mode, on) in _PREFIXES.items():
            if text.startswith(prefix, start, end):
                modes[mode] = on
                start += len(prefix)
                found = True
                break
    tree = parse(text[:end], start, hyphenated=modes["hyphenated"])
    matches, evaluate, source = compile_functions(tree, modes["convert"], text)
    return Selector(text, matches, evaluate, frozenset(identifiers(tree)), uses_fields(tree),
                    modes["convert"], modes["hyphenated"], source, uses_body(tree))


def compile(text: str | None) -> Selector:
    """Compile a selector (an Artemis filter string).

    A blank selector (or None) matches every message, as an absent filter does in Artemis.
    The text may start with Artemis's mode prefixes `convert_string_expressions:` and
    `hyphenated_props:` (and their `no_` forms). Compiled selectors are cached by text.

    Args:
        text: the selector.

    Returns:
        A `Selector`.

    Raises:
        SelectorError: when the selector is malformed, longer than MAX_LENGTH characters,
            nested deeper than MAX_DEPTH, or has an XPATH expression that Artemis would refuse; `.position` is the 0-based offset of the fault in
            `text` and the message names what was expected.
        TypeError: when `text` is neither a string nor None.
    """
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise TypeError(f"a selector is a str, not {type(text).__name__}")
    try:
        return _compile_cached(text)
    except SelectorError as exc:
        if exc.text is None:
            exc.text = text
        raise
