"""The checked reader every config section uses, and where a config value came from.

:class:`TableReader` has typed getters that consume keys, and :meth:`TableReader.finish`, which
rejects what is left with a "did you mean" suggestion; every error is a :class:`ConfigError`
with the file and line of the value (:class:`Where`: a document's source map and file name).
:func:`check_amqp_name` rejects an exchange, queue or routing key too long for AMQP.

The documents themselves are read by :mod:`rtroute.config.toml_lines` (TOML) and
:mod:`rtroute.config.json_lines` (JSON), which map the line of every key and array element;
:mod:`rtroute.config.source` has what they share (:class:`ConfigError`, :class:`SourceMap`, the
size and depth limits that keep hostile input linear). Their names are importable from here
too, the one module config sections import.
"""
from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Callable

from rtroute.config.json_lines import json_source_map, parse_json
from rtroute.config.source import (
    MAX_CONFIG_BYTES,
    MAX_DEFINITIONS_BYTES,
    MAX_DEPTH,
    MAX_KEY_PARTS,
    ConfigError,
    Path,
    PathPart,
    SourceMap,
    check_size,
    line_at,
    shown,
)
from rtroute.config.toml_lines import load_toml, parse_toml, toml_source_map
from rtroute.config.validators import shortstr_problem

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_DEFINITIONS_BYTES",
    "MAX_DEPTH",
    "MAX_KEY_PARTS",
    "ConfigError",
    "Path",
    "PathPart",
    "SourceMap",
    "TableReader",
    "Where",
    "check_amqp_name",
    "check_size",
    "json_source_map",
    "line_at",
    "load_toml",
    "parse_json",
    "parse_toml",
    "shown",
    "suggest",
    "token_in_environment",
    "toml_source_map",
    "type_name",
]

_MISSING: Any = object()


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


def check_amqp_name(reader: TableReader, key: str, value: str | None) -> None:
    """Reject an AMQP name (exchange, queue, routing key) longer than a short string allows;
    ``key`` is the key as written, ``None`` passes.

    Raises:
        ConfigError: at ``key``, naming it.
    """
    if value is not None:
        problem = shortstr_problem(value)
        if problem:
            raise reader.error_at((key,), f"{reader.label(key)} {problem}")


def token_in_environment() -> bool:
    """An ops-endpoint token comes from the environment (``RTROUTE_HTTP_TOKEN`` or
    ``RTROUTE_HTTP_TOKEN_FILE``), so a listen beyond loopback needs none in the file."""
    return bool(os.environ.get("RTROUTE_HTTP_TOKEN") or os.environ.get("RTROUTE_HTTP_TOKEN_FILE"))
