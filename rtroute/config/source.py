"""Where a config value came from, and the error that points there.

``tomllib`` and ``json`` return plain data without positions, so the scanners
(:mod:`rtroute.config.toml_lines`, :mod:`rtroute.config.json_lines`) read the source text a
second time (after the real parser accepted it) and record, for every key and every array
element, the line it starts on, in a :class:`SourceMap`. A path is a tuple of keys and array
indices, e.g. ``("shovel", 0, "publish_properties", "priority")``; a lookup falls back to the
nearest recorded ancestor, so an error about a missing key points at its table.

This module holds what the scanners and the table reader (:mod:`rtroute.config.lines`) share:
:class:`ConfigError`, :class:`SourceMap`, the size and depth limits, and :func:`shown` (a
value in a message, credentials masked).

Hostile input gets a :class:`ConfigError` in time and memory linear in its size, never a
traceback: files above :data:`MAX_CONFIG_BYTES`, nesting deeper than :data:`MAX_DEPTH` and
dotted keys of more than :data:`MAX_KEY_PARTS` parts are rejected before ``tomllib`` or
``json`` see them (the first would recurse past Python's limit, and ``tomllib``'s work per
dotted key grows with the square of its parts).
"""
from __future__ import annotations

import bisect
import contextlib
import gc
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Union

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_DEFINITIONS_BYTES",
    "MAX_DEPTH",
    "MAX_KEY_PARTS",
    "ConfigError",
    "Path",
    "PathPart",
    "SourceMap",
    "check_size",
    "line_at",
    "line_of",
    "newline_offsets",
    "shown",
    "too_many_digits_error",
    "without_cycle_collection",
]

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


def newline_offsets(text: str) -> list[int]:
    """The sorted offsets of ``\\n`` in ``text`` (for :func:`line_at`)."""
    return [m.start() for m in re.finditer("\n", text)]


def line_of(text: str, index: int) -> int:
    """1-based line of character ``index`` of ``text`` (one look-up: no offsets kept)."""
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


@contextlib.contextmanager
def without_cycle_collection() -> Iterator[None]:
    """Pause the cyclic garbage collector: parsers build only acyclic containers, and
    building millions of them wakes the collector over and over (4x slower for ``json``)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def too_many_digits_error(text: str, invalid: str, path: str | None) -> ConfigError:
    """The error for an integer of more digits than Python converts (``int``'s limit),
    at the line of the first such run of digits; ``invalid`` starts the message."""
    limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
    # a run's start only: trying every position inside long runs would be quadratic
    found = re.search(r"(?<![0-9_])[0-9_]{" + str(limit + 1) + ",}", text)
    line = line_of(text, found.start()) if found else None
    return ConfigError(f"{invalid}: an integer has more than {limit} digits", line, path)
