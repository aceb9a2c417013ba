"""Where a config value came from, and the error that points there.

``tomllib`` and ``json`` return plain data without positions, so this module scans the source
text a second time (after the real parser accepted it) and records, for every key and every
array element, the line it starts on. A path is a tuple of keys and array indices, e.g.
``("shovel", 0, "publish_properties", "priority")``; a lookup falls back to the nearest
recorded ancestor, so an error about a missing key points at its table.

It also holds :class:`TableReader`, the checked reader every config section uses: typed getters
that consume keys, and :meth:`TableReader.finish`, which rejects what is left with a "did you
mean" suggestion.
"""
from __future__ import annotations

import bisect
import difflib
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Union

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

PathPart = Union[str, int]
Path = tuple[PathPart, ...]

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
    return [i for i, c in enumerate(text) if c == "\n"]


# --------------------------------------------------------------------------------------- TOML

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class _TomlScanner:
    """Records key and element lines of a TOML document that ``tomllib`` already accepted."""

    def __init__(self, text: str):
        self.s = text
        self.i = 0
        self.nl = _newlines(text)
        self.map = SourceMap()
        self.table: Path = ()
        self.aot_index: dict[Path, int] = {}

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
        key = self.resolve(parts[:-1]) + (parts[-1],)
        index = self.aot_index.get(key, -1) + 1
        self.aot_index[key] = index
        self.map.lines.setdefault(key, line)
        self.table = key + (index,)
        self.map.lines[self.table] = line

    def table_header(self) -> None:
        line = self.line()
        self.i += 1
        parts = self.key()
        self.skip_space()
        self.i += 1  # "]"
        self.table = self.resolve(parts)
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

    def key_value(self, base: Path) -> None:
        line = self.line()
        parts = self.key()
        for n in range(1, len(parts)):
            self.map.lines.setdefault(base + tuple(parts[:n]), line)
        path = base + tuple(parts)
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
                self.map.lines[path + (index,)] = self.line()
                self.value(path + (index,))
                self.skip_blank()
                if self.peek() == ",":
                    self.i += 1
                index += 1
        else:
            while self.i < len(self.s) and self.s[self.i] not in ",]}\n#":
                self.i += 1

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


def toml_source_map(text: str) -> SourceMap:
    """Lines of every key, table header and array element of a (valid) TOML document."""
    return _TomlScanner(text).run()


def load_toml(text: str, path: str | None = None) -> tuple[dict[str, Any], SourceMap]:
    """Parse TOML text; a syntax error becomes a :class:`ConfigError` with its line."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        line = int(m.group(1)) if m else None
        msg = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", msg)
        raise ConfigError(f"invalid TOML: {msg}", line, path) from None
    return data, toml_source_map(text)


# --------------------------------------------------------------------------------------- JSON


class _JsonScanner:
    """Records key and element lines of a JSON document that ``json`` already accepted."""

    _SCALAR_END = re.compile(r"[\s,\]}]")

    def __init__(self, text: str):
        self.s = text
        self.i = 0
        self.nl = _newlines(text)
        self.map = SourceMap()

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
                self.map.lines[path + (key,)] = line
                self.skip_ws()
                self.i += 1  # ":"
                self.value(path + (key,))
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
                self.map.lines[path + (index,)] = line_at(self.nl, self.i)
                self.value(path + (index,))
                index += 1
        elif c == '"':
            self.string()
        else:
            m = self._SCALAR_END.search(self.s, self.i)
            self.i = m.start() if m else len(self.s)


def json_source_map(text: str) -> SourceMap:
    """Lines of every key and array element of a (valid) JSON document."""
    scanner = _JsonScanner(text)
    scanner.value(())
    return scanner.map


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
                f"{self.label(raw)} must be one of {', '.join(options)}, got {value!r}"
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
