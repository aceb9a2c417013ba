"""Fixtures of the config tests: a TOML case marks the line its error points at with ``# <-``."""
from __future__ import annotations

import textwrap

import pytest

from rtroute.config.rtroute_toml import ConfigError, loads


def _marked_line(text: str) -> int:
    """The 1-based line carrying the ``# <-`` marker."""
    lines = [i + 1 for i, line in enumerate(text.splitlines()) if "# <-" in line]
    assert len(lines) == 1, f"exactly one '# <-' marker expected in:\n{text}"
    return lines[0]


def _load_error(text: str) -> ConfigError:
    """The ConfigError that loading ``text`` raises."""
    with pytest.raises(ConfigError) as info:
        loads(textwrap.dedent(text), "rtroute.toml")
    return info.value


def _assert_error_at_marker(text: str, message: str) -> ConfigError:
    """Loading ``text`` fails on its marked line with ``message`` in the error."""
    text = textwrap.dedent(text)
    error = _load_error(text)
    assert message in error.message, f"{message!r} not in {error.message!r}"
    assert error.line == _marked_line(text), str(error)
    assert str(error).startswith(f"rtroute.toml:{error.line}: ")
    return error


@pytest.fixture
def error_at_marker():
    """``error_at_marker(text, message)``: loading fails on the ``# <-`` line with message."""
    return _assert_error_at_marker


@pytest.fixture
def load_error():
    """``load_error(text)``: the ConfigError that loading the TOML text raises."""
    return _load_error
