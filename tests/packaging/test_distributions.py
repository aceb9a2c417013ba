"""The sdist builds the native core on its own; the wheel ships what users import and type-check.

scripts/check-sdist.sh goes further (installs the sdist into fresh venvs of the oldest and
newest Python claimed and runs the core tests there); these are the fast checks of the lists.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _relative(paths) -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in paths}


def test_the_sdist_has_every_file_the_native_build_needs(sdist):
    names = set(sdist.names())
    needed = {"rtroute/core/_native.pyx", "setup.py", "pyproject.toml", "src_c/Makefile"}
    needed |= _relative((ROOT / "src_c").glob("*.c")) | _relative((ROOT / "src_c").glob("*.h"))
    assert len(needed) > 10  # the globs did find the C sources and headers
    assert needed - names == set()


def test_the_sdist_has_every_module_and_the_typing_marker(sdist):
    names = set(sdist.names())
    modules = _relative(p for p in (ROOT / "rtroute").rglob("*.py")
                        if "__pycache__" not in p.parts)
    assert modules - names == set()
    assert {"rtroute/py.typed", "LICENSE", "README.md"} <= names
    # the pages the README links to, and the site's config
    assert {"docs/proxy.md", "docs/rabbitmq-versions.md", "mkdocs.yml"} <= names


def test_the_sdist_carries_no_build_product(sdist):
    """The generated C file is rebuilt from the .pyx by the Cython the build requires."""
    products = [n for n in sdist.names()
                if n == "rtroute/core/_native.c" or n.startswith("src_c/build/")
                or n.endswith((".so", ".o", ".pyc"))]
    assert products == []


def test_the_license_is_an_spdx_expression_without_deprecation_warnings(sdist):
    metadata = sdist.read("PKG-INFO")
    assert "License-Expression: MPL-2.0" in metadata.splitlines()
    assert "License-File: LICENSE" in metadata.splitlines()
    assert "deprecat" not in sdist.log.lower()


def test_build_requirements_are_bounded(project):
    requires = project["build-system"]["requires"]
    assert requires, "no build requirements"
    for requirement in requires:
        assert re.search(r">=[^,]+,\s*<", requirement), f"{requirement!r} needs a range >=X,<Y"


def test_every_runtime_dependency_that_rtroute_patches_is_bounded(project):
    (pika,) = [d for d in project["project"]["dependencies"] if re.match(r"pika\b", d)]
    assert re.search(r"<\s*\d", pika), pika


def test_the_python_versions_claimed_start_at_requires_python(project):
    """scripts/check-sdist.sh tests the first and last of these classifiers."""
    meta = project["project"]
    claimed = [tuple(map(int, c.rsplit(":: ", 1)[1].split(".")))
               for c in meta["classifiers"]
               if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert claimed == sorted(claimed)
    assert claimed == [(3, minor) for minor in range(claimed[0][1], claimed[-1][1] + 1)]
    assert meta["requires-python"] == f">={claimed[0][0]}.{claimed[0][1]}"


@pytest.mark.slow
def test_the_wheel_built_from_the_sdist_ships_the_marker_and_the_native_core(wheel):
    names = wheel.names()
    assert "rtroute/py.typed" in names
    assert [n for n in names if re.fullmatch(r"rtroute/core/_native\..*\.so", n)], names
    assert [n for n in names if n.endswith((".pyx", ".c", ".h"))] == []
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "deprecat" not in wheel.log.lower()
