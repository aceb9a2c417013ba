"""Binding files for `rtroute route` and the Spark job: destination -> binding key(s).

TOML or JSON (chosen by extension; ``.toml`` or anything else parsed as JSON first, then TOML)::

    # bindings.toml                      // bindings.json
    A = "server1.app1.mod1.info"         {"A": "server1.app1.mod1.info",
    B = ["server1.app1.mod1.error", "x"]  "B": ["server1.app1.mod1.error", "x"]}

An optional top-level ``bindings`` table holding that mapping is accepted too.

Files are checked as config files are (:mod:`rtroute.config.lines`): a file larger than
:data:`MAX_JSON_BYTES` (JSON) or :data:`MAX_TOML_BYTES` (TOML, which ``tomllib`` holds in about
100 bytes of memory per byte) is refused before it is read, and nesting deeper than
``MAX_DEPTH`` or a dotted key of more than ``MAX_KEY_PARTS`` parts is an error with its line.
"""
from __future__ import annotations

import os
from pathlib import Path

from rtroute.config.lines import ConfigError, parse_json, parse_toml

#: Largest JSON binding file accepted (about a million bindings of 60-byte keys).
MAX_JSON_BYTES = 128 * 1024 * 1024
#: Largest TOML binding file accepted; larger tables belong in JSON.
MAX_TOML_BYTES = 16 * 1024 * 1024


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
    toml = path.suffix.lower() == ".toml"
    limit = MAX_TOML_BYTES if toml else MAX_JSON_BYTES
    try:
        size = os.stat(path).st_size
        if size > limit:
            raise BindingsFileError(
                f"{path}: the file is larger than {limit // (1024 * 1024)} MiB"
                + ("; write large binding tables as JSON" if toml else ""))
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BindingsFileError(f"{path}: cannot read: {exc}") from None
    if not text.strip():
        # routing against no bindings would print "unroutable" for every key and exit 0
        stdin = str(path) in ("/dev/stdin", "/proc/self/fd/0", "-")
        raise BindingsFileError(f"{path}: the file is empty" + (
            " (nothing came on standard input: `docker run` passes it only with -i)"
            if stdin else ""))
    try:
        if toml:
            data = parse_toml(text, str(path), limit)
        else:
            try:
                data = parse_json(text, str(path), limit)
            except ConfigError as json_exc:
                try:
                    data = parse_toml(text, str(path), MAX_TOML_BYTES)
                except ConfigError:
                    raise json_exc from None
    except ConfigError as exc:
        raise BindingsFileError(str(exc)) from None
    pairs = parse_bindings(data, str(path))
    if not pairs:
        raise BindingsFileError(f"{path}: no bindings in it (expected destination = binding "
                                "key(s), e.g. A = \"server1.app1.mod1.info\")")
    return pairs
