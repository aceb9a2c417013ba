"""mypy is clean on the relay engine and its users (the packages ``[tool.mypy]`` in
pyproject.toml names): their seams are :class:`typing.Protocol` s (rtroute/relay/seams.py),
which only a type checker holds the parts to, and the package ships ``py.typed``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_no_error_in_the_relay_and_its_users():
    try:
        import mypy  # noqa: F401
    except ImportError:
        if os.environ.get("RTROUTE_REQUIRE_DOCS") == "1":  # scripts/test.sh sets it
            pytest.fail("mypy is not installed (the test extra: scripts/setup.sh)")
        pytest.skip("mypy is not installed (the test extra: scripts/setup.sh)")
    # the configuration is pyproject.toml's (its cache: .mypy_cache in the checkout)
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rtroute/relay" in (ROOT / "pyproject.toml").read_text()


def test_the_checked_packages_are_the_relay_and_every_user_of_it():
    """A package that imports the relay is checked too (a new user is not left out)."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    checked = set(config["files"])
    users = set()
    for path in (ROOT / "rtroute").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        package = path.relative_to(ROOT).parts[:2]
        if package[1] != "relay" and ("from rtroute.relay" in text
                                      or "import rtroute.relay" in text):
            users.add("/".join(package))
    assert users, "no user of the relay found: is the test looking in the right place?"
    assert users | {"rtroute/relay"} <= checked, users - checked
