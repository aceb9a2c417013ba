"""The checkout as a clean clone would have it, and its sdist and wheel built once per session.

The build runs on a copy of the files git would check out (tracked, plus untracked ones not
ignored: work in progress), never in the checkout itself, so that build products lying in the
tree (the generated ``_native.c``, a compiled ``.so``, a stale ``rtroute.egg-info``) can neither
leak into the sdist nor hide a file missing from it.

``RTROUTE_TEST_DIST=DIR`` names an sdist, the wheel built from it and the build's log made that
way earlier in the same run (``scripts/check-sdist.sh``'s ``RTROUTE_SDIST_OUT``, which
``scripts/test.sh`` sets): the tests check those instead of building them once more.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


@pytest.fixture(scope="session")
def project() -> dict:
    """pyproject.toml of the checkout, parsed."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _checkout_files() -> list[str]:
    """The files of a clean clone plus untracked work, relative to ROOT (git's view)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True).stdout
    return [name for name in out.decode().split("\0") if name and (ROOT / name).is_file()]


def _build(args: list[str], cwd: Path, outdir: Path) -> str:
    pytest.importorskip("build", reason="python -m build is needed (the test extra has it)")
    env = dict(os.environ, RTROUTE_REQUIRE_NATIVE="1")
    done = subprocess.run([sys.executable, "-m", "build", *args, "--outdir", str(outdir), "."],
                          cwd=cwd, env=env, capture_output=True, text=True, check=False)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    return log


class Built:
    """One distribution file and the build's output."""

    def __init__(self, path: Path, log: str) -> None:
        self.path = path
        self.log = log

    def names(self) -> list[str]:
        """Member names, without the sdist's top-level ``rtroute-VERSION/`` folder."""
        if self.path.suffix == ".whl":
            with zipfile.ZipFile(self.path) as whl:
                return whl.namelist()
        with tarfile.open(self.path) as sdist:
            return [m.name.split("/", 1)[1] for m in sdist.getmembers()
                    if m.isfile() and "/" in m.name]

    def read(self, name: str) -> str:
        """A member's text (an sdist member without its top-level folder)."""
        if self.path.suffix == ".whl":
            with zipfile.ZipFile(self.path) as whl:
                return whl.read(name).decode()
        with tarfile.open(self.path) as sdist:
            top = sdist.getnames()[0].split("/", 1)[0]
            return sdist.extractfile(f"{top}/{name}").read().decode()


def _prebuilt(pattern: str) -> Built | None:
    """The file of RTROUTE_TEST_DIST matching ``pattern``, with the build's log, if named."""
    where = os.environ.get("RTROUTE_TEST_DIST")
    if not where:
        return None
    (path,) = Path(where).glob(pattern)
    return Built(path, (Path(where) / "build.log").read_text())


@pytest.fixture(scope="session")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The sdist built from a clean copy of the checkout (a few seconds)."""
    prebuilt = _prebuilt("*.tar.gz")
    if prebuilt is not None:
        return prebuilt
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to build an sdist from")
    work = tmp_path_factory.mktemp("sdist")
    tree = work / "tree"
    for name in _checkout_files():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name)
    log = _build(["--sdist"], tree, work / "dist")
    (path,) = (work / "dist").glob("*.tar.gz")
    return Built(path, log)


@pytest.fixture(scope="session")
def wheel(sdist: Built, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The wheel built from that sdist alone, native core compiled (10-20 s)."""
    prebuilt = _prebuilt("*.whl")
    if prebuilt is not None:
        return prebuilt
    work = tmp_path_factory.mktemp("wheel")
    with tarfile.open(sdist.path) as archive:
        if hasattr(tarfile, "data_filter"):  # 3.12+ and late patch releases of 3.9-3.11
            archive.extractall(work, filter="data")
        else:
            archive.extractall(work)
    (tree,) = [p for p in work.iterdir() if p.is_dir()]
    log = _build(["--wheel"], tree, work / "dist")
    (path,) = (work / "dist").glob("*.whl")
    return Built(path, log)
