"""Tokenizer for the selector language, token for token as Artemis's JavaCC grammar.

Whitespace is space, tab, CR, LF and form feed. Comments are `/* ... */` and `-- ...` up to a
line end; as in Artemis a `--` with no line end after it is not a comment but two minus signs.
Keywords are case-insensitive, identifiers are not. Identifiers are ASCII letters, digits, `_`
and `$` (not starting with a digit), plus `-` after the first character in hyphenated mode, or
any text in double quotes (`""` for a quote).
"""
from __future__ import annotations

from typing import NamedTuple

from rtroute.selector.errors import SelectorError

KEYWORDS = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "LIKE", "ESCAPE", "IN", "IS", "TRUE", "FALSE", "NULL",
     "XPATH", "XQUERY"}
)

# token kinds
IDENT = "identifier"
QUOTED_IDENT = "quoted identifier"
STRING = "string"
INTEGER = "integer"
FLOAT = "float"
KEYWORD = "keyword"
OP = "operator"
EOF = "end of input"

_WHITESPACE = " \t\n\r\f"
_ID_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
_ID_PART = _ID_START | frozenset("0123456789")
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_OCTAL = frozenset("01234567")
_TWO_CHAR_OPS = ("<>", "<=", ">=")
_ONE_CHAR_OPS = frozenset("=<>+-*/%(),")
_LONG_MAX = (1 << 63) - 1


class Token(NamedTuple):
    """One token: its kind, its value (decoded), and where it starts and ends in the text."""

    kind: str
    value: str | int | float | None
    start: int
    end: int

    def describe(self) -> str:
        """How the token is named in error messages."""
        if self.kind == EOF:
            return "end of input"
        if self.kind == OP:
            return f"'{self.value}'"
        if self.kind == KEYWORD:
            return str(self.value)
        if self.kind == STRING:
            return "string literal"
        if self.kind in (INTEGER, FLOAT):
            return "number"
        return f"identifier {self.value!r}"


def tokenize(text: str, offset: int = 0, hyphenated: bool = False) -> list[Token]:
    """Split `text` into tokens, ending with an EOF token.

    Args:
        text: the whole selector text (positions are offsets into it).
        offset: where the selector proper starts (after any `convert_string_expressions:`-style
            prefix).
        hyphenated: allow `-` inside identifiers (Artemis's `hyphenated_props:` mode).

    Raises:
        SelectorError: on a character that starts no token, an unterminated string, quoted
            identifier or comment, or a malformed or out-of-range number.
    """
    tokens: list[Token] = []
    i = offset
    n = len(text)
    while i < n:
        c = text[i]
        if c in _WHITESPACE:
            i += 1
            continue
        if c == "-" and text.startswith("--", i):
            end = _line_comment_end(text, i)
            if end is not None:
                i = end
                continue
        if c == "/" and text.startswith("/*", i):
            close = text.find("*/", i + 2)
            if close < 0:
                raise SelectorError("unterminated comment: expected '*/'", i, text)
            i = close + 2
            continue
        if c == "'":
            value, end = _quoted(text, i, "'", "string literal")
            tokens.append(Token(STRING, value, i, end))
            i = end
            continue
        if c == '"':
            value, end = _quoted(text, i, '"', "quoted identifier")
            tokens.append(Token(QUOTED_IDENT, value, i, end))
            i = end
            continue
        if c in _DIGITS or (c == "." and i + 1 < n and text[i + 1] in _DIGITS):
            tok = _number(text, i)
            tokens.append(tok)
            i = tok.end
            continue
        if c in _ID_START:
            j = i + 1
            while j < n and (text[j] in _ID_PART or (hyphenated and text[j] == "-")):
                j += 1
            word = text[i:j]
            upper = word.upper()
            if upper in KEYWORDS:
                tokens.append(Token(KEYWORD, upper, i, j))
            else:
                tokens.append(Token(IDENT, word, i, j))
            i = j
            continue
        two = text[i:i + 2]
        if two in _TWO_CHAR_OPS:
            tokens.append(Token(OP, two, i, i + 2))
            i += 2
            continue
        if c in _ONE_CHAR_OPS:
            tokens.append(Token(OP, c, i, i + 1))
            i += 1
            continue
        hint = ""
        if c == "!" and text.startswith("!=", i):
            hint = " (use '<>' for not equal)"
        elif c == "\u2018" or c == "\u2019":
            hint = " (string literals use straight single quotes)"
        raise SelectorError(f"unexpected character {c!r}{hint}", i, text)
    tokens.append(Token(EOF, None, n, n))
    return tokens


def _line_comment_end(text: str, start: int) -> int | None:
    """End of a `--` comment starting at `start`, or None when no line end follows."""
    cr = text.find("\r", start)
    lf = text.find("\n", start)
    ends = [e for e in (cr, lf) if e >= 0]
    if not ends:
        return None
    end = min(ends)
    if text.startswith("\r\n", end):
        return end + 2
    return end + 1


def _quoted(text: str, start: int, quote: str, what: str) -> tuple[str, int]:
    """Decode a literal in `quote`s starting at `start` (doubled quote = one quote)."""
    parts = []
    i = start + 1
    while True:
        j = text.find(quote, i)
        if j < 0:
            raise SelectorError(f"unterminated {what}: expected a closing {quote}", start, text)
        parts.append(text[i:j])
        if text.startswith(quote * 2, j):
            parts.append(quote)
            i = j + 2
            continue
        return "".join(parts), j + 1


def _number(text: str, start: int) -> Token:
    """Scan a numeric literal: decimal, hex (0x1F), octal (017), float (1.5, .5, 1e3, 5.)."""
    n = len(text)
    i = start
    if text.startswith(("0x", "0X"), i) and i + 2 < n and text[i + 2] in _HEX:
        j = i + 2
        while j < n and text[j] in _HEX:
            j += 1
        value = int(text[i + 2:j], 16)
        return _integer(text, start, j, value, "hexadecimal")
    j = i
    while j < n and text[j] in _DIGITS:
        j += 1
    is_float = False
    if j < n and text[j] == ".":
        is_float = True
        j += 1
        while j < n and text[j] in _DIGITS:
            j += 1
    if j < n and text[j] in "eE":
        k = j + 1
        if k < n and text[k] in "+-":
            k += 1
        if k < n and text[k] in _DIGITS:
            while k < n and text[k] in _DIGITS:
                k += 1
            j = k
            is_float = True
    if is_float:
        _check_number_end(text, start, j)
        return Token(FLOAT, float(text[start:j]), start, j)
    digits = text[start:j]
    if digits.startswith("0") and len(digits) > 1:
        if any(d not in _OCTAL for d in digits):
            raise SelectorError(
                f"invalid octal literal {digits!r}: a leading 0 means octal (digits 0-7)",
                start, text)
        return _integer(text, start, j, int(digits, 8), "octal")
    return _integer(text, start, j, int(digits), "decimal")


def _integer(text: str, start: int, end: int, value: int, base: str) -> Token:
    """Finish an integer literal: optional L suffix, range check (64-bit, as Java's Long)."""
    if end < len(text) and text[end] in "lL":
        end += 1
    _check_number_end(text, start, end)
    # One past Long.MAX_VALUE is kept for the parser: it is valid only as -9223372036854775808.
    if value > _LONG_MAX + (1 if base == "decimal" else 0):
        raise SelectorError(f"{base} literal out of the 64-bit range", start, text)
    return Token(INTEGER, value, start, end)


def _check_number_end(text: str, start: int, end: int) -> None:
    """A number directly followed by a letter, digit or dot is malformed (e.g. `1abc`, `1.2.3`)."""
    if end < len(text) and (text[end] in _ID_PART or text[end] == "."):
        raise SelectorError(
            f"malformed number {text[start:end + 1]!r}: expected an operator or space after "
            f"{text[start:end]!r}", start, text)
