"""Where a config value came from, and the error that points there.

``tomllib`` and ``json`` return plain data without positions, so this module scans the source
text a second time (after the real parser accepted it) and records, for every key and every
array element, the line it starts on. A path is a tuple of keys and array indices, e.g.
``("shovel", 0, "publish_properties", "priority")``; a lookup falls back to the nearest
recorded ancestor, so an error about a missing key points at its table.

It also holds :class:`TableReader`, the checked reader every config section uses: typed getters
that consume keys, and :meth:`TableReader.finish`, which rejects what is left with a "did you
mean" suggestion.

Hostile input gets a :class:`ConfigError` in time and memory linear in its size, never a
traceback: files above :data:`MAX_CONFIG_BYTES`, nesting deeper than :data:`MAX_DEPTH` and
dotted keys of more than :data:`MAX_KEY_PARTS` parts are rejected before ``tomllib`` or
``json`` see them (the first would recurse past Python's limit, and ``tomllib``'s work per
dotted key grows with the square of its parts).
"""
from __future__ import annotations

import bisect
import contextlib
import difflib
import gc
import json
import math
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Union

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

PathPart = Union[str, int]
Path = tuple[PathPart, ...]

#: Largest config file accepted (``rtroute.toml``, an Erlang config), in bytes. tomllib alone
#: needs ~100 bytes of memory per byte of a file of short tables (~400 MB at this size).
MAX_CONFIG_BYTES = 4 * 1024 * 1024
#: Largest definitions export accepted (machine-written, it grows with the cluster; only its
#: shovels are mapped line by line), in bytes.
MAX_DEFINITIONS_BYTES = 16 * 1024 * 1024
#: Deepest nesting of arrays and tables (inline or not), and longest key path.
MAX_DEPTH = 100
#: Most parts of one dotted key or table header (``a.b.c`` has 3).
MAX_KEY_PARTS = 16

_MISSING: Any = object()


class ConfigError(ValueError):
    """A config value is malformed; ``str()`` gives ``file:line: message``.

    Attributes:
        message: what is wrong, naming the section, the entry and the field.
        line: 1-based line of the offending key or value, or ``None`` when there is none
            (a missing section, or data that did not come from a file).
        path: the file name as given to the loader, or ``None``.
    """

    def __init__(self, message: str, line: int | None = None, path: str | None = None):
        self.message = message
        self.line = line
        self.path = path
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path or "<config>"
        if self.line is not None:
            where = f"{where}:{self.line}"
        return f"{where}: {self.message}"


@dataclass
class SourceMap:
    """Lines (and original key spellings) of the values of one config document.

    Attributes:
        lines: path -> 1-based line where that key or array element starts.
        names: path -> the key as the user wrote it, when it differs from the path's last
            element (importers map converted keys back to their original names); ``""``
            hides that segment of the label (a key that an importer split in two).
    """

    lines: dict[Path, int] = field(default_factory=dict)
    names: dict[Path, str] = field(default_factory=dict)

    def line(self, path: Path) -> int | None:
        """Line of ``path``, or of its nearest recorded ancestor; ``None`` if there is none."""
        path = tuple(path)
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            path = path[:-1]

    def label(self, path: Path, start: int = 0) -> str:
        """Human form of ``path[start:]``: ``publish_properties.priority``, ``bindings[2].key``."""
        out = ""
        for i in range(start, len(path)):
            part = path[i]
            if isinstance(part, int):
                out += f"[{part}]"
            else:
                name = self.names.get(tuple(path[: i + 1]), part)
                if name:
                    out += f".{name}" if out else name
        return out


def line_at(newlines: list[int], index: int) -> int:
    """1-based line of character ``index``, given the sorted offsets of ``\\n`` in the text."""
    return bisect.bisect_left(newlines, index) + 1


def _newlines(text: str) -> list[int]:
    return [m.start() for m in re.finditer("\n", text)]


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def check_size(text: str | bytes, path: str | None, limit: int = MAX_CONFIG_BYTES) -> None:
    """Reject a document longer than ``limit`` (bytes, or characters for text).

    Raises:
        ConfigError: without a line.
    """
    if len(text) > limit:
        raise ConfigError(f"the file is larger than {limit // (1024 * 1024)} MiB; "
                          "is it the right file?", None, path)


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for an error message: what may hold credentials (text with ``@`` or
    ``://``) masked as URIs are, and cut to about ``limit`` characters.

    Masking comes first, so the cut can never expose what the mask hides.
    """
    from rtroute.amqp.uri import mask_uri  # on the error path only: it imports pika

    if isinstance(value, (str, bytes)):
        text = value if isinstance(value, str) else value.decode("latin-1")
        if "@" in text or "//" in text:
            text = mask_uri(text)
        out = repr(text if isinstance(value, str) else text.encode("latin-1"))
    else:
        out = repr(value)
        if "@" in out or "//" in out:
            out = mask_uri(out)
    return out if len(out) <= limit else out[: limit - 3] + "..."


# --------------------------------------------------------------------------------------- TOML

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
                                  "parts", _line_of(text, token.start()), path)
        elif kind == "open":
            depth += 1
            parts = 1
            if depth > MAX_DEPTH:
                raise ConfigError(f"arrays and tables are nested more than {MAX_DEPTH} levels "
                                  "deep", _line_of(text, token.start()), path)
        elif kind in ("close", "end"):
            depth -= kind == "close"
            parts = 1


class _TomlScanner:
    """Records key and element lines of a TOML document that ``tomllib`` already accepted."""

    def __init__(self, text: str, path: str | None = None):
        self.s = text
        self.i = 0
        self.nl = _newlines(text)
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
    with _without_cycle_collection():
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
        with _without_cycle_collection():
            return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        line = int(m.group(1)) if m else None
        msg = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", msg)
        raise ConfigError(f"invalid TOML: {msg}", line, path) from None
    except ValueError:  # an integer of more digits than Python converts
        raise _too_many_digits(text, "invalid TOML", path) from None


# --------------------------------------------------------------------------------------- JSON


class _JsonScanner:
    """Records key and element lines of a JSON document that ``json`` already accepted."""

    _SCALAR_END = re.compile(r"[\s,\]}]")
    _DECODER = json.JSONDecoder()

    def __init__(self, text: str, keep: Callable[[Path], bool] | None, path: str | None):
        self.s = text
        self.i = 0
        self.nl = _newlines(text)
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
    with _without_cycle_collection():
        scanner.value(())
    return scanner.map


@contextlib.contextmanager
def _without_cycle_collection() -> Iterator[None]:
    """Pause the cyclic garbage collector: parsers build only acyclic containers, and
    building millions of them wakes the collector over and over (4x slower for ``json``)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_JSON_SHAPE = re.compile(r'(?P<quote>")|(?P<open>[\[{])|(?P<close>[\]}])')
_JSON_STRING_STOP = re.compile(r'["\\]')


def _check_json_depth(text: str, path: str | None) -> None:
    """Reject arrays and objects nested deeper than :data:`MAX_DEPTH`, in one linear pass
    (an unterminated string ends it: ``json`` reports it)."""
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
            if depth > MAX_DEPTH:
                raise ConfigError(f"arrays and objects are nested more than {MAX_DEPTH} "
                                  "levels deep", _line_of(text, token.start()), path)
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
            deeper than ``json`` can parse (with the line where it is deeper than
            :data:`MAX_DEPTH`).
    """
    check_size(text, path, limit)
    try:
        with _without_cycle_collection():
            return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{invalid}: {exc.msg}", exc.lineno, path) from None
    except RecursionError:
        _check_json_depth(text, path)  # says where
        raise ConfigError("arrays and objects are nested too deep", None, path) from None
    except ValueError:  # an integer of more digits than Python converts
        raise _too_many_digits(text, invalid, path) from None


def _too_many_digits(text: str, invalid: str, path: str | None) -> ConfigError:
    limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
    # a run's start only: trying every position inside long runs would be quadratic
    found = re.search(r"(?<![0-9_])[0-9_]{" + str(limit + 1) + ",}", text)
    line = _line_of(text, found.start()) if found else None
    return ConfigError(f"{invalid}: an integer has more than {limit} digits", line, path)


# ------------------------------------------------------------------------------ table reader


@dataclass(frozen=True)
class Where:
    """Where a document came from: its source map and its file name (for error messages)."""

    source: SourceMap
    file: str | None = None

    def error(self, path: Path, message: str) -> ConfigError:
        """A :class:`ConfigError` for ``path`` carrying that value's line."""
        return ConfigError(message, self.source.line(path), self.file)


def type_name(value: Any) -> str:
    """The TOML-ish name of a value's type, for "must be X, got Y" messages."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, (list, tuple)):
        return "an array"
    return type(value).__name__


def suggest(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest candidate, or an empty string."""
    candidates = list(candidates)
    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    if not close:
        lowered = word.lower()
        close = [c for c in candidates if c.lower() == lowered] or [
            c for c in candidates if len(word) >= 3 and c.lower().startswith(lowered)
        ]
    return f" (did you mean '{close[0]}'?)" if close else ""


class TableReader:
    """Checked access to one table of a config document.

    Each getter consumes its key (and any alias), checks the type and range, and raises a
    :class:`ConfigError` that names ``context`` (e.g. ``shovel 'my_first_shovel'``), the field
    as the user spelled it, and its line. :meth:`finish` rejects keys nobody consumed.

    Args:
        data: the table.
        path: its path in the document (for line look-ups).
        where: the document's source map and file name.
        context: the section and entry, the first words of every message.
        normalize: maps a key as written to the name the getters use (shovels accept both
            ``src-exchange`` and ``src_exchange``).
        label_start: index into the path where the field label starts (the entry's own path
            is not repeated in messages).
    """

    def __init__(
        self,
        data: Mapping[str, Any],
        path: Path,
        where: Where,
        context: str,
        normalize: Callable[[str], str] = lambda key: key,
        label_start: int | None = None,
    ):
        self.data = data
        self.path = tuple(path)
        self.where = where
        self.context = context
        self.label_start = len(self.path) if label_start is None else label_start
        self.known: list[str] = []
        self._by_name: dict[str, list[str]] = {}
        for raw in data:
            self._by_name.setdefault(normalize(raw), []).append(raw)
        self._consumed: set = set()

    # -- errors

    def label(self, raw: PathPart, *more: PathPart) -> str:
        """The field label for key ``raw`` (and sub-path ``more``) as shown in messages."""
        return self.where.source.label(self.path + (raw,) + more, self.label_start)

    def error_at(self, sub: Path, message: str) -> ConfigError:
        """An error located at ``self.path + sub``, prefixed with the context."""
        return self.where.error(self.path + tuple(sub), f"{self.context}: {message}")

    def error(self, message: str) -> ConfigError:
        """An error about the table as a whole (located at its header)."""
        return self.error_at((), message)

    # -- raw access

    def take(self, name: str, *aliases: str) -> tuple[str, Any] | None:
        """``(key as written, value)`` for ``name`` or an alias, or ``None``; consumes it."""
        self.known.extend((name, *aliases))
        found = [raw for n in (name, *aliases) for raw in self._by_name.get(n, [])]
        if not found:
            return None
        if len(found) > 1:
            spelled = " and ".join(f"'{r}'" for r in found)
            raise self.error_at((found[-1],), f"{spelled} are the same setting; give it once")
        self._consumed.add(found[0])
        return found[0], self.data[found[0]]

    def has(self, name: str, *aliases: str) -> bool:
        """Whether ``name`` or an alias is present (does not consume)."""
        return any(n in self._by_name for n in (name, *aliases))

    def _fetch(self, name: str, aliases: tuple, default: Any) -> tuple[str, Any] | None:
        """Like :meth:`take`, but a missing key without a default is an error."""
        got = self.take(name, *aliases)
        if got is None and default is _MISSING:
            raise self.error(f"{self.label(name)} is required")
        return got

    def get(self, name: str, *aliases: str, kind: str, default: Any = _MISSING) -> Any:
        """Common body of the typed getters."""
        got = self._fetch(name, aliases, default)
        if got is None:
            return default
        raw, value = got
        return self._check(raw, value, kind)

    def _check(self, raw: str, value: Any, kind: str) -> Any:
        ok = {
            "string": isinstance(value, str),
            "boolean": isinstance(value, bool),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, (int, float)) and not isinstance(value, bool),
            "table": isinstance(value, Mapping),
            "array": isinstance(value, (list, tuple)),
        }[kind]
        if not ok:
            article = "an" if kind[0] in "aeiou" else "a"
            raise self.error_at(
                (raw,), f"{self.label(raw)} must be {article} {kind}, got {type_name(value)}"
            )
        return value

    # -- typed getters

    def string(
        self, name: str, *aliases: str, default: Any = _MISSING, empty: bool = True
    ) -> Any:
        """A string; ``empty=False`` rejects ``""``."""
        got = self._fetch(name, aliases, default)
        if got is None:
            return default
        raw, value = got
        self._check(raw, value, "string")
        if not empty and not value:
            raise self.error_at((raw,), f"{self.label(raw)} must not be empty")
        return value

    def boolean(self, name: str, *aliases: str, default: Any = _MISSING) -> Any:
        """A boolean (``true``/``false``)."""
        return self.get(name, *aliases, kind="boolean", default=default)

    def integer(
        self,
        name: str,
        *aliases: str,
        default: Any = _MISSING,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> Any:
        """An integer within ``[minimum, maximum]``."""
        got = self._fetch(name, aliases, default)
        if got is None:
            return default
        raw, value = got
        self._check(raw, value, "integer")
        self._range(raw, value, minimum, maximum)
        return value

    def number(
        self, name: str, *aliases: str, default: Any = _MISSING, minimum: float | None = None
    ) -> Any:
        """An integer or float, at least ``minimum``; returned as a float."""
        got = self._fetch(name, aliases, default)
        if got is None:
            return default
        raw, value = got
        self._check(raw, value, "number")
        if not math.isfinite(value):
            raise self.error_at((raw,), f"{self.label(raw)} must be a finite number")
        self._range(raw, value, minimum, None)
        return float(value)

    def _range(self, raw: str, value: Any, minimum: Any, maximum: Any) -> None:
        if minimum is not None and maximum is not None and not minimum <= value <= maximum:
            raise self.error_at(
                (raw,), f"{self.label(raw)} must be between {minimum} and {maximum}, got {value}"
            )
        if minimum is not None and value < minimum:
            raise self.error_at((raw,), f"{self.label(raw)} must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise self.error_at((raw,), f"{self.label(raw)} must be <= {maximum}, got {value}")

    def choice(
        self,
        name: str,
        options: Iterable[str],
        *aliases: str,
        default: Any = _MISSING,
        normalize: Callable[[str], str] = lambda v: v,
    ) -> Any:
        """One of ``options`` (after ``normalize``), with a suggestion when it is not."""
        options = list(options)
        got = self._fetch(name, aliases, default)
        if got is None:
            return default
        raw, value = got
        self._check(raw, value, "string")
        if normalize(value) not in options:
            raise self.error_at(
                (raw,),
                f"{self.label(raw)} must be one of {', '.join(options)}, got {shown(value)}"
                + suggest(normalize(value), options),
            )
        return normalize(value)

    def table(self, name: str, *aliases: str, context: str | None = None) -> TableReader:
        """A sub-table as a reader (an empty one when absent)."""
        got = self.take(name, *aliases)
        if got is None:
            return TableReader({}, self.path + (name,), self.where, context or self.context,
                               label_start=self.label_start)
        raw, value = got
        self._check(raw, value, "table")
        return TableReader(value, self.path + (raw,), self.where, context or self.context,
                           label_start=self.label_start)

    def finish(self) -> None:
        """Reject every key no getter consumed, suggesting the nearest known one."""
        for raw in self.data:
            if raw in self._consumed:
                continue
            hint = suggest(raw, dict.fromkeys(self.known))
            where = f" in {self.label_path()}" if self.label_path() else ""
            raise self.error_at((raw,), f"unknown key '{raw}'{where}{hint}")

    def label_path(self) -> str:
        """Label of this table itself (empty for the entry's own table)."""
        return self.where.source.label(self.path, self.label_start)
