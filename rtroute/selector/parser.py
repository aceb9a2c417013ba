"""Recursive-descent parser: Artemis's grammar, precedence and compile-time checks.

Precedence, loosest first (as in Artemis's StrictParser.jj, which departs from SQL-92 in two
places: `=`/`<>`/`IS NULL` bind looser than `<`/`LIKE`/`BETWEEN`/`IN`, and `NOT` is a unary
operator binding tighter than any comparison, so `NOT a = 2` is `(NOT a) = 2`):

    OR
    AND
    =  <>  IS [NOT] NULL
    <  >  <=  >=  [NOT] LIKE  [NOT] BETWEEN  [NOT] IN
    +  -
    *  /  %
    unary + - NOT, XPATH 'expr', XQUERY 'expr'
    literal, identifier, ( ... )

Rejected at compile time, as Artemis does: a string, boolean or NULL literal (or a condition)
beside `<`, `>`, `<=`, `>=` or in `BETWEEN`; NULL beside `=`/`<>`; a TRUE/FALSE/NULL literal
compared with a non-boolean literal; an `IN` whose left side is not a property; an `ESCAPE` that
is not one character; a selector, an AND/OR operand or a NOT operand that is neither a
condition nor a property; and an XPATH expression that the JDK's XPath compiler refuses.
"""
from __future__ import annotations

from rtroute.selector import lexer
from rtroute.selector.errors import SelectorError
from rtroute.selector.fields import STANDARD_FIELDS
from rtroute.selector.lexer import EOF, FLOAT, IDENT, INTEGER, KEYWORD, OP, QUOTED_IDENT, STRING
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
from rtroute.selector.values import INT_MAX, INT_MIN, LONG_MAX, LONG_MIN, JLong, negate

MAX_DEPTH = 50
"""Deepest nesting accepted: of parentheses and unary operators, and of the syntax tree (a
left-associative chain like `a + b + c` nests one level per operator; AND/OR chains do not)."""

_COMPARISON_OPS = ("<", ">", "<=", ">=")


def parse(text: str, offset: int = 0, hyphenated: bool = False) -> Node:
    """Parse a (non-empty) selector into a boolean syntax tree.

    Args:
        text: the selector text; error positions are offsets into it.
        offset: where the expression starts (after any mode prefixes).
        hyphenated: allow `-` inside identifiers.

    Raises:
        SelectorError: on any malformed or rejected selector.
    """
    return _Parser(text, offset, hyphenated).selector()


def describe(node: Node) -> str:
    """How a node is named in error messages."""
    if isinstance(node, Literal):
        value = node.value
        if value is None:
            return "NULL"
        if value is True:
            return "TRUE"
        if value is False:
            return "FALSE"
        if isinstance(value, str):
            return f"the string literal {_quote(value)}"
        return f"the number {value}"
    if isinstance(node, Property):
        return f"the identifier {node.name!r}"
    if isinstance(node, Arithmetic):
        return f"an arithmetic expression ('{node.op}')"
    if isinstance(node, Negate):
        return "an arithmetic expression (unary '-')"
    return "a condition"


def _quote(text: str) -> str:
    if len(text) > 20:
        text = text[:17] + "..."
    return "'" + text.replace("'", "''") + "'"


class _Parser:
    """A recursive-descent parser over the lexer's tokens.

    Size: one method per rule of the JMS/SQL-92 selector grammar.
    """

    def __init__(self, text: str, offset: int, hyphenated: bool) -> None:
        self.text = text
        self.tokens = lexer.tokenize(text, offset, hyphenated)
        self.index = 0
        self.nesting = 0

    # -- token helpers -------------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> lexer.Token:
        return self.tokens[min(self.index + ahead, len(self.tokens) - 1)]

    def advance(self) -> lexer.Token:
        token = self.tokens[self.index]
        if token.kind != EOF:
            self.index += 1
        return token

    def at(self, kind: str, value: str | None = None) -> bool:
        token = self.tokens[self.index]
        return token.kind == kind and (value is None or token.value == value)

    def error(self, reason: str, position: int) -> SelectorError:
        return SelectorError(reason, position, self.text)

    def unexpected(self, expected: str, token: lexer.Token | None = None) -> SelectorError:
        token = token or self.peek()
        previous = self.tokens[self.index - 1] if self.index > 0 else None
        after = ""
        if previous is not None and previous.kind in (OP, KEYWORD):
            after = f" after {previous.describe()}"
        return self.error(f"expected {expected}{after} but found {token.describe()}",
                          token.start)

    def expect_keyword(self, word: str, expected: str) -> lexer.Token:
        if not self.at(KEYWORD, word):
            raise self.unexpected(expected)
        return self.advance()

    def expect_op(self, op: str, expected: str) -> lexer.Token:
        if not self.at(OP, op):
            raise self.unexpected(expected)
        return self.advance()

    # -- tree helpers --------------------------------------------------------------------------

    def make(self, node: Node) -> Node:
        """Record the subtree height and refuse trees deeper than MAX_DEPTH."""
        children = node.children()
        if children:
            node.depth = 1 + max(child.depth for child in children)
            if node.depth > MAX_DEPTH:
                raise self.error(f"selector nested too deeply (more than {MAX_DEPTH} levels)",
                                 node.pos)
        return node

    def enter(self, position: int) -> None:
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            raise self.error(f"selector nested too deeply (more than {MAX_DEPTH} levels)",
                             position)

    def leave(self) -> None:
        self.nesting -= 1

    def as_condition(self, node: Node, where: str) -> Node:
        """Artemis's asBooleanExpression: conditions pass, properties are cast, others fail."""
        if node.boolean:
            return node
        if isinstance(node, Property):
            return self.make(BoolCast(node, node.pos))
        raise self.error(f"expected a condition {where} but found {describe(node)}", node.pos)

    def check_orderable(self, node: Node, op: str) -> None:
        """checkLessThanOperand: only numeric expressions beside < > <= >= and BETWEEN."""
        if isinstance(node, Literal):
            value = node.value
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return
        elif not node.boolean:
            return
        raise self.error(
            f"{describe(node)} cannot be compared with {op}: expected a numeric expression "
            f"or an identifier", node.pos)

    def check_equatable(self, left: Node, right: Node, op_token: lexer.Token) -> None:
        """checkEqualOperand and checkEqualOperandCompatibility for = and <>."""
        for node in (left, right):
            if isinstance(node, Literal) and node.value is None:
                raise self.error(
                    f"NULL cannot be compared with '{op_token.value}': use IS NULL or "
                    f"IS NOT NULL", node.pos)
        # a folded negative number is an expression in Artemis, not a constant
        if type(left) is Literal and type(right) is Literal and left.boolean \
                and not right.boolean:
            raise self.error(
                f"{describe(left)} cannot be compared with {describe(right)}", right.pos)

    # -- grammar -------------------------------------------------------------------------------

    def selector(self) -> Node:
        if self.at(EOF):
            raise self.unexpected("an expression")
        node = self.or_expr()
        if not self.at(EOF):
            raise self.unexpected("an operator (such as AND, OR, =, <, LIKE) or end of input")
        return self.as_condition(node, "for the whole selector")

    def or_expr(self) -> Node:
        node = self.and_expr()
        if not self.at(KEYWORD, "OR"):
            return node
        operands = [self.as_condition(node, "before OR")]
        position = node.pos
        while self.at(KEYWORD, "OR"):
            self.advance()
            operands.append(self.as_condition(self.and_expr(), "after OR"))
        return self.make(Logic("OR", tuple(operands), position))

    def and_expr(self) -> Node:
        node = self.equality()
        if not self.at(KEYWORD, "AND"):
            return node
        operands = [self.as_condition(node, "before AND")]
        position = node.pos
        while self.at(KEYWORD, "AND"):
            self.advance()
            operands.append(self.as_condition(self.equality(), "after AND"))
        return self.make(Logic("AND", tuple(operands), position))

    def equality(self) -> Node:
        left = self.comparison()
        while True:
            token = self.peek()
            if token.kind == OP and token.value in ("=", "<>"):
                self.advance()
                right = self.comparison()
                self.check_equatable(left, right, token)
                node: Node = self.make(Compare("=", left, right, left.pos))
                if token.value == "<>":
                    node = self.make(Not(node, left.pos))
                left = node
            elif token.kind == KEYWORD and token.value == "IS":
                self.advance()
                negated = False
                if self.at(KEYWORD, "NOT"):
                    self.advance()
                    negated = True
                self.expect_keyword("NULL", "NULL or NOT NULL")
                left = self.make(IsNull(left, left.pos))
                if negated:
                    left = self.make(Not(left, left.pos))
            else:
                return left

    def comparison(self) -> Node:
        left = self.additive()
        while True:
            token = self.peek()
            if token.kind == OP and token.value in _COMPARISON_OPS:
                self.advance()
                right = self.additive()
                self.check_orderable(left, token.value)
                self.check_orderable(right, token.value)
                left = self.make(Compare(token.value, left, right, left.pos))
                continue
            negated = False
            if token.kind == KEYWORD and token.value == "NOT":
                following = self.peek(1)
                if following.kind != KEYWORD or following.value not in ("LIKE", "BETWEEN", "IN"):
                    self.advance()
                    raise self.unexpected("LIKE, BETWEEN or IN", following)
                self.advance()
                negated = True
                token = self.peek()
            if token.kind != KEYWORD:
                return left
            if token.value == "LIKE":
                self.advance()
                left = self.like(left, negated)
            elif token.value == "BETWEEN":
                self.advance()
                left = self.between(left, negated)
            elif token.value == "IN":
                self.advance()
                left = self.in_list(left, negated)
            else:
                return left

    def like(self, operand: Node, negated: bool) -> Node:
        if not self.at(STRING):
            raise self.unexpected("a string literal (the pattern)")
        pattern = self.advance().value
        escape = None
        if self.at(KEYWORD, "ESCAPE"):
            self.advance()
            if not self.at(STRING):
                raise self.unexpected("a string literal of one character (the escape)")
            escape_token = self.advance()
            escape = escape_token.value
            if len(escape) != 1:
                raise self.error(
                    f"expected an ESCAPE of exactly one character but found "
                    f"{len(escape)} characters", escape_token.start)
        assert isinstance(pattern, str)
        node: Node = self.make(Like(operand, pattern, escape, operand.pos))
        if negated:
            node = self.make(Not(node, operand.pos))
        return node

    def between(self, operand: Node, negated: bool) -> Node:
        low = self.additive()
        self.expect_keyword("AND", "AND (BETWEEN low AND high)")
        high = self.additive()
        for node in (operand, low, high):
            self.check_orderable(node, "BETWEEN")
        return self.make(Between(operand, low, high, negated, operand.pos))

    def in_list(self, operand: Node, negated: bool) -> Node:
        if not isinstance(operand, Property):
            raise self.error(
                f"expected an identifier before IN but found {describe(operand)}", operand.pos)
        self.expect_op("(", "'(' to open the IN list")
        values: list[str] = []
        while True:
            if not self.at(STRING):
                raise self.unexpected("a string literal (IN lists hold string literals only)")
            value = self.advance().value
            assert isinstance(value, str)
            values.append(value)
            if self.at(OP, ","):
                self.advance()
                continue
            self.expect_op(")", "',' or ')' in the IN list")
            break
        return self.make(In(operand, tuple(values), negated, operand.pos))

    def additive(self) -> Node:
        left = self.multiplicative()
        while self.peek().kind == OP and self.peek().value in ("+", "-"):
            op = self.advance().value
            assert isinstance(op, str)
            right = self.multiplicative()
            left = self.make(Arithmetic(op, left, right, left.pos))
        return left

    def multiplicative(self) -> Node:
        left = self.unary()
        while self.peek().kind == OP and self.peek().value in ("*", "/", "%"):
            op = self.advance().value
            assert isinstance(op, str)
            right = self.unary()
            left = self.make(Arithmetic(op, left, right, left.pos))
        return left

    def unary(self, negated: bool = False) -> Node:
        token = self.peek()
        if token.kind == OP and token.value in ("+", "-"):
            self.advance()
            self.enter(token.start)
            operand = self.unary(negated=token.value == "-")
            self.leave()
            if token.value == "+":
                return operand  # Artemis's unary plus returns its operand unchanged
            return self.negation(operand, token.start)
        if token.kind == KEYWORD and token.value == "NOT":
            self.advance()
            self.enter(token.start)
            operand = self.as_condition(self.unary(), "after NOT")
            self.leave()
            return self.make(Not(operand, token.start))
        if token.kind == KEYWORD and token.value in ("XPATH", "XQUERY"):
            return self.xml_query(token)
        node = self.primary()
        if isinstance(node, Literal) and type(node.value) is int and node.value > LONG_MAX \
                and not negated:
            raise self.error("integer literal out of the 64-bit range", node.pos)
        return node

    def xml_query(self, keyword: lexer.Token) -> Node:
        """`XPATH 'expr'` (compiled now: Artemis refuses a bad one with the selector) or
        `XQUERY 'expr'` (never looked at)."""
        self.advance()
        if not self.at(STRING):
            raise self.unexpected(f"a string literal (the {keyword.value} expression)")
        literal = self.advance()
        expression = str(literal.value)
        if keyword.value == "XQUERY":
            return XQuery(expression, keyword.start)
        from rtroute.selector.xpath import XPathCompileError, compile_xpath

        try:
            evaluator = compile_xpath(expression)
        except XPathCompileError as exc:
            raise self.error(str(exc), literal.start) from None
        return XPath(expression, evaluator, keyword.start)

    def negation(self, operand: Node, position: int) -> Node:
        """Unary minus; on a numeric literal it is folded, keeping Java's Integer/Long kind."""
        if isinstance(operand, Literal) and not isinstance(operand.value, (bool, str)) \
                and operand.value is not None:
            value = operand.value
            if type(value) is int and value > LONG_MAX:
                # 9223372036854775808 is valid only here: its negation is Long.MIN_VALUE
                return Folded(JLong(LONG_MIN), position)
            return Folded(negate(value), position)
        return self.make(Negate(operand, position))

    def primary(self) -> Node:
        token = self.peek()
        if token.kind == STRING:
            self.advance()
            return Literal(token.value, token.start)
        if token.kind == INTEGER:
            self.advance()
            value = token.value
            assert isinstance(value, int)
            if not INT_MIN <= value <= INT_MAX and value <= LONG_MAX:
                value = JLong(value)
            return Literal(value, token.start)
        if token.kind == FLOAT:
            self.advance()
            return Literal(token.value, token.start)
        if token.kind == KEYWORD and token.value in ("TRUE", "FALSE", "NULL"):
            self.advance()
            constant: bool | None = {"TRUE": True, "FALSE": False, "NULL": None}[
                str(token.value)]
            return Literal(constant, token.start)
        if token.kind in (IDENT, QUOTED_IDENT):
            self.advance()
            name = str(token.value)
            if name in STANDARD_FIELDS:
                return Field(name, token.start)
            return Property(name, token.start)
        if token.kind == OP and token.value == "(":
            self.advance()
            self.enter(token.start)
            node = self.or_expr()
            self.leave()
            if not self.at(OP, ")"):
                raise self.unexpected(f"')' to close the '(' at position {token.start}")
            self.advance()
            return node
        raise self.unexpected("an expression (a literal, an identifier or '(')")
