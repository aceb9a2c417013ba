"""`rtroute bench selector`: compiled selectors against an AST interpreter, in one run.

The baseline, `AstInterpreter`, is the straightforward design: parse once, then walk the syntax
tree for every message, dispatching on the node type, with the same semantics (the helpers of
`rtroute.selector.values`) and a regex for every LIKE, as Artemis does. The compiled selector
is `rtroute.selector.compile(text).matches`.
"""
from __future__ import annotations

import gc
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from rtroute.selector import MessageFacts, compile
from rtroute.selector import values as v
from rtroute.selector.errors import EvaluationError
from rtroute.selector.fields import field_resolver
from rtroute.selector.nodes import (
    Arithmetic,
    Between,
    BoolCast,
    Compare,
    Field,
    Folded,
    In,
    IsNull,
    Like,
    Literal,
    Logic,
    Negate,
    Node,
    Not,
    Property,
    XPath,
    XQuery,
)
from rtroute.selector.parser import parse

_COUNTRIES = ["AT", "BE", "BG", "CY", "CZ", "DE", "DK", "EE", "ES", "FI", "FR", "GR", "HR", "HU",
              "IE", "IT", "LT", "LU", "LV", "MT"]


@dataclass(frozen=True)
class Case:
    """One benchmark: a selector and the messages (header dicts) it is evaluated on, with
    ``bodies[i]`` as message ``i``'s body when given (XPATH reads it)."""

    name: str
    selector: str
    messages: tuple
    bodies: tuple = ()


def _headers(**extra: Any) -> dict[str, Any]:
    base = {"office": "New York", "price": 12, "region": "EU", "priority": 3, "type": "live",
            "product": "ACME-widget-2024-blue", "country": "SE", "app": "billing"}
    base.update(extra)
    return base


CASES = (
    Case("equality", "office = 'New York'",
         (_headers(), _headers(office="London"))),
    Case("5-clause AND/OR",
         "office = 'New York' AND price BETWEEN 10 AND 20 AND (region = 'EU' OR priority > 5) "
         "AND type <> 'test'",
         (_headers(), _headers(region="US", priority=7), _headers(price=25))),
    Case("LIKE", "product LIKE 'ACME-%-2024%'",
         (_headers(), _headers(product="ACME-gadget-2023"))),
    Case("IN (20 values)",
         "country IN (" + ", ".join(f"'{c}'" for c in _COUNTRIES) + ")",
         (_headers(), _headers(country="MT"))),
    Case("XPATH, 1 KB body",
         "XPATH '/order[@region=\"eu\"]/item[price > 10]' AND office = 'New York'",
         (_headers(), _headers()),
         (b'<order region="eu">' + b"".join(
             b"<item><sku>%d</sku><price>%d</price></item>" % (i, i) for i in range(24))
          + b"</order>",
          b'<order region="us"><item><price>50</price></item></order>')),
)


class AstInterpreter:
    """The baseline: walks the syntax tree of a selector for every evaluation.

    Args:
        text: a selector without mode prefixes.
        convert: evaluate as in `convert_string_expressions:` mode.
    """

    def __init__(self, text: str, convert: bool = False) -> None:
        self.tree = parse(text)
        self.convert = convert
        self._dispatch: dict[type, Callable[[Any, Mapping, MessageFacts | None], Any]] = {
            Literal: self._literal, Folded: self._literal, Property: self._property, Field: self._field,
            Negate: self._negate, Arithmetic: self._arithmetic, Compare: self._compare,
            Between: self._between, IsNull: self._is_null, Like: self._like, In: self._in,
            Not: self._not, Logic: self._logic, BoolCast: self._bool_cast,
            XPath: self._xpath, XQuery: self._xquery,
        }
        self._body: bytes | str | None = None  # of the evaluation under way
        # per-node state an interpreter prepares once: LIKE regexes, IN sets, field readers
        self._prepared: dict[int, Any] = {}
        stack = [self.tree]
        while stack:
            node = stack.pop()
            if isinstance(node, Like):
                fullmatch = re.compile(v.like_regex(node.pattern, node.escape),
                                       re.DOTALL).fullmatch
                self._prepared[id(node)] = lambda s, fullmatch=fullmatch: fullmatch(s) is not None
            elif isinstance(node, In):
                self._prepared[id(node)] = frozenset(node.values)
            elif isinstance(node, Field):
                self._prepared[id(node)] = field_resolver(node.name)
            stack.extend(node.children())

    def evaluate(self, headers: Mapping[str, Any] | None,
                 message: MessageFacts | None = None,
                 body: bytes | str | None = None) -> bool | None:
        """The three-valued result; None for unknown or an aborted evaluation."""
        self._body = body
        try:
            return self._eval(self.tree, headers or {}, message)
        except EvaluationError:
            return None

    def matches(self, headers: Mapping[str, Any] | None,
                message: MessageFacts | None = None,
                body: bytes | str | None = None) -> bool:
        """True when the selector evaluates to TRUE."""
        return self.evaluate(headers, message, body) is True

    def _xpath(self, node: XPath, headers: Mapping, message: Any) -> bool:
        return bool(node.evaluator(self._body))

    def _xquery(self, node: XQuery, headers: Mapping, message: Any) -> bool:
        return False

    def _eval(self, node: Node, headers: Mapping, message: MessageFacts | None) -> Any:
        return self._dispatch[type(node)](node, headers, message)

    def _literal(self, node: Literal, headers: Mapping, message: Any) -> Any:
        return node.value

    def _property(self, node: Property, headers: Mapping, message: Any) -> Any:
        return headers.get(node.name)

    def _field(self, node: Field, headers: Mapping, message: Any) -> Any:
        return self._prepared[id(node)](headers, message)

    def _negate(self, node: Negate, headers: Mapping, message: Any) -> Any:
        return v.negate(self._eval(node.operand, headers, message))

    def _arithmetic(self, node: Arithmetic, headers: Mapping, message: Any) -> Any:
        left = self._eval(node.left, headers, message)
        if left is None:
            return None
        right = self._eval(node.right, headers, message)
        return v.ARITHMETIC[node.op](left, right, self.convert)

    def _compare(self, node: Compare, headers: Mapping, message: Any) -> Any:
        left = self._eval(node.left, headers, message)
        if node.op == "=":
            return v.equal3(left, self._eval(node.right, headers, message), self.convert)
        if left is None:
            return None
        return v.order3(left, self._eval(node.right, headers, message), node.op, self.convert)

    def _between(self, node: Between, headers: Mapping, message: Any) -> Any:
        value = self._eval(node.operand, headers, message)
        low_op, high_op, stop = ("<", ">", True) if node.negated else (">=", "<=", False)
        first = None
        if value is not None:
            first = v.order3(value, self._eval(node.low, headers, message), low_op,
                             self.convert)
        if first is stop:
            return stop
        second = None
        if value is not None:
            second = v.order3(value, self._eval(node.high, headers, message), high_op,
                              self.convert)
        return v.or3(first, second) if node.negated else v.and3(first, second)

    def _is_null(self, node: IsNull, headers: Mapping, message: Any) -> Any:
        return self._eval(node.operand, headers, message) is None

    def _like(self, node: Like, headers: Mapping, message: Any) -> Any:
        return v.like3(self._eval(node.operand, headers, message), self._prepared[id(node)])

    def _in(self, node: In, headers: Mapping, message: Any) -> Any:
        return v.in3(self._eval(node.operand, headers, message), self._prepared[id(node)],
                     node.negated)

    def _not(self, node: Not, headers: Mapping, message: Any) -> Any:
        return v.not3(self._eval(node.operand, headers, message))

    def _logic(self, node: Logic, headers: Mapping, message: Any) -> Any:
        stop = node.op == "OR"  # OR stops at the first TRUE, AND at the first FALSE
        result: bool | None = not stop
        for operand in node.operands:
            value = self._eval(operand, headers, message)
            if value is stop:
                return stop
            if value is None:
                result = None
        return result

    def _bool_cast(self, node: BoolCast, headers: Mapping, message: Any) -> Any:
        return v.bool_cast3(self._eval(node.operand, headers, message))


def _rate(matches: Callable[..., bool], messages: list[tuple[Mapping, Any]],
          repeats: int = 3) -> float:
    """Best evaluations per second over `repeats` passes over `messages` (headers, body)."""
    best = 0.0
    for _ in range(repeats):
        gc.disable()
        start = time.perf_counter()
        for headers, body in messages:
            matches(headers, None, body)
        elapsed = time.perf_counter() - start
        gc.enable()
        best = max(best, len(messages) / elapsed)
    return best


def run(evaluations: int = 200_000, echo: Callable[[str], Any] = print) -> list[dict[str, Any]]:
    """Measure evaluations per second of each case, compiled and interpreted, and print a table.

    Args:
        evaluations: evaluations per measured pass (the best of three passes is kept).
        echo: where the table lines go.

    Returns:
        One row per case: case, selector, compiled_per_s, interpreted_per_s, speedup.
    """
    rows = []
    echo(f"selector evaluations per second ({evaluations:,} per pass, best of 3)")
    echo(f"{'case':<18} {'compiled/s':>14} {'AST interpreter/s':>18} {'speedup':>8}")
    for case in CASES:
        compiled = compile(case.selector).matches
        interpreter = AstInterpreter(case.selector).matches
        pairs = [(headers, case.bodies[i] if case.bodies else None)
                 for i, headers in enumerate(case.messages)]
        for headers, body in pairs:
            assert compiled(headers, None, body) == interpreter(headers, None, body), case.name
        messages = [pairs[i % len(pairs)] for i in range(evaluations)]
        compiled_rate = _rate(compiled, messages)
        interpreted_rate = _rate(interpreter, messages)
        row = {
            "case": case.name,
            "selector": case.selector,
            "compiled_per_s": compiled_rate,
            "interpreted_per_s": interpreted_rate,
            "speedup": compiled_rate / interpreted_rate,
        }
        rows.append(row)
        echo(f"{case.name:<18} {compiled_rate:>14,.0f} {interpreted_rate:>18,.0f} "
             f"{row['speedup']:>7.1f}x")
    return rows


def json_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The report rows of a run: compiled against interpreted evaluations per second."""
    return [{"name": "compiled selector", "value": r["compiled_per_s"], "unit": "evaluations/s",
             "baseline": "AST interpreter", "baseline_value": r["interpreted_per_s"],
             "ratio": r["speedup"], "ratio_means": "compiled speed-up", "case": r["case"],
             "selector": r["selector"]} for r in rows]


if __name__ == "__main__":  # pragma: no cover
    run()
