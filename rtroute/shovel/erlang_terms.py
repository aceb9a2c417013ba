"""A small, strict parser for the Erlang terms of ``rabbitmq.config`` / ``advanced.config``.

It reads what ``file:consult/1`` reads for a config file and nothing more: atoms (bare and
'quoted'), strings ``"..."`` (adjacent strings concatenate), binaries ``<<"...">>`` and
``<<1,2,3>>``, integers (``-5``, ``16#ff``, ``1_000``, ``$c``), floats, tuples, lists and
``%`` comments; every term ends with a dot. Anything else (variables, maps, funs, improper
lists) is an :class:`ErlangSyntaxError` with the line and column where it starts. So is
hostile input, in time linear in its length: text over 4 MiB, nesting deeper than
:data:`~rtroute.config.lines.MAX_DEPTH`, escapes beyond the last character.

:func:`parse` returns :class:`Term` nodes that keep their position, for importers that report
errors by line; :func:`to_python` turns them into plain values: :class:`Atom` (a ``str``),
``str`` for strings, ``bytes`` for binaries, ``int``, ``float``, ``tuple`` and ``list``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rtroute.config.lines import MAX_DEPTH, ConfigError, check_size, shown

__all__ = ["Atom", "ErlangSyntaxError", "Term", "parse", "parse_one", "to_python"]


class ErlangSyntaxError(ConfigError):
    """The text is not a valid config term.

    Attributes:
        line: 1-based line of the offending character (for an unterminated string or
            binary: of its opening quote).
        column: 1-based column on that line.
        message: what is wrong.
    """

    def __init__(self, line: int, column: int, message: str, path: str | None = None):
        self.column = column
        super().__init__(message, line, path)

    def __str__(self) -> str:
        return f"{self.path or '<erlang>'}:{self.line}:{self.column}: {self.message}"


class Atom(str):
    """An Erlang atom: a ``str`` that remembers it was an atom, not a string."""

    def __repr__(self) -> str:
        return f"Atom({str.__repr__(self)})"


@dataclass
class Term:
    """One parsed term and where it starts.

    Attributes:
        kind: ``atom``, ``string``, ``binary``, ``integer``, ``float``, ``tuple`` or ``list``.
        value: the atom or string text, the binary's bytes, the number, or the list of
            element :class:`Term` for tuples and lists.
        line: 1-based line of the term's first character.
        column: 1-based column of the term's first character.
    """

    __slots__ = ("column", "kind", "line", "value")  # a config holds many small terms

    kind: str
    value: Any
    line: int
    column: int

    @property
    def items(self) -> list[Term]:
        """Elements of a tuple or list (empty for scalars)."""
        return self.value if self.kind in ("tuple", "list") else []

    def is_atom(self, name: str | None = None) -> bool:
        """Whether this is an atom (named ``name``, when given)."""
        return self.kind == "atom" and (name is None or self.value == name)

    def describe(self) -> str:
        """A short form for error messages: ``atom 'foo'``, ``a list``, ``integer 5``.

        Text that may hold a password (a URI) is masked, and long values are cut.
        """
        if self.kind == "atom":
            return f"atom {shown(str(self.value))}"
        if self.kind == "integer":
            return f"integer {_int_text(self.value)}"
        if self.kind == "float":
            return f"float {self.value!r}"
        if self.kind == "string":
            return f"string {shown(self.value)}"
        if self.kind == "binary":
            return f"binary <<{shown(self.value)}>>"
        return f"a {self.kind}"


def _int_text(value: int) -> str:
    """``str(value)``, but short (and possible: Python refuses to print a huge integer)."""
    if value.bit_length() <= 64:
        return str(value)
    return f"of {value.bit_length()} bits"


_ESCAPES = {
    "b": "\b", "d": "\x7f", "e": "\x1b", "f": "\f", "n": "\n", "r": "\r", "s": " ",
    "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"',
}
_ATOM_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@")
_DIGITS36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_DECIMAL = "0123456789"
_DECIMAL_ONE = set(_DECIMAL)  # one digit, never the empty string
_LOWER = set("abcdefghijklmnopqrstuvwxyz")
_MAX_CHAR = 0x10FFFF


class _Parser:
    def __init__(self, text: str, path: str | None):
        self.s = text
        self.i = 0
        self.line = 1
        self.col = 1
        self.path = path
        self.depth = 0

    # -- position and errors

    def error(self, message: str, line: int | None = None, col: int | None = None):
        return ErlangSyntaxError(
            self.line if line is None else line, self.col if col is None else col, message,
            self.path,
        )

    def peek(self, n: int = 1) -> str:
        return self.s[self.i : self.i + n]

    def advance(self, n: int = 1) -> str:
        out = self.s[self.i : self.i + n]
        for c in out:
            if c == "\n":
                self.line += 1
                self.col = 1
            else:
                self.col += 1
        self.i += n
        return out

    def skip_blank(self) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t\r\n\f\v":
                self.advance()
            elif c == "%":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.advance()
            else:
                return

    def expect(self, token: str, what: str) -> None:
        self.skip_blank()
        if self.peek(len(token)) != token:
            found = self.peek() or "end of input"
            raise self.error(f"expected {what}, found {found!r}")
        self.advance(len(token))

    # -- terms

    def terms(self) -> list[Term]:
        out: list[Term] = []
        while True:
            self.skip_blank()
            if self.i >= len(self.s):
                return out
            out.append(self.term())
            self.skip_blank()
            if self.peek() != ".":
                found = self.peek() or "end of input"
                raise self.error(f"expected '.' after the term, found {found!r}")
            self.advance()

    def term(self) -> Term:
        self.skip_blank()
        line, col = self.line, self.col
        c = self.peek()
        if not c:
            raise self.error("unexpected end of input, expected a term")
        if c in "{[":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise self.error(f"lists and tuples are nested more than {MAX_DEPTH} levels deep")
            self.advance()
            kind, close = ("tuple", "}") if c == "{" else ("list", "]")
            items = self.sequence(close, kind)
            self.depth -= 1
            return Term(kind, items, line, col)
        if self.peek(2) == "<<":
            self.advance(2)
            return Term("binary", self.binary(line, col), line, col)
        if c == '"':
            texts = [self.string('"', line, col)]
            while True:  # "a" "b" is one string in Erlang
                self.skip_blank()
                if self.peek() != '"':
                    break
                texts.append(self.string('"', self.line, self.col))
            return Term("string", "".join(texts), line, col)
        if c == "'":
            return Term("atom", Atom(self.string("'", line, col)), line, col)
        if c == "$":
            self.advance()
            return Term("integer", self.char_literal(line, col), line, col)
        if c in _DECIMAL_ONE or (c in "-+" and self.s[self.i + 1 : self.i + 2] in _DECIMAL_ONE):
            return self.number(line, col)
        if c in _LOWER:
            start = self.i
            while self.i < len(self.s) and self.s[self.i] in _ATOM_CHARS:
                self.advance()
            return Term("atom", Atom(self.s[start : self.i]), line, col)
        if c.isupper() or c == "_":
            raise self.error("variables are not allowed in a config file")
        if c == "#":
            raise self.error("maps and records are not supported in a config file")
        raise self.error(f"unexpected character {c!r}")

    def sequence(self, close: str, what: str) -> list[Term]:
        items: list[Term] = []
        self.skip_blank()
        if self.peek() == close:
            self.advance()
            return items
        while True:
            items.append(self.term())
            self.skip_blank()
            c = self.peek()
            if c == ",":
                self.advance()
            elif c == close:
                self.advance()
                return items
            elif c == "|" and close == "]":
                raise self.error("improper lists ([H | T]) are not supported")
            else:
                found = c or "end of input"
                raise self.error(f"expected ',' or '{close}' in {what}, found {found!r}")

    def string(self, quote: str, line: int, col: int) -> str:
        self.advance()
        out: list[str] = []
        what = "string" if quote == '"' else "quoted atom"
        while True:
            if self.i >= len(self.s):
                raise self.error(f"unterminated {what}", line, col)
            c = self.s[self.i]
            if c == quote:
                self.advance()
                return "".join(out)
            if c == "\\":
                out.append(self.escape(line, col, what))
            else:
                out.append(self.advance())

    def escape(self, line: int, col: int, what: str) -> str:
        esc_line, esc_col = self.line, self.col
        self.advance()  # backslash
        if self.i >= len(self.s):
            raise self.error(f"unterminated {what}", line, col)
        c = self.s[self.i]
        if c in _ESCAPES:
            self.advance()
            return _ESCAPES[c]
        if c in "01234567":
            digits = ""
            while len(digits) < 3 and self.peek() and self.peek() in "01234567":
                digits += self.advance()
            return chr(int(digits, 8))
        if c == "x":
            self.advance()
            if self.peek() == "{":
                self.advance()
                end = self.s.find("}", self.i)
                digits = self.s[self.i : end] if end >= 0 else ""
                if not digits or any(d not in "0123456789abcdefABCDEF" for d in digits):
                    raise self.error("bad \\x{...} escape", esc_line, esc_col)
                self.advance(len(digits) + 1)
                return self.character(int(digits, 16), esc_line, esc_col)
            digits = self.peek(2)
            if len(digits) < 2 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.error("bad \\xHH escape", esc_line, esc_col)
            self.advance(2)
            return chr(int(digits, 16))
        if c == "^":
            self.advance()
            ctrl = self.advance()
            if not ctrl:
                raise self.error(f"unterminated {what}", line, col)
            return chr(ord(ctrl) % 32)
        if c == "\n":
            raise self.error(f"bad escape '\\' at end of line in {what}", esc_line, esc_col)
        # Erlang keeps an unknown escaped character as itself.
        return self.advance()

    def character(self, code: int, line: int, col: int) -> str:
        """The character of an escape's code point; Python (and UTF-8) stop at 10FFFF."""
        if code > _MAX_CHAR:
            raise self.error(f"bad \\x{{...}} escape: above the last character {_MAX_CHAR:X}",
                             line, col)
        if 0xD800 <= code <= 0xDFFF:
            raise self.error("bad \\x{...} escape: a UTF-16 surrogate is not a character",
                             line, col)
        return chr(code)

    def char_literal(self, line: int, col: int) -> int:
        if self.i >= len(self.s):
            raise self.error("expected a character after '$'", line, col)
        if self.s[self.i] == "\\":
            return ord(self.escape(line, col, "character literal"))
        return ord(self.advance())

    def number(self, line: int, col: int) -> Term:
        start = self.i
        sign = 1
        if self.peek() in "-+":
            sign = -1 if self.advance() == "-" else 1
        digits = self.digits("0123456789")
        if self.peek() == "#":
            base = int(digits) if len(digits) <= 2 else 0
            if not 2 <= base <= 36:
                got = digits if len(digits) <= 4 else digits[:4] + "..."
                raise self.error(f"integer base must be 2..36, got {got}", line, col)
            self.advance()
            allowed = _DIGITS36[:base] + _DIGITS36[10:base].upper()
            value = self.digits(allowed)
            if not value:
                raise self.error(f"expected base-{base} digits after '#'")
            return Term("integer", sign * self.integer(value, base, line, col), line, col)
        if self.peek() == "." and self.s[self.i + 1 : self.i + 2] in _DECIMAL_ONE:
            self.advance()
            frac = self.digits("0123456789")
            exp = ""
            if self.peek() in ("e", "E"):
                self.advance()
                exp_sign = self.advance() if self.peek() in "-+" else ""
                exp_digits = self.digits("0123456789")
                if not exp_digits:
                    raise self.error("expected exponent digits")
                exp = f"e{exp_sign}{exp_digits}"
            number = float(f"{digits}.{frac}{exp}")
            if math.isinf(number):
                raise self.error("float out of range", line, col)
            return Term("float", sign * number, line, col)
        if self.peek() and (self.peek().isalpha() or self.peek() == "_"):
            raise self.error(
                f"bad number {self.s[start:self.i + 1]!r}", line, col
            )
        return Term("integer", sign * self.integer(digits, 10, line, col), line, col)

    def integer(self, digits: str, base: int, line: int, col: int) -> int:
        try:
            return int(digits, base)
        except ValueError:  # more digits than Python converts (a config needs no bignum)
            raise self.error(f"integer of {len(digits)} digits is too long", line, col) from None

    def digits(self, allowed: str) -> str:
        out = []
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in allowed:
                out.append(self.advance())
            elif c == "_" and out and self.s[self.i + 1 : self.i + 2] not in ("", "_") and (
                self.s[self.i + 1] in allowed
            ):
                self.advance()
            else:
                break
        return "".join(out)

    def binary(self, line: int, col: int) -> bytes:
        out = bytearray()
        self.skip_blank()
        if self.peek(2) == ">>":
            self.advance(2)
            return bytes(out)
        while True:
            self.skip_blank()
            if self.i >= len(self.s):
                raise self.error("unterminated binary", line, col)
            seg_line, seg_col = self.line, self.col
            c = self.peek()
            if c == '"':
                text = self.string('"', seg_line, seg_col)
                out += self.segment_type(text, seg_line, seg_col)
            elif c in _DECIMAL_ONE or c == "$":
                if c == "$":
                    self.advance()
                    value = self.char_literal(seg_line, seg_col)
                else:
                    term = self.number(seg_line, seg_col)
                    if term.kind != "integer":
                        raise self.error("binary segments must be integers or strings",
                                         seg_line, seg_col)
                    value = term.value
                if self.peek() == "/":
                    self.advance()
                    self.type_name()
                if not 0 <= value <= 255:
                    raise self.error(f"binary byte out of range: {_int_text(value)}", seg_line,
                                 seg_col)
                out.append(value)
            else:
                found = c or "end of input"
                raise self.error(f"expected a string or byte in binary, found {found!r}")
            self.skip_blank()
            if self.peek(2) == ">>":
                self.advance(2)
                return bytes(out)
            if self.peek() != ",":
                found = self.peek() or "end of input"
                if not self.peek():
                    raise self.error("unterminated binary", line, col)
                raise self.error(f"expected ',' or '>>' in binary, found {found!r}")
            self.advance()

    def segment_type(self, text: str, line: int, col: int) -> bytes:
        if self.peek() != "/":
            if any(ord(ch) > 255 for ch in text):
                raise self.error("binary string has characters above 255; add /utf8", line, col)
            return text.encode("latin-1")
        self.advance()
        kind = self.type_name()
        if kind in ("utf8", "binary"):
            try:
                return text.encode("utf-8")
            except UnicodeEncodeError:
                raise self.error("binary string is not valid Unicode", line, col) from None
        raise self.error(f"unsupported binary segment type '{kind}'", line, col)

    def type_name(self) -> str:
        start = self.i
        while self.i < len(self.s) and (self.s[self.i].isalnum() or self.s[self.i] in "-_"):
            self.advance()
        return self.s[start : self.i]


def parse(text: str, path: str | None = None) -> list[Term]:
    """Every dot-terminated term of ``text``, as :class:`Term` nodes.

    Raises:
        ErlangSyntaxError: with the line and column of the first error.
        ConfigError: the text is longer than 4 MiB.
    """
    check_size(text, path)
    return _Parser(text, path).terms()


def parse_one(text: str, path: str | None = None) -> Term:
    """The single term of a config file (``[...].``).

    Raises:
        ErlangSyntaxError: on a syntax error, or when the text holds no term or several.
    """
    terms = parse(text, path)
    if len(terms) != 1:
        line = terms[1].line if len(terms) > 1 else 1
        col = terms[1].column if len(terms) > 1 else 1
        found = "no term" if not terms else f"{len(terms)} terms"
        raise ErlangSyntaxError(line, col, f"expected exactly one term, found {found}", path)
    return terms[0]


def to_python(term: Term) -> Any:
    """The plain Python value of a term (tuples stay tuples, lists stay lists)."""
    if term.kind == "tuple":
        return tuple(to_python(t) for t in term.value)
    if term.kind == "list":
        return [to_python(t) for t in term.value]
    return term.value
