"""JSON config text (a definitions export, a divert given to the HTTP API): parsed with
``json``, and its lines mapped.

:func:`parse_json` rejects text longer than its limit and says where a document nests too deep
for ``json``; :func:`json_source_map` scans text ``json`` accepted and records the line of every
key and array element (only of the paths asked for: a definitions export is big, its shovels
are not).
"""
from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any, Callable

from rtroute.config.source import (
    MAX_CONFIG_BYTES,
    MAX_DEPTH,
    ConfigError,
    Path,
    SourceMap,
    check_size,
    line_at,
    line_of,
    newline_offsets,
    too_many_digits_error,
    without_cycle_collection,
)

__all__ = ["json_source_map", "parse_json"]

#: The deepest nesting of arrays and objects in any JSON document, on every Python: ``json``
#: stops near 1,000 levels on 3.9-3.11 (the recursion limit) and goes past 5,000 on 3.13, so
#: a document is refused at the same depth whichever Python reads it.
JSON_PARSE_DEPTH = 512


class _JsonScanner:
    """Records key and element lines of a JSON document that ``json`` already accepted."""

    _SCALAR_END = re.compile(r"[\s,\]}]")
    _DECODER = json.JSONDecoder()

    def __init__(self, text: str, keep: Callable[[Path], bool] | None, path: str | None):
        self.s = text
        self.i = 0
        self.nl = newline_offsets(text)
        self.map = SourceMap()
        self.keep = keep or (lambda _path: True)
        self.path = path

    def child(self, path: Path, line: int) -> None:
        """Record and scan the value at ``path``, or skip it (at C speed) unless kept."""
        if self.keep(path):
            self.map.lines[path] = line
            self.value(path)
        else:
            self.skip_ws()
            try:
                self.i = self._DECODER.raw_decode(self.s, self.i)[1]
            except RecursionError:  # what json.loads parsed, but from deeper in the stack
                raise ConfigError("arrays and objects are nested too deep", line,
                                  self.path) from None

    def skip_ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def string(self) -> str:
        start = self.i
        self.i += 1
        while self.s[self.i] != '"':
            self.i += 2 if self.s[self.i] == "\\" else 1
        self.i += 1
        return json.loads(self.s[start : self.i])

    def value(self, path: Path) -> None:
        self.skip_ws()
        c = self.s[self.i]
        if c in "{[" and len(path) >= MAX_DEPTH:  # json itself goes ~10 times deeper
            raise ConfigError(f"arrays and objects are nested more than {MAX_DEPTH} levels "
                              "deep", line_at(self.nl, self.i), self.path)
        if c == "{":
            self.i += 1
            while True:
                self.skip_ws()
                if self.s[self.i] == "}":
                    self.i += 1
                    return
                if self.s[self.i] == ",":
                    self.i += 1
                    continue
                line = line_at(self.nl, self.i)
                key = self.string()
                self.skip_ws()
                self.i += 1  # ":"
                self.child(path + (key,), line)
        elif c == "[":
            self.i += 1
            index = 0
            while True:
                self.skip_ws()
                if self.s[self.i] == "]":
                    self.i += 1
                    return
                if self.s[self.i] == ",":
                    self.i += 1
                    continue
                self.child(path + (index,), line_at(self.nl, self.i))
                index += 1
        elif c == '"':
            self.string()
        else:
            m = self._SCALAR_END.search(self.s, self.i)
            self.i = m.start() if m else len(self.s)


def json_source_map(
    text: str, keep: Callable[[Path], bool] | None = None, path: str | None = None
) -> SourceMap:
    """Lines of every key and array element of a JSON document that ``json`` accepted.

    Args:
        text: the document.
        keep: when given, only paths for which it is true are mapped (and looked into); the
            rest is skipped at the speed of ``json``. A definitions export is big; its
            shovels are not.
        path: the file name, for error messages.

    Raises:
        ConfigError: what it maps is nested deeper than :data:`MAX_DEPTH`.
    """
    scanner = _JsonScanner(text, keep, path)
    with without_cycle_collection():
        scanner.value(())
    return scanner.map


_JSON_SHAPE = re.compile(r'(?P<quote>")|(?P<open>[\[{])|(?P<close>[\]}])')
_JSON_STRING_STOP = re.compile(r'["\\]')


_JSON_ESCAPES = re.compile(rb"\\.", re.DOTALL)
_NOT_BRACKET_OR_QUOTE = bytes(b for b in range(256) if b not in b'[]{}"')
_QUOTED = re.compile(rb'"[^"]*"')
_INNERMOST_PAIRS = re.compile(rb"\[\]|\{\}")
_BRACKET_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def _nests_deeper_than(text: str, limit: int) -> bool:
    """Whether the arrays and objects of ``text`` (valid JSON) nest deeper than ``limit``.

    At C speed but for a pathological document: fewer brackets than ``limit`` cannot; else
    escapes are dropped, then everything but brackets and quotes, then what is quoted (the
    strings' brackets), and each pass of a regex drops the innermost pairs: as many passes as
    the depth (a handful in a real document) leave nothing. A document still nested after 16
    passes is walked bracket by bracket.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    raw = text.encode("utf-8", "surrogatepass")
    if b"\\" in raw:
        raw = _JSON_ESCAPES.sub(b"", raw)
    # a bracket is in a string when an odd number of quotes stand before it: dropping two
    # adjacent quotes (most strings hold no bracket) keeps that, and leaves few strings
    brackets = _QUOTED.sub(b"", raw.translate(None, _NOT_BRACKET_OR_QUOTE).replace(b'""', b""))
    passes = min(16, limit)
    for _ in range(passes):
        if not brackets:
            return False
        brackets = _INNERMOST_PAIRS.sub(b"", brackets)  # the depth goes down by one
    return bool(brackets) and (
        passes + max(accumulate(map(_BRACKET_STEP.__getitem__, brackets))) > limit)


def _check_json_depth(text: str, path: str | None, limit: int = MAX_DEPTH) -> None:
    """Reject arrays and objects nested deeper than ``limit``, in one linear pass (an
    unterminated string ends it: ``json`` reports it)."""
    depth = 0
    pos = 0
    while True:
        token = _JSON_SHAPE.search(text, pos)
        if token is None:
            return
        kind, pos = token.lastgroup, token.end()
        if kind == "quote":
            while True:
                stop = _JSON_STRING_STOP.search(text, pos)
                if stop is None:
                    return
                pos = stop.end() + (stop.group() == "\\")  # skip the escaped character
                if stop.group() == '"':
                    break
        elif kind == "open":
            depth += 1
            if depth > limit:
                raise ConfigError(f"arrays and objects are nested more than {limit} "
                                  "levels deep", line_of(text, token.start()), path)
        else:
            depth -= 1


def parse_json(
    text: str, path: str | None = None, limit: int = MAX_CONFIG_BYTES,
    invalid: str = "invalid JSON",
) -> Any:
    """Parse JSON text that may be hostile; map its lines with :func:`json_source_map` (which
    rejects what it maps if nested deeper than :data:`MAX_DEPTH`).

    Args:
        text: the document.
        path: the file name, for error messages.
        limit: the longest text accepted.
        invalid: how a syntax error's message starts.

    Raises:
        ConfigError: the text is not JSON (with the line), is longer than ``limit``, or nests
            deeper than :data:`JSON_PARSE_DEPTH` or than ``json`` can parse (with the line
            where it is deeper than :data:`MAX_DEPTH`).
    """
    check_size(text, path, limit)
    try:
        with without_cycle_collection():
            data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{invalid}: {exc.msg}", exc.lineno, path) from None
    except RecursionError:
        _check_json_depth(text, path)  # says where
        raise ConfigError("arrays and objects are nested too deep", None, path) from None
    except ValueError:  # an integer of more digits than Python converts
        raise too_many_digits_error(text, invalid, path) from None
    if _nests_deeper_than(text, JSON_PARSE_DEPTH):
        _check_json_depth(text, path, JSON_PARSE_DEPTH)  # says where
    return data
