"""Compiles a selector's syntax tree to Python source, once, and that source to functions.

Two functions come out of each selector:

* `matches(headers, message=None, body=None) -> bool`, built from two boolean views of every
  condition, "is TRUE" and "is FALSE" (NOT swaps them, AND/OR map to Python's `and`/`or`), so that
  three-valued logic costs nothing at run time: a condition that is unknown is simply neither.
  Comparisons of a property with a number or string literal, IN, LIKE and BETWEEN get inline
  fast paths for the common value types, falling back to the exact Java semantics of
  `rtroute.selector.values` for anything else.
* `evaluate(headers, message=None, body=None) -> True | False | None`, the full three-valued
  result, straightforwardly built from the helpers in `values` (used by tests and tools, not on the hot
  path).

Both evaluate left to right and skip what Artemis skips, so that an evaluation that Artemis
aborts (arithmetic on a string, say) aborts here too, and only then.
"""
from __future__ import annotations

import builtins
import math
import warnings
from typing import Any, Callable

from rtroute.selector import values
from rtroute.selector.errors import EvaluationError, SelectorError
from rtroute.selector.fields import field_resolver
from rtroute.selector.nodes import (
    Arithmetic,
    Between,
    BoolCast,
    Compare,
    Field,
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
    may_fail,
)

_EMPTY: dict[str, Any] = {}
_ARITHMETIC_HELPERS = {"+": "_add", "-": "_sub", "*": "_mul", "/": "_div", "%": "_rem"}
_FLIPPED = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "="}
_NEGATED = {"<": ">=", ">": "<=", "<=": ">", ">=": "<"}

Function = Callable[..., Any]


def compile_functions(tree: Node, convert: bool, text: str) -> tuple[Function, Function, str]:
    """Generate and compile `matches` and `evaluate` for a parsed selector.

    Returns:
        (matches, evaluate, source): the two functions and the generated Python source.

    Raises:
        SelectorError: if Python cannot compile the generated code (a selector too large).
    """
    gen = _Codegen(convert)
    truth = gen.true(tree)
    value = gen.value(tree)
    source = (
        "def matches(h, message=None, body=None):\n"
        "    if h is None:\n"
        "        h = _EMPTY\n"
        "    try:\n"
        f"        return {truth}\n"
        "    except _EvaluationError:\n"
        "        return False\n"
        "\n"
        "def evaluate(h, message=None, body=None):\n"
        "    if h is None:\n"
        "        h = _EMPTY\n"
        "    try:\n"
        f"        return {value}\n"
        "    except _EvaluationError:\n"
        "        return None\n"
    )
    namespace = gen.namespace
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            code = builtins.compile(source, "<selector>", "exec")
        exec(code, namespace)  # noqa: S102 - source generated here from a checked syntax tree
    except (SyntaxError, RecursionError, MemoryError, ValueError) as exc:
        raise SelectorError(f"selector too large to compile ({exc.__class__.__name__})", 0,
                            text) from None
    return namespace["matches"], namespace["evaluate"], source


def identifiers(tree: Node) -> set[str]:
    """Every property and field name the selector reads."""
    names: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, Property):
            names.add(node.name)
        stack.extend(node.children())
    return names


def uses_fields(tree: Node) -> bool:
    """Whether the selector reads a standard (JMS*/AMQ*) field."""
    return _contains(tree, Field)


def uses_body(tree: Node) -> bool:
    """Whether the selector reads the message body (an XPATH term)."""
    return _contains(tree, XPath)


def _contains(tree: Node, kind: type) -> bool:
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, kind):
            return True
        stack.extend(node.children())
    return False


class _Codegen:
    """Builds Python expressions for the value, truth and falsity of syntax-tree nodes."""

    def __init__(self, convert: bool) -> None:
        self.convert = convert
        self.cv = "True" if convert else "False"
        self.temps = 0
        self.namespace: dict[str, Any] = {
            "__builtins__": {},
            "_EMPTY": _EMPTY,
            "_EvaluationError": EvaluationError,
            "_eq3": values.equal3,
            "_ord3": values.order3,
            "_between3": values.between3,
            "_and3": values.and3,
            "_or3": values.or3,
            "_and3_lazy": values.and3_lazy,
            "_or3_lazy": values.or3_lazy,
            "_not3": values.not3,
            "_cast3": values.bool_cast3,
            "_in3": values.in3,
            "_like3": values.like3,
            "_neg": values.negate,
            "_add": values.add,
            "_sub": values.subtract,
            "_mul": values.multiply,
            "_div": values.divide,
            "_rem": values.remainder,
            "str": str,
            "int": int,
        }
        self.bound: dict[tuple[str, Any], str] = {}

    # -- helpers -------------------------------------------------------------------------------

    def temp(self) -> str:
        self.temps += 1
        return f"_t{self.temps}"

    def bind(self, obj: Any, key: tuple[str, Any] | None = None) -> str:
        """Put `obj` in the namespace under a fresh name (shared for equal keys)."""
        if key is not None and key in self.bound:
            return self.bound[key]
        name = f"_k{len(self.namespace)}"
        self.namespace[name] = obj
        if key is not None:
            self.bound[key] = name
        return name

    def constant(self, value: Any) -> str:
        cls = value.__class__
        if value is None or cls is bool or cls is str or cls is int:
            return repr(value)
        if cls is float and math.isfinite(value):
            return f"({value!r})"
        return self.bind(value)

    # -- values (three-valued for conditions) --------------------------------------------------

    def value(self, node: Node) -> str:
        if isinstance(node, Literal):
            return self.constant(node.value)
        if isinstance(node, Field):
            resolver = self.bind(field_resolver(node.name), ("field", node.name))
            return f"{resolver}(h, message)"
        if isinstance(node, Property):
            return f"h.get({node.name!r})"
        if isinstance(node, Negate):
            return f"_neg({self.value(node.operand)})"
        if isinstance(node, Arithmetic):
            return self._lazy_binary(_ARITHMETIC_HELPERS[node.op], node.left, node.right, "")
        if isinstance(node, Compare):
            if node.op == "=":
                return f"_eq3({self.value(node.left)}, {self.value(node.right)}, {self.cv})"
            return self._lazy_binary("_ord3", node.left, node.right, f"{node.op!r}, ")
        if isinstance(node, Between):
            return self._between_value(node)
        if isinstance(node, IsNull):
            return self._condition(node, True)
        if isinstance(node, Like):
            matcher = self.bind(values.like_matcher(node.pattern, node.escape))
            return f"_like3({self.value(node.operand)}, {matcher})"
        if isinstance(node, In):
            members = self.bind(frozenset(node.values))
            return f"_in3({self.value(node.operand)}, {members}, {node.negated})"
        if isinstance(node, Not):
            return f"_not3({self.value(node.operand)})"
        if isinstance(node, Logic):
            helper = "_and3_lazy" if node.op == "AND" else "_or3_lazy"
            thunks = ", ".join(f"(lambda: {self.value(child)})" for child in node.operands)
            return f"{helper}({thunks})"
        if isinstance(node, BoolCast):
            return f"_cast3({self.value(node.operand)})"
        if isinstance(node, XPath):
            return f"{self.bind(node.evaluator)}(body)"
        if isinstance(node, XQuery):
            return "False"
        raise AssertionError(f"unknown node {node!r}")  # pragma: no cover

    def _conjunction_after_unknown(self, node: Logic, first: Node, rest: tuple[Node, ...],
                                   want: bool) -> str:
        """``first AND rest`` is TRUE (or ``first OR rest`` is FALSE) as Artemis decides it.

        Python's ``and`` skips the rest once ``first`` is not ``want``; Artemis skips it only
        when ``first`` is the opposite, and evaluates it after an unknown ``first``: an abort
        there fails the whole selector, even where another branch would have matched. So the
        unknown case evaluates the rest (for its aborts only: the answer is no either way).
        """
        t = self.temp()
        tail = rest[0] if len(rest) == 1 else Logic(node.op, rest, node.pos)
        probe = self.bind(_answer_no, ("probe", None))
        # the fast test first; when it failed, `first` is computed again to tell unknown from
        # FALSE, except where unknown needs a missing property (a comparison of properties
        # and literals is unknown only when one is NULL): then only if one is missing
        simple = isinstance(first, Compare) and all(
            isinstance(side, (Property, Literal)) for side in (first.left, first.right))
        missing = " or ".join(f"h.get({side.name!r}) is None"
                              for side in (first.left, first.right)
                              if isinstance(side, Property)) if simple else ""
        guard = f"({missing}) and " if missing else ""
        return (f"((({t} := {self._condition(first, want)}) and "
                f"{self._condition(tail, want)}) or (not {t} and {guard}"
                f"{self.value(first)} is None and {probe}({self.value(tail)})))")

    def _lazy_binary(self, helper: str, left: Node, right: Node, extra: str) -> str:
        """`helper(left, right, extra convert)`, not evaluating `right` when `left` is NULL if
        evaluating it could abort (Artemis returns NULL before looking at the right side)."""
        if may_fail(right):
            t = self.temp()
            return (f"(None if ({t} := {self.value(left)}) is None else "
                    f"{helper}({t}, {self.value(right)}, {extra}{self.cv}))")
        return f"{helper}({self.value(left)}, {self.value(right)}, {extra}{self.cv})"

    def _between_value(self, node: Between) -> str:
        x, first = self.temp(), self.temp()
        low, high = self.value(node.low), self.value(node.high)
        if node.negated:
            op1, op2, stop, combine = "<", ">", "True", "_or3"
        else:
            op1, op2, stop, combine = ">=", "<=", "False", "_and3"
        return (f"({stop} if ({first} := (None if ({x} := {self.value(node.operand)}) is None "
                f"else _ord3({x}, {low}, {op1!r}, {self.cv}))) is {stop} else "
                f"{combine}({first}, None if {x} is None else "
                f"_ord3({x}, {high}, {op2!r}, {self.cv})))")

    # -- truth and falsity ---------------------------------------------------------------------

    def true(self, node: Node) -> str:
        """A Python expression that is True exactly when `node` is TRUE."""
        return self._condition(node, True)

    def _condition(self, node: Node, want: bool) -> str:
        """A Python bool expression: True exactly when `node` is TRUE (`want`) or FALSE (not
        `want`); unknown gives False either way."""
        if isinstance(node, Logic):
            conjunction = (node.op == "AND") == want
            first, rest = node.operands[0], node.operands[1:]
            if conjunction and not isinstance(first, Logic) and any(map(may_fail, rest)):
                return self._conjunction_after_unknown(node, first, rest, want)
            if conjunction and any(map(may_fail, rest)):
                return f"({self.value(node)} is {want})"
            joiner = " and " if conjunction else " or "
            return "(" + joiner.join(self._condition(c, want) for c in node.operands) + ")"
        if isinstance(node, Not):
            return self._condition(node.operand, not want)
        if isinstance(node, Literal):
            return "True" if node.value is want else "False"
        if isinstance(node, XQuery):
            return "False" if want else "True"
        if isinstance(node, XPath):
            call = self.value(node)
            return call if want else f"(not {call})"
        if isinstance(node, BoolCast):
            if want:
                return f"({self.value(node.operand)} is True)"
            t = self.temp()
            return f"(({t} := {self.value(node.operand)}) is not None and {t} is not True)"
        if isinstance(node, IsNull):
            if isinstance(node.operand, Literal):  # `5 is None` would be a SyntaxWarning
                return str((node.operand.value is None) is want)
            return f"({self.value(node.operand)} is {'' if want else 'not '}None)"
        if isinstance(node, In):
            return self._in_condition(node, want)
        if isinstance(node, Like):
            return self._like_condition(node, want)
        if not self.convert:
            fast = None
            if isinstance(node, Compare):
                fast = self._compare_fast(node, want)
            elif isinstance(node, Between):
                fast = self._between_fast(node, want)
            if fast is not None:
                return fast
        return f"({self.value(node)} is {want})"

    def _in_condition(self, node: In, want: bool) -> str:
        members = self.bind(frozenset(node.values))
        t = self.temp()
        member = (want != node.negated)
        test = f"{t} in {members}" if member else f"{t} not in {members}"
        return (f"({test} if ({t} := {self.value(node.operand)}).__class__ is str else "
                f"{t} is not None and _in3({t}, {members}, {node.negated}) is {want})")

    def _like_condition(self, node: Like, want: bool) -> str:
        how, arg = values.like_plan(node.pattern, node.escape)
        matcher = self.bind(values.like_matcher(node.pattern, node.escape))
        t = self.temp()
        if how == "equals":
            test = f"{t} == {arg!r}"
        elif how == "prefix":
            test = f"{t}.startswith({arg!r})"
        elif how == "suffix":
            test = f"{t}.endswith({arg!r})"
        elif how == "contains":
            test = f"{arg!r} in {t}"
        elif how == "literals":
            test = self._literals_test(t, arg)
        else:
            test = f"{matcher}({t})"
        if not want:
            test = f"not ({test})"
        return (f"({test} if ({t} := {self.value(node.operand)}).__class__ is str else "
                f"{t} is not None and _like3({t}, {matcher}) is {want})")

    def _literals_test(self, t: str, texts: tuple[str, ...]) -> str:
        """`values.like_matcher` for a pattern without `_`, inline (as `_literals_matcher`)."""
        first, *middle, last = texts
        tests = [f"{t}.startswith({first!r})"] if first else []
        at = str(len(first))
        if middle:
            i = self.temp()
            for text in middle:
                tests.append(f"({i} := {t}.find({text!r}, {at})) >= 0")
                at = f"{i} + {len(text)}"
        if last or not middle:  # endswith('', at) holds once a find has found a place
            tests.append(f"{t}.endswith({last!r}, {at})")
        return "(" + " and ".join(tests) + ")"

    def _compare_fast(self, node: Compare, want: bool) -> str | None:
        """Inline code for `expr op literal` (or `literal op expr`) with a string, boolean or
        integer literal; None when no fast path applies."""
        left, right = node.left, node.right
        if isinstance(right, Literal) and not isinstance(left, Literal):
            expr, literal, literal_left = left, right.value, False
        elif isinstance(left, Literal) and not isinstance(right, Literal):
            expr, literal, literal_left = right, left.value, True
        else:
            return None
        cls = literal.__class__
        t = self.temp()
        value = self.value(expr)
        if node.op == "=":
            if cls is str or cls is bool:
                same = "==" if cls is str else "is"
                differ = "!=" if cls is str else "is not"
                lit = repr(literal)
                if want:
                    return f"({value} {same} {lit})"
                if literal_left:  # NULL on the right side of = is FALSE, not unknown
                    return f"({value} {differ} {lit})"
                return f"(({t} := {value}) is not None and {t} {differ} {lit})"
            if not isinstance(literal, int):
                return None
            lit = repr(int(literal))
            const = self.constant(literal)
            args = f"{const}, {t}" if literal_left else f"{t}, {const}"
            fast = f"{t} == {lit}" if want else f"{t} != {lit}"
            if literal_left and not want:
                slow = f"({t} is None or _eq3({args}, False) is False)"
            else:
                slow = f"{t} is not None and _eq3({args}, False) is {want}"
            return f"({fast} if ({t} := {value}).__class__ is int else {slow})"
        if not isinstance(literal, int) or cls is bool:
            return None
        op = _FLIPPED[node.op] if literal_left else node.op
        fast_op = op if want else _NEGATED[op]
        lit = repr(int(literal))
        const = self.constant(literal)
        args = f"{const}, {t}" if literal_left else f"{t}, {const}"
        return (f"({t} {fast_op} {lit} if ({t} := {value}).__class__ is int else "
                f"{t} is not None and _ord3({args}, {node.op!r}, False) is {want})")

    def _between_fast(self, node: Between, want: bool) -> str | None:
        """Inline code for `expr [NOT] BETWEEN int AND int`."""
        low, high = node.low, node.high
        if not (isinstance(low, Literal) and isinstance(high, Literal)):
            return None
        if not all(isinstance(v, int) and not isinstance(v, bool)
                   for v in (low.value, high.value)):
            return None
        lo, hi = repr(int(low.value)), repr(int(high.value))
        inside = f"{lo} <= {{t}} <= {hi}"
        outside = f"({{t}} < {lo} or {{t}} > {hi})"
        fast = inside if want != node.negated else outside
        t = self.temp()
        lo_const, hi_const = self.constant(low.value), self.constant(high.value)
        return (f"({fast.format(t=t)} if ({t} := {self.value(node.operand)}).__class__ is int "
                f"else {t} is not None and "
                f"_between3({t}, {lo_const}, {hi_const}, {node.negated}, False) is {want})")


def _answer_no(_value: Any) -> bool:
    """False, once its argument was evaluated (for the aborts that evaluation may raise)."""
    return False
