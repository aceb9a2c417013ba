"""Syntax tree of a parsed selector.

The parser desugars the negated forms exactly as Artemis builds them: `a <> b` is
`NOT (a = b)`, `a NOT LIKE p` is `NOT (a LIKE p)`, `a IS NOT NULL` is `NOT (a IS NULL)`;
`NOT IN` and `NOT BETWEEN` keep their own node because their unknown-handling differs from
`NOT` applied to the positive form.
"""
from __future__ import annotations

from typing import Any, Callable, Union

Value = Union[str, int, float, bool, None]


class Node:
    """Base of all nodes; `pos` is the 0-based offset of the construct in the selector text."""

    __slots__ = ("depth", "pos")
    boolean = False  # a BooleanExpression in Artemis's sense (may stand where a condition goes)

    def __init__(self, pos: int) -> None:
        self.pos = pos
        self.depth = 1  # height of the subtree; the parser sets it and bounds it

    def children(self) -> tuple[Node, ...]:
        """The direct sub-expressions, left to right."""
        return ()

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        fields = ", ".join(f"{s}={getattr(self, s)!r}" for s in self.__slots__)
        return f"{type(self).__name__}({fields})"


class Literal(Node):
    """A constant: string, integer (int or JLong), float, TRUE/FALSE, or NULL (value None)."""

    __slots__ = ("value",)

    def __init__(self, value: Value, pos: int) -> None:
        super().__init__(pos)
        self.value = value

    @property
    def boolean(self) -> bool:  # type: ignore[override]
        """TRUE, FALSE and NULL are boolean constants in Artemis; other literals are not."""
        return self.value is None or isinstance(self.value, bool)


class Folded(Literal):
    """A negative number written as `-literal`: a constant here, but an expression for the
    compile-time checks (Artemis does not fold it)."""

    __slots__ = ()


class Property(Node):
    """A message property (AMQP header) named by an identifier."""

    __slots__ = ("name",)

    def __init__(self, name: str, pos: int) -> None:
        super().__init__(pos)
        self.name = name


class Field(Property):
    """A standard field (JMS*/AMQ* name) read from the message facts, else from the headers."""

    __slots__ = ()


class Negate(Node):
    """Unary minus."""

    __slots__ = ("operand",)

    def __init__(self, operand: Node, pos: int) -> None:
        super().__init__(pos)
        self.operand = operand

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


class Arithmetic(Node):
    """`+ - * / %` on two operands."""

    __slots__ = ("left", "op", "right")

    def __init__(self, op: str, left: Node, right: Node, pos: int) -> None:
        super().__init__(pos)
        self.op = op
        self.left = left
        self.right = right

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)


class Compare(Node):
    """`= < > <= >=` (`<>` is parsed as NOT of `=`)."""

    __slots__ = ("left", "op", "right")
    boolean = True

    def __init__(self, op: str, left: Node, right: Node, pos: int) -> None:
        super().__init__(pos)
        self.op = op
        self.left = left
        self.right = right

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)


class Between(Node):
    """`x [NOT] BETWEEN low AND high`: Artemis's `x >= low AND x <= high` (or its negation
    `x < low OR x > high`), with `x` evaluated once."""

    __slots__ = ("high", "low", "negated", "operand")
    boolean = True

    def __init__(self, operand: Node, low: Node, high: Node, negated: bool, pos: int) -> None:
        super().__init__(pos)
        self.operand = operand
        self.low = low
        self.high = high
        self.negated = negated

    def children(self) -> tuple[Node, ...]:
        return (self.operand, self.low, self.high)


class IsNull(Node):
    """`x IS NULL` (`IS NOT NULL` is NOT of it)."""

    __slots__ = ("operand",)
    boolean = True

    def __init__(self, operand: Node, pos: int) -> None:
        super().__init__(pos)
        self.operand = operand

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


class Like(Node):
    """`x LIKE 'pattern' [ESCAPE 'c']` (`NOT LIKE` is NOT of it)."""

    __slots__ = ("escape", "operand", "pattern")
    boolean = True

    def __init__(self, operand: Node, pattern: str, escape: str | None, pos: int) -> None:
        super().__init__(pos)
        self.operand = operand
        self.pattern = pattern
        self.escape = escape

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


class In(Node):
    """`prop [NOT] IN ('a', 'b')`: unknown unless the property holds a string."""

    __slots__ = ("negated", "operand", "values")
    boolean = True

    def __init__(self, operand: Property, values: tuple[str, ...], negated: bool,
                 pos: int) -> None:
        super().__init__(pos)
        self.operand = operand
        self.values = values
        self.negated = negated

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


class Not(Node):
    """Logical NOT (three-valued: NOT unknown is unknown)."""

    __slots__ = ("operand",)
    boolean = True

    def __init__(self, operand: Node, pos: int) -> None:
        super().__init__(pos)
        self.operand = operand

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


class Logic(Node):
    """AND / OR over two or more operands (a left-associative chain, flattened)."""

    __slots__ = ("op", "operands")
    boolean = True

    def __init__(self, op: str, operands: tuple[Node, ...], pos: int) -> None:
        super().__init__(pos)
        self.op = op
        self.operands = operands

    def children(self) -> tuple[Node, ...]:
        return self.operands


class BoolCast(Node):
    """A property standing where a condition goes: its value if boolean, NULL if missing,
    FALSE otherwise."""

    __slots__ = ("operand",)
    boolean = True

    def __init__(self, operand: Property, pos: int) -> None:
        super().__init__(pos)
        self.operand = operand

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


class XPath(Node):
    """`XPATH 'expr'`: TRUE or FALSE (never unknown) from the message body parsed as XML."""

    __slots__ = ("evaluator", "expression")
    boolean = True

    def __init__(self, expression: str, evaluator: Callable[[Any], bool], pos: int) -> None:
        super().__init__(pos)
        self.expression = expression
        self.evaluator = evaluator  # compiled once, by `rtroute.selector.xpath.compile_xpath`


class XQuery(Node):
    """`XQUERY 'expr'`: parsed, never checked, always FALSE (so `NOT XQUERY 'x'` is TRUE), as
    Artemis's XQueryExpression."""

    __slots__ = ("expression",)
    boolean = True

    def __init__(self, expression: str, pos: int) -> None:
        super().__init__(pos)
        self.expression = expression


def may_fail(node: Node) -> bool:
    """Whether evaluating `node` can abort the evaluation (Artemis throws and does not match).

    Arithmetic on non-numbers and ordering of incomparable values (binary, arrays, tables)
    abort; literals and property look-ups never do.
    """
    if isinstance(node, (Literal, Property)):
        return False
    if isinstance(node, Arithmetic):
        return True
    if isinstance(node, Compare) and node.op != "=":
        return True
    if isinstance(node, Between):
        return True
    return any(may_fail(child) for child in node.children())
