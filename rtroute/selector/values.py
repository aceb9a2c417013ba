"""Run-time semantics of selector values, following Artemis (Java) exactly.

Values are None (SQL NULL), bool, str, int, float and "other" (binary, arrays, tables).
Java's Integer/Long split matters only to arithmetic (where it decides at what width a result
wraps): an `int` in the 32-bit range is a Java Integer, any other `int`, and every `JLong`, is
a Java Long. That is also how pika encodes Python ints in AMQP headers ('I' when it fits in 32
bits, 'l' otherwise), so a header keeps the kind its publisher gave it.

Header values are first normalised: `decimal.Decimal` becomes a float, a `datetime` becomes
epoch milliseconds (a Long), `bytearray`/`memoryview` become `bytes`, and the typed values of
`rtroute.amqp.field_table` (headers decoded without loss) map by their AMQP type: `f`/`d`
floats, `l` a Long, a timestamp `T` epoch milliseconds (see `_from_amqp`). Binary values are not
strings (as Artemis treats AMQP binary): they equal only an equal binary, never a string.

Every three-valued function here returns True, False or None (unknown), and raises
`EvaluationError` where Artemis throws (arithmetic on non-numbers, ordering of values that
are not comparable), which makes the whole selector not match.

Size: Java's value semantics as Artemis applies them (numeric promotion and wrapping,
comparisons, LIKE, three-valued logic), one function per operator; rules read together, kept
together.
"""
from __future__ import annotations

import math
import re
import unicodedata
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Callable

from rtroute.selector.errors import EvaluationError

INT_MIN = -(1 << 31)
INT_MAX = (1 << 31) - 1
LONG_MIN = -(1 << 63)
LONG_MAX = (1 << 63) - 1


class JLong(int):
    """An int that is a Java Long even when its value fits in 32 bits (e.g. `1 + 2L`-style
    results of Long arithmetic, or `JMSTimestamp`). Compares and hashes as a plain int."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"JLong({int(self)})"

    def __str__(self) -> str:
        return int.__repr__(self)


# value kinds
BOOLEAN, INTEGER, LONG, DOUBLE, STRING, OTHER = "boolean", "integer", "long", "double", \
    "string", "other"
_NUMERIC = frozenset((INTEGER, LONG, DOUBLE))
_INTEGRAL = frozenset((INTEGER, LONG))


def normalize(value: Any) -> Any:
    """Bring a header value to one of the selector kinds (see the module docstring)."""
    cls = value.__class__
    if cls is str or cls is int or cls is float or cls is bool or cls is JLong or value is None:
        return value
    amqp_type = getattr(cls, "amqp_type", None)  # a typed value of rtroute.amqp.field_table
    if amqp_type is not None:
        return _from_amqp(amqp_type, value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return JLong(round(value.timestamp() * 1000))
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def _from_amqp(amqp_type: str, value: Any) -> Any:
    """A header value that kept its AMQP field type, as Java sees it: ``l``/``L`` a Long
    whatever its value, a timestamp ``T`` epoch milliseconds (a Long, wrapping as Java's
    ``seconds * 1000L``), a float ``f`` promoted to double, a ``t`` octet other than 0 or 1
    true, a long string ``S`` that is not UTF-8 binary; the other integers by their value."""
    if amqp_type == "l" or amqp_type == "L":
        return JLong(value)
    if amqp_type == "T":
        return JLong(_wrap(int(value) * 1000, 64))
    if amqp_type == "f":
        return float(value)
    if amqp_type == "t":
        return True
    if amqp_type == "S":
        return bytes(value)
    return int(value)


def kind(value: Any) -> str:
    """The kind of a normalised, non-None value."""
    cls = value.__class__
    if cls is str:
        return STRING
    if cls is bool:
        return BOOLEAN
    if cls is int:
        return INTEGER if INT_MIN <= value <= INT_MAX else LONG
    if cls is JLong:
        return LONG
    if cls is float:
        return DOUBLE
    return OTHER


# ---------------------------------------------------------------------------------------------
# Java conversions (convert_string_expressions: and string concatenation)

# The strings come from publishers, so neither regex may backtrack more than a step per
# character: `\d+(\.\d*)?`, not `\d+\.?\d*` (which splits a run of n digits n ways before
# failing, quadratic: 64,000 digits took 100 s).
_JAVA_INT = re.compile(r"[+-]?\d+")
_JAVA_DOUBLE = re.compile(
    r"[+-]?(NaN|Infinity|((\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?)|"
    r"(0[xX]([0-9a-fA-F]+(\.[0-9a-fA-F]*)?|\.[0-9a-fA-F]+)[pP][+-]?\d+))[fFdD]?",
    re.ASCII,
)
_LONG_DIGITS = 19  # digits of 2**63
_FAILED = object()


def java_parse_int(text: str, bits: int) -> Any:
    """Integer.valueOf / Long.valueOf: the value, or _FAILED (NumberFormatException)."""
    if not _JAVA_INT.fullmatch(text):
        return _FAILED
    if len(text) > _LONG_DIGITS + 1:
        # int() refuses more than 4,300 digits; Java takes any number of leading zeros (of any
        # script, as \d here) and fails on more significant digits than a long has
        sign = text[0] if text[0] in "+-" else ""
        digits = text[len(sign):].lstrip("0")
        zeros = 0
        while zeros < len(digits) and unicodedata.decimal(digits[zeros]) == 0:
            zeros += 1
        if len(digits) - zeros > _LONG_DIGITS:
            return _FAILED
        text = sign + (digits[zeros:] or "0")
    value = int(text)
    limit = 1 << (bits - 1)
    if not -limit <= value < limit:
        return _FAILED
    return value if bits == 32 else JLong(value)


def java_parse_double(text: str) -> Any:
    """Double.valueOf: the value, or _FAILED (NumberFormatException)."""
    text = text.strip("".join(chr(c) for c in range(33)))
    if not _JAVA_DOUBLE.fullmatch(text):
        return _FAILED
    if text[-1] in "fFdD" and "x" not in text.lower():
        text = text[:-1]
    body = text.lstrip("+-")
    negative = text.startswith("-")
    if body == "NaN":
        return math.nan
    if body == "Infinity":
        return -math.inf if negative else math.inf
    if body[:2] in ("0x", "0X"):
        if body[-1] in "fFdD":
            body = body[:-1]
        try:
            value = float.fromhex(body)
        except OverflowError:  # beyond a double: Java rounds it to Infinity (0x1p1100)
            value = math.inf
        return -value if negative else value
    return float(text)


def _convert_string(text: str, to_kind: str) -> Any:
    """Convert `text` to a value of `to_kind` as ComparisonExpression does in convert mode."""
    if to_kind == BOOLEAN:
        return text.lower() == "true"
    if to_kind == INTEGER:
        return java_parse_int(text, 32)
    if to_kind == LONG:
        return java_parse_int(text, 64)
    if to_kind == DOUBLE:
        return java_parse_double(text)
    return _FAILED


def java_double_str(value: float) -> str:
    """Double.toString: shortest digits, plain between 1e-3 and 1e7, else d.dddE±n."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    digits_tuple = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digits_tuple.digits)).rstrip("0") or "0"
    # value = 0.d1d2d3... * 10**point
    point = len(digits_tuple.digits) + digits_tuple.exponent
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e7:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        whole = digits[:point].ljust(point, "0")
        frac = digits[point:] or "0"
        return f"{sign}{whole}.{frac}"
    mantissa = digits[0] + "." + (digits[1:] or "0")
    return f"{sign}{mantissa}E{point - 1}"


def java_str(value: Any) -> str:
    """String.valueOf for the right operand of a string concatenation."""
    if value.__class__ is str:
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return java_double_str(value)
    return str(value)


# ---------------------------------------------------------------------------------------------
# comparison

def _double_compare(a: float, b: float) -> int:
    """Double.compare: -0.0 < 0.0, NaN equals NaN and is above everything."""
    if a < b:
        return -1
    if a > b:
        return 1
    if a == b:
        if a == 0.0:
            sa, sb = math.copysign(1.0, a), math.copysign(1.0, b)
            return (sa > sb) - (sa < sb)
        return 0
    return math.isnan(a) - math.isnan(b)


def _string_compare(a: str, b: str) -> int:
    """String.compareTo: by UTF-16 code units."""
    if a == b:
        return 0
    if not (a.isascii() and b.isascii()):
        a16 = a.encode("utf-16-be", "surrogatepass")
        b16 = b.encode("utf-16-be", "surrogatepass")
        return (a16 > b16) - (a16 < b16)
    return (a > b) - (a < b)


def compare(a: Any, b: Any, convert: bool) -> int | None:
    """ComparisonExpression.compare for two normalised non-None values.

    Returns the sign of a - b, or None when the kinds cannot be compared (which makes the
    comparison FALSE).
    """
    ka, kb = kind(a), kind(b)
    if ka != kb and convert:
        if ka == STRING and kb != OTHER:
            a = _convert_string(a, kb)
            if a is _FAILED:
                return None
            ka = kind(a)
        elif kb == STRING and ka != OTHER:
            b = _convert_string(b, ka)
            if b is _FAILED:
                return None
            kb = kind(b)
    if ka == kb or (ka in _INTEGRAL and kb in _INTEGRAL):
        if ka == DOUBLE:
            return _double_compare(a, b)
        if ka == STRING:
            return _string_compare(a, b)
        if ka == OTHER:
            return None
        return (a > b) - (a < b)
    if ka in _NUMERIC and kb in _NUMERIC:
        return _double_compare(float(a), float(b))
    return None


def equal3(a: Any, b: Any, convert: bool = False) -> bool | None:
    """`a = b`. Artemis's rule for NULL is lopsided and kept: NULL on the left only is
    unknown, NULL on the right only is FALSE, NULL on both sides is TRUE."""
    if a is None:
        return None if b is not None else True
    if b is None:
        return False
    a, b = normalize(a), normalize(b)
    if kind(a) == OTHER or kind(b) == OTHER:
        return a.__class__ is b.__class__ and a == b
    sign = compare(a, b, convert)
    return sign == 0


LT, GT, LE, GE = "<", ">", "<=", ">="
_ORDER_TESTS = {
    LT: lambda s: s < 0,
    GT: lambda s: s > 0,
    LE: lambda s: s <= 0,
    GE: lambda s: s >= 0,
}


def order3(a: Any, b: Any, op: str, convert: bool = False) -> bool | None:
    """`a < b` and friends: unknown if either is NULL, FALSE across kinds."""
    if a is None or b is None:
        return None
    a, b = normalize(a), normalize(b)
    if kind(a) == OTHER or kind(b) == OTHER:
        raise EvaluationError(f"cannot order {type(a).__name__} and {type(b).__name__}")
    sign = compare(a, b, convert)
    if sign is None:
        return False
    return _ORDER_TESTS[op](sign)


def between3(value: Any, low: Any, high: Any, negated: bool,
             convert: bool = False) -> bool | None:
    """`value [NOT] BETWEEN low AND high` as Artemis builds it: `value >= low AND value <= high`
    (NOT: `value < low OR value > high`), three-valued, for already evaluated operands."""
    if negated:
        first = order3(value, low, LT, convert)
        if first is True:
            return True
        return or3(first, order3(value, high, GT, convert))
    first = order3(value, low, GE, convert)
    if first is False:
        return False
    return and3(first, order3(value, high, LE, convert))


# ---------------------------------------------------------------------------------------------
# logic

def and3(a: bool | None, b: bool | None) -> bool | None:
    """Kleene AND."""
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def or3(a: bool | None, b: bool | None) -> bool | None:
    """Kleene OR."""
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def and3_lazy(*operands: Callable[[], bool | None]) -> bool | None:
    """Kleene AND over thunks, left to right, stopping at the first FALSE (as Artemis does)."""
    result: bool | None = True
    for operand in operands:
        value = operand()
        if value is False:
            return False
        if value is None:
            result = None
    return result


def or3_lazy(*operands: Callable[[], bool | None]) -> bool | None:
    """Kleene OR over thunks, left to right, stopping at the first TRUE (as Artemis does)."""
    result: bool | None = False
    for operand in operands:
        value = operand()
        if value is True:
            return True
        if value is None:
            result = None
    return result


def not3(a: bool | None) -> bool | None:
    """Kleene NOT."""
    return None if a is None else not a


def bool_cast3(value: Any) -> bool | None:
    """A property used as a condition: its boolean value, unknown if NULL, else FALSE."""
    if value is None:
        return None
    if value.__class__ is not bool:
        value = normalize(value)  # a typed AMQP boolean is one
    return value if value.__class__ is bool else False


def is_null(value: Any) -> bool:
    """`IS NULL`."""
    return value is None


def in3(value: Any, values: frozenset, negated: bool) -> bool | None:
    """`[NOT] IN (...)`: unknown unless the value is a string."""
    if value is None:
        return None
    value = normalize(value)
    if value.__class__ is not str:
        return None
    return (value in values) is not negated


# ---------------------------------------------------------------------------------------------
# LIKE

def like_regex(pattern: str, escape: str | None) -> str:
    """Translate a LIKE pattern to a Python regex (to be used with fullmatch and DOTALL), as
    Artemis does; for the AST-walking baseline only, never for matching values from
    publishers: the regex backtracks (`%a%a%b` on a run of `a`s takes time polynomial in its
    length, the degree growing with each `%`). `like_matcher` does not.

    `%` is any run of characters (newlines too), `_` exactly one character; every other
    character stands for itself. The escape character escapes `%`, `_` and itself only:
    anywhere else (or at the end) it is an ordinary pattern character.
    """
    parts = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == escape and i + 1 < n and pattern[i + 1] in ("%", "_", escape):
            parts.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if c == "%":
            parts.append(".*")
        elif c == "_":
            parts.append(".")
        else:
            parts.append(re.escape(c))
        i += 1
    return "".join(parts)


def like_segments(pattern: str, escape: str | None) -> list[tuple[str, ...]]:
    """The pattern split at each unescaped `%`, each segment split at each unescaped `_`.

    A segment is the tuple of its literal runs, consecutive runs being separated by exactly one
    character: `a_b%c` is `[("a", "b"), ("c",)]`, `_` alone is `("", "")`. The escape
    character escapes `%`, `_` and itself only, as in `like_regex`.
    """
    segments = []
    runs: list[str] = []
    run: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == escape and i + 1 < n and pattern[i + 1] in ("%", "_", escape):
            run.append(pattern[i + 1])
            i += 2
            continue
        if c == "%":
            runs.append("".join(run))
            segments.append(tuple(runs))
            runs, run = [], []
        elif c == "_":
            runs.append("".join(run))
            run = []
        else:
            run.append(c)
        i += 1
    runs.append("".join(run))
    segments.append(tuple(runs))
    return segments


def like_plan(pattern: str, escape: str | None) -> tuple[str, Any]:
    """A cheap way to test the pattern.

    ('equals'|'prefix'|'suffix'|'contains', literal) when the pattern is a literal with `%`
    only at its ends; else ('literals', texts) when it has no `_`: the texts between its `%`s
    (at least two); else ('segments', segments) as from `like_segments`. Empty segments
    between two `%` are left out (`%%` is `%`).
    """
    segments = like_segments(pattern, escape)
    if len(segments) > 2:
        segments[1:-1] = [s for s in segments[1:-1] if s != ("",)]
    if any(len(segment) > 1 for segment in segments):
        return "segments", tuple(segments)
    texts = [segment[0] for segment in segments]
    if len(texts) == 1:
        return "equals", texts[0]
    first, last = texts[0], texts[-1]
    if len(texts) == 2:
        if not first and not last:
            return "contains", ""
        if not first:
            return "suffix", last
        if not last:
            return "prefix", first
    elif len(texts) == 3 and not first and not last:
        return "contains", texts[1]
    return "literals", tuple(texts)


class _Segment:
    """The part of a LIKE pattern between two `%`: literal runs separated by one `_` each,
    so of a fixed length."""

    __slots__ = ("length", "pieces")

    def __init__(self, runs: tuple[str, ...]) -> None:
        pieces = []  # (offset in the segment, literal run), empty runs left out
        offset = 0
        for run in runs:
            if run:
                pieces.append((offset, run))
            offset += len(run) + 1
        self.length = offset - 1
        # longest first: likely the rarest, so the quickest to rule places out
        self.pieces = tuple(sorted(pieces, key=lambda p: -len(p[1])))

    def at(self, s: str, i: int) -> bool:
        """Whether the segment matches `s[i:i + length]` (which the caller knows lies in `s`)."""
        for offset, run in self.pieces:
            if not s.startswith(run, i + offset):
                return False
        return True


def _find_segment(s: str, segment: _Segment, start: int, stop: int) -> int:
    """The least `i >= start` with `i + length <= stop` where the segment matches, or -1 (the
    arguments of `str.find`, which stands in for this for a segment without `_`).

    Each run in turn is sought from where it would lie if the segment started at `i`: found
    there, the next run is checked; found further on, `i` moves to the first place that run
    allows (no match lies before it). So `i` only moves forward, and each run's search only
    starts further on: O((stop - start) * length) at worst.
    """
    last = stop - segment.length
    i = start
    while i <= last:
        for offset, run in segment.pieces:
            found = s.find(run, i + offset, last + offset + len(run))
            if found < 0:
                return -1
            if found != i + offset:
                i = found - offset
                break
        else:
            return i
    return -1


def _segments_matcher(segments: tuple[tuple[str, ...], ...]) -> Callable[[str], bool]:
    """Match without backtracking: the first segment at the start, the last at the end, and
    each one between at its leftmost place after the one before. Leftmost is never wrong (with
    `%` the only variable-length wildcard, a match further right only leaves the segments
    after it less room), so nothing is ever retried: O(len(s) * len(pattern)) at worst, however
    many `%` there are."""
    if len(segments) == 1:
        only = _Segment(segments[0])
        length = only.length
        return lambda s: len(s) == length and only.at(s, 0)
    first, last = _Segment(segments[0]), _Segment(segments[-1])
    head, tail = first.length, last.length
    head_runs, tail_runs = first.pieces, last.pieces  # offsets from the start, from `stop`
    finds = []  # (find, needle, length): find(s, needle, start, stop) as str.find
    for runs in segments[1:-1]:
        if len(runs) == 1:
            finds.append((str.find, runs[0], len(runs[0])))
        else:
            segment = _Segment(runs)
            finds.append((_find_segment, segment, segment.length))

    def matches(s: str) -> bool:
        stop = len(s) - tail
        if stop < head:
            return False
        for offset, run in head_runs:
            if not s.startswith(run, offset):
                return False
        for offset, run in tail_runs:
            if not s.startswith(run, stop + offset):
                return False
        i = head
        for find, needle, length in finds:
            i = find(s, needle, i, stop)
            if i < 0:
                return False
            i += length
        return True

    return matches


def _literals_matcher(texts: tuple[str, ...]) -> Callable[[str], bool]:
    """`_segments_matcher` for segments without `_` (at least two), str methods only. The
    middle ones need no bound: if the leftmost place of one runs into the last segment, no
    place does, and the last `endswith` fails."""
    first, *middle, last = texts
    head = len(first)

    def matches(s: str) -> bool:
        if not s.startswith(first):
            return False
        i = head
        for text in middle:
            i = s.find(text, i)
            if i < 0:
                return False
            i += len(text)
        return s.endswith(last, i)

    return matches


def like_matcher(pattern: str, escape: str | None) -> Callable[[str], bool]:
    """A function telling whether a string matches the LIKE pattern, in time linear in the
    string's length for a given pattern (no regex: the string comes from any publisher)."""
    how, arg = like_plan(pattern, escape)
    if how == "equals":
        return arg.__eq__
    if how == "prefix":
        return lambda s: s.startswith(arg)
    if how == "suffix":
        return lambda s: s.endswith(arg)
    if how == "contains":
        return lambda s: arg in s
    if how == "literals":
        return _literals_matcher(arg)
    return _segments_matcher(arg)


def like3(value: Any, matcher: Callable[[str], bool]) -> bool | None:
    """`LIKE`: unknown on NULL, FALSE on a non-string."""
    if value is None:
        return None
    value = normalize(value)
    if value.__class__ is not str:
        return False
    return matcher(value)


# ---------------------------------------------------------------------------------------------
# arithmetic

def _wrap(value: int, bits: int) -> int:
    mask = (1 << bits) - 1
    value &= mask
    if value >> (bits - 1):
        value -= 1 << bits
    return value


def _as_number(value: Any, convert: bool) -> Any:
    k = kind(value)
    if k in _NUMERIC:
        return value
    if convert and k == STRING:
        number = java_parse_double(value) if "." in value else java_parse_int(value, 64)
        if number is not _FAILED:
            return number
    raise EvaluationError(f"cannot convert {value!r} into a number")


def _integral(result: int, a: Any, b: Any) -> int:
    """Wrap an integer result as Java would: Long if either operand is Long, else Integer."""
    if kind(a) == LONG or kind(b) == LONG:
        return JLong(_wrap(result, 64))
    return _wrap(result, 32)


def _java_divide(a: float, b: float) -> float:
    try:
        return a / b
    except ZeroDivisionError:
        if math.isnan(a) or a == 0:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _java_remainder(a: float, b: float) -> float:
    try:
        return math.fmod(a, b)
    except ValueError:  # x % 0 and inf % y
        return math.nan


def _prepare(a: Any, b: Any, convert: bool) -> tuple[Any, Any]:
    return _as_number(normalize(a), convert), _as_number(normalize(b), convert)


def add(a: Any, b: Any, convert: bool = False) -> Any:
    """`a + b`: NULL if either is NULL; string concatenation when `a` is a string."""
    if a is None or b is None:
        return None
    a = normalize(a)
    if a.__class__ is str:
        return a + java_str(normalize(b))
    a, b = _as_number(a, convert), _as_number(normalize(b), convert)
    if a.__class__ is float or b.__class__ is float:
        return float(a) + float(b)
    return _integral(a + b, a, b)


def subtract(a: Any, b: Any, convert: bool = False) -> Any:
    """`a - b`."""
    if a is None or b is None:
        return None
    a, b = _prepare(a, b, convert)
    if a.__class__ is float or b.__class__ is float:
        return float(a) - float(b)
    return _integral(a - b, a, b)


def multiply(a: Any, b: Any, convert: bool = False) -> Any:
    """`a * b`."""
    if a is None or b is None:
        return None
    a, b = _prepare(a, b, convert)
    if a.__class__ is float or b.__class__ is float:
        return float(a) * float(b)
    return _integral(a * b, a, b)


def divide(a: Any, b: Any, convert: bool = False) -> Any:
    """`a / b`: always a double, as in Artemis (so 7 / 2 = 3.5, 1 / 0 is infinity)."""
    if a is None or b is None:
        return None
    a, b = _prepare(a, b, convert)
    return _java_divide(float(a), float(b))


def remainder(a: Any, b: Any, convert: bool = False) -> Any:
    """`a % b`: a double with the sign of `a` (Java's %), NaN for `x % 0`."""
    if a is None or b is None:
        return None
    a, b = _prepare(a, b, convert)
    return _java_remainder(float(a), float(b))


def negate(value: Any) -> Any:
    """Unary minus: NULL for NULL and for non-numbers; wraps like Java."""
    if value is None:
        return None
    value = normalize(value)
    k = kind(value)
    if k == INTEGER:
        return _wrap(-value, 32)
    if k == LONG:
        return JLong(_wrap(-value, 64))
    if k == DOUBLE:
        return -value
    return None


ARITHMETIC = {"+": add, "-": subtract, "*": multiply, "/": divide, "%": remainder}
