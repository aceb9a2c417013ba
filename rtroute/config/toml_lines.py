"""TOML config text: parsed with ``tomllib`` after a linear shape check, and its lines mapped.

:func:`parse_toml` rejects what ``tomllib`` would choke on (text longer than
:data:`~rtroute.config.source.MAX_CONFIG_BYTES`, nesting deeper than
:data:`~rtroute.config.source.MAX_DEPTH`, dotted keys of more than
:data:`~rtroute.config.source.MAX_KEY_PARTS` parts) before it parses; :func:`toml_source_map`
scans text ``tomllib`` accepted and records the line of every key, table header and array
element; :func:`load_toml` does both.
"""
from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import Any

from rtroute.config.source import (
    MAX_CONFIG_BYTES,
    MAX_DEPTH,
    MAX_KEY_PARTS,
    ConfigError,
    Path,
    PathPart,
    SourceMap,
    check_size,
    line_at,
    line_of,
    newline_offsets,
    too_many_digits_error,
    without_cycle_collection,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

__all__ = ["load_toml", "parse_toml", "toml_source_map"]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_TOML_SCALAR_END = re.compile(r"[,\]}\n#]")

# What the shape check before tomllib stops at: the start of a string (skipped by
# _toml_string_end), a comment, brackets, dots and what ends a key.
_TOML_SHAPE = re.compile(
    r"(?P<quote>'''|\"\"\"|[\"'])|(?P<comment>#)|(?P<open>[\[{])|(?P<close>[\]}])"
    r"|(?P<dot>\.)|(?P<end>[=,\n])"
)
_BASIC_STOP = re.compile(r'["\\\n]')
_ML_BASIC_STOP = re.compile(r'\\|"""')


def _toml_string_end(text: str, quote: str, pos: int) -> int:
    """Index just past the string whose opening ``quote`` ends at ``pos``; -1 when it does not
    end (``tomllib`` will say so). Linear in the string's length, and no deeper than it."""
    if quote == "'":
        end = text.find("'", pos)
        return -1 if end < 0 or text.find("\n", pos, end) >= 0 else end + 1
    if quote == "'''":
        end = text.find("'''", pos)
    elif quote == '"':
        while True:
            stop = _BASIC_STOP.search(text, pos)
            if stop is None or stop.group() == "\n":
                return -1
            if stop.group() == '"':
                return stop.end()
            pos = stop.end() + 1  # the escaped character
    else:
        while True:
            stop = _ML_BASIC_STOP.search(text, pos)
            if stop is None:
                return -1
            if stop.group() == '"""':
                end = stop.start()
                break
            pos = stop.end() + 1
    if end < 0:
        return -1
    # up to two more quotes belong to the content: '''a''''' is "a''"
    end += 3
    extra = 0
    while extra < 2 and text.startswith(quote[0], end):
        end += 1
        extra += 1
    return end


def _check_toml_shape(text: str, path: str | None) -> None:
    """Reject nesting deeper than :data:`MAX_DEPTH` and dotted keys longer than
    :data:`MAX_KEY_PARTS`, in one linear pass over text ``tomllib`` has not seen yet.

    Text that is not TOML may pass; ``tomllib`` rejects it next (an unterminated string ends the
    pass, since nothing after it can be told apart from string content).
    """
    depth = 0
    parts = 1
    pos = 0
    while True:
        token = _TOML_SHAPE.search(text, pos)
        if token is None:
            return
        kind, pos = token.lastgroup, token.end()
        if kind == "quote":
            pos = _toml_string_end(text, token.group(), pos)
            if pos < 0:
                return
        elif kind == "comment":
            pos = text.find("\n", pos)
            if pos < 0:
                return
        elif kind == "dot":
            parts += 1
            if parts > MAX_KEY_PARTS:
                raise ConfigError(f"a dotted key or table name has more than {MAX_KEY_PARTS} "
                                  "parts", line_of(text, token.start()), path)
        elif kind == "open":
            depth += 1
            parts = 1
            if depth > MAX_DEPTH:
                raise ConfigError(f"arrays and tables are nested more than {MAX_DEPTH} levels "
                                  "deep", line_of(text, token.start()), path)
        elif kind in ("close", "end"):
            depth -= kind == "close"
            parts = 1


class _TomlScanner:
    """Records key and element lines of a TOML document that ``tomllib`` already accepted."""

    def __init__(self, text: str, path: str | None = None):
        self.s = text
        self.i = 0
        self.nl = newline_offsets(text)
        self.map = SourceMap()
        self.table: Path = ()
        self.aot_index: dict[Path, int] = {}
        self.path = path

    def line(self) -> int:
        return line_at(self.nl, self.i)

    def peek(self, n: int = 1) -> str:
        return self.s[self.i : self.i + n]

    def skip_space(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t":
            self.i += 1

    def skip_blank(self) -> None:
        """Skip whitespace, newlines and comments."""
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif c == "#":
                end = self.s.find("\n", self.i)
                self.i = len(self.s) if end < 0 else end
            else:
                break

    def run(self) -> SourceMap:
        while True:
            self.skip_blank()
            if self.i >= len(self.s):
                return self.map
            if self.peek(2) == "[[":
                self.array_table_header()
            elif self.peek() == "[":
                self.table_header()
            else:
                self.key_value(self.table)

    def resolve(self, parts: Iterable[str]) -> Path:
        """Turn header key parts into a path, entering the current element of each array."""
        out: list[PathPart] = []
        for part in parts:
            out.append(part)
            if tuple(out) in self.aot_index:
                out.append(self.aot_index[tuple(out)])
        return tuple(out)

    def array_table_header(self) -> None:
        line = self.line()
        self.i += 2
        parts = self.key()
        self.skip_space()
        self.i += 2  # "]]"
        key = self.checked(self.resolve(parts[:-1]) + (parts[-1],))
        index = self.aot_index.get(key, -1) + 1
        self.aot_index[key] = index
        self.map.lines.setdefault(key, line)
        self.table = self.checked(key + (index,))
        self.map.lines[self.table] = line

    def table_header(self) -> None:
        line = self.line()
        self.i += 1
        parts = self.key()
        self.skip_space()
        self.i += 1  # "]"
        self.table = self.checked(self.resolve(parts))
        self.map.lines[self.table] = line

    def key(self) -> list[str]:
        parts: list[str] = []
        while True:
            self.skip_space()
            c = self.peek()
            if c == '"':
                start = self.i
                self.skip_basic_string()
                parts.append(tomllib.loads("k = " + self.s[start : self.i])["k"])
            elif c == "'":
                end = self.s.index("'", self.i + 1)
                parts.append(self.s[self.i + 1 : end])
                self.i = end + 1
            else:
                m = _BARE_KEY.match(self.s, self.i)
                if not m:  # tomllib accepted the text, so this is unreachable in practice
                    raise ValueError(f"cannot scan TOML key at line {self.line()}")
                parts.append(m.group())
                self.i = m.end()
            self.skip_space()
            if self.peek() != ".":
                return parts
            self.i += 1

    def checked(self, path: Path) -> Path:
        """``path``, unless it is longer than :data:`MAX_DEPTH` (inline tables in inline
        tables with dotted keys: the shape check counts brackets, not key parts)."""
        if len(path) > MAX_DEPTH:
            raise ConfigError(f"keys are nested more than {MAX_DEPTH} levels deep",
                              self.line(), self.path)
        return path

    def key_value(self, base: Path) -> None:
        line = self.line()
        parts = self.key()
        path = self.checked(base + tuple(parts))
        for n in range(len(base) + 1, len(path)):
            self.map.lines.setdefault(path[:n], line)
        self.map.lines[path] = line
        self.skip_space()
        self.i += 1  # "="
        self.value(path)

    def value(self, path: Path) -> None:
        self.skip_space()
        c = self.peek()
        if c == '"':
            self.skip_basic_string()
        elif c == "'":
            self.skip_literal_string()
        elif c == "{":
            self.i += 1
            while True:
                self.skip_blank()
                if self.peek() == "}":
                    self.i += 1
                    return
                self.key_value(path)
                self.skip_blank()
                if self.peek() == ",":
                    self.i += 1
        elif c == "[":
            self.i += 1
            index = 0
            while True:
                self.skip_blank()
                if self.peek() == "]":
                    self.i += 1
                    return
                element = self.checked(path + (index,))
                self.map.lines[element] = self.line()
                self.value(element)
                self.skip_blank()
                if self.peek() == ",":
                    self.i += 1
                index += 1
        else:
            end = _TOML_SCALAR_END.search(self.s, self.i)
            self.i = end.start() if end else len(self.s)

    def skip_basic_string(self) -> None:
        if self.peek(3) == '"""':
            self.i += 3
            while not self.s.startswith('"""', self.i):
                self.i += 2 if self.s[self.i] == "\\" else 1
            self.i += 3
            while self.peek() == '"':  # up to two quotes may end the content
                self.i += 1
            return
        self.i += 1
        while self.s[self.i] != '"':
            self.i += 2 if self.s[self.i] == "\\" else 1
        self.i += 1

    def skip_literal_string(self) -> None:
        if self.peek(3) == "'''":
            self.i = self.s.index("'''", self.i + 3) + 3
            while self.peek() == "'":
                self.i += 1
            return
        self.i = self.s.index("'", self.i + 1) + 1


def toml_source_map(text: str, path: str | None = None) -> SourceMap:
    """Lines of every key, table header and array element of a (valid) TOML document.

    Raises:
        ConfigError: a key path is longer than :data:`MAX_DEPTH` (``path`` names the file).
    """
    return _TomlScanner(text, path).run()


def load_toml(text: str, path: str | None = None) -> tuple[dict[str, Any], SourceMap]:
    """Parse TOML text; a syntax error becomes a :class:`ConfigError` with its line.

    So does text longer than :data:`MAX_CONFIG_BYTES`, nesting deeper than :data:`MAX_DEPTH`
    and a dotted key of more than :data:`MAX_KEY_PARTS` parts.
    """
    data = parse_toml(text, path)
    with without_cycle_collection():
        return data, toml_source_map(text, path)


def parse_toml(text: str, path: str | None = None, limit: int = MAX_CONFIG_BYTES) -> dict[str, Any]:
    """Parse TOML text that may be hostile, without mapping its lines.

    Raises:
        ConfigError: a syntax error (with its line), text longer than ``limit``, nesting deeper
            than :data:`MAX_DEPTH` or a dotted key of more than :data:`MAX_KEY_PARTS` parts.
    """
    check_size(text, path, limit)
    _check_toml_shape(text, path)
    try:
        with without_cycle_collection():
            return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        line = int(m.group(1)) if m else None
        msg = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", msg)
        raise ConfigError(f"invalid TOML: {msg}", line, path) from None
    except ValueError:  # an integer of more digits than Python converts
        raise too_many_digits_error(text, "invalid TOML", path) from None
