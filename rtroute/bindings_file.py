"""Binding files for `rtroute route` and the Spark job: destination -> binding key(s).

TOML or JSON (chosen by extension; ``.toml`` or anything else parsed as JSON first, then TOML)::

    # bindings.toml                      // bindings.json
    A = "server1.app1.mod1.info"         {"A": "server1.app1.mod1.info",
    B = ["server1.app1.mod1.error", "x"]  "B": ["server1.app1.mod1.error", "x"]}

An optional top-level ``bindings`` table holding that mapping is accepted too.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class BindingsFileError(ValueError):
    """A binding file that cannot be read or has the wrong shape."""


def parse_bindings(data: object, source: str = "<bindings>") -> list[tuple[str, str]]:
    """Returns ``(destination, binding_key)`` pairs from a decoded mapping.

    Raises:
        BindingsFileError: not a mapping of names to a string or a list of strings.
    """
    if isinstance(data, dict) and set(data) == {"bindings"} and isinstance(data["bindings"], dict):
        data = data["bindings"]
    if not isinstance(data, dict):
        raise BindingsFileError(f"{source}: expected a mapping of destination to binding keys")
    pairs = []
    for dest, keys in data.items():
        if isinstance(keys, str):
            keys = [keys]
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise BindingsFileError(
                f"{source}: destination {dest!r}: expected a binding key or a list of them, "
                f"got {type(keys).__name__}")
        pairs.extend((dest, k) for k in keys)
    return pairs


def load_bindings(path: str | Path) -> list[tuple[str, str]]:
    """Reads a binding file (TOML or JSON).

    Raises:
        BindingsFileError: unreadable, not TOML/JSON, or of the wrong shape.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BindingsFileError(f"{path}: cannot read: {exc}") from None
    if path.suffix.lower() == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise BindingsFileError(f"{path}: invalid TOML: {exc}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as json_exc:
            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError:
                raise BindingsFileError(
                    f"{path}:{json_exc.lineno}: invalid JSON: {json_exc.msg}") from None
    return parse_bindings(data, str(path))
