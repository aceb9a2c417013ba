"""`rtroute spark pack`: one archive that gives every executor rtroute with its native core.

The archive is a small relocatable CPython prefix, as conda-pack makes one, not a venv:

- ``bin/python``: a launcher script that runs the packed interpreter from wherever the archive
  was unpacked (it sets ``PYTHONHOME`` and, for a shared-library build, ``LD_LIBRARY_PATH``);
- ``bin/python3.X`` and ``lib/libpython3.X.so*``: copies of the interpreter this command runs on;
- ``lib/python3.X/``: its standard library (no ``test``, ``idlelib``, ``tkinter``, ...);
- ``lib/python3.X/site-packages/``: rtroute with its compiled core, pyarrow, pandas and what they
  and rtroute require, copied from this environment (the same versions the driver runs); never
  pyspark or py4j: each worker takes those from its own Spark installation.

A venv-pack archive would be smaller, but its ``bin/python`` is a symlink to the build machine's
interpreter path, so every node would need that interpreter at that path; this archive needs
only the same OS and architecture, a glibc at least as new, and the few system libraries the
standard library's extension modules link (:attr:`PackResult.system_libraries`). Spark itself
requires the driver's Python to have the executors' major.minor version.

rtroute is not on PyPI: the rtroute packed is the installed one (a regular, non-editable
install) or, with ``source``, a wheel built from a checkout. An editable install (its code stays
in the checkout) and a build without the native core are refused.
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

# what executors need besides rtroute itself (mapInArrow's Arrow and pandas sides)
EXECUTOR_PACKAGES = ("pyarrow", "pandas")
# provided by each worker's Spark installation (pyspark.zip, py4j-*.zip on its PYTHONPATH)
NEVER_PACKED = frozenset({"pyspark", "py4j", "pyspark-client", "pyspark-connect"})
# standard library parts no executor imports
_STDLIB_SKIP = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib",
                          "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data"})
# a package's own test suite (pandas/tests, pyarrow/tests, numpy/*/tests): never imported
_PACKAGE_SKIP = frozenset({"tests"})
# glibc itself: the requirement is stated as its version, not as a library list
_GLIBC = re.compile(r"^(libc|libm|libpthread|libdl|librt|libutil|libresolv|libcrypt|"
                    r"ld-linux[-\w]*|linux-vdso)\.so")
_SOURCE_SKIP = frozenset({".git", ".venv", "venv", "build", "dist", "__pycache__",
                          ".pytest_cache", ".hypothesis", ".benchmarks", ".ruff_cache",
                          "node_modules"})

LAUNCHER = """#!/bin/sh
# Written by rtroute spark pack: runs the packed CPython wherever this archive is unpacked.
env_dir=$(cd "$(dirname "$0")/.." && pwd -P)
PYTHONHOME=$env_dir
PYTHONNOUSERSITE=1
LD_LIBRARY_PATH=$env_dir/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}
export PYTHONHOME PYTHONNOUSERSITE LD_LIBRARY_PATH
exec "$env_dir/bin/{binary}" "$@"
"""

# run by the packed interpreter before the archive is written: what an executor will see
_PROBE = """
import json, sys
import pandas, pyarrow
import rtroute.core as core
native = sys.modules.get("rtroute.core._native")
print(json.dumps({"implementation": core.IMPLEMENTATION, "reason": core.FALLBACK_REASON,
                  "core": getattr(native, "__file__", None), "prefix": sys.prefix,
                  "pyarrow": pyarrow.__version__, "pandas": pandas.__version__}))
"""


class PackError(Exception):
    """The environment cannot be packed; the message says what to do instead."""


@dataclass
class PackResult:
    """What :func:`build_pack` wrote.

    Attributes:
        path: the archive.
        bytes: its size.
        seconds: time taken.
        python: the packed interpreter's version (``3.11.7``).
        machine: its architecture (``x86_64``).
        glibc: the glibc version it was built against ("" when not glibc).
        system_libraries: libraries outside glibc that the packed interpreter or its standard
            library link (``libssl.so.3`` ...): every node needs them installed.
        packages: ``name==version`` of every distribution packed.
        core: the native core's path inside the archive.
        rtroute_from: where the packed rtroute came from (an installed path or a built wheel).
    """

    path: Path
    bytes: int
    seconds: float
    python: str
    machine: str
    glibc: str
    system_libraries: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    core: str = ""
    rtroute_from: str = ""

    def requirement(self) -> str:
        """The interpreter and node requirement, in one paragraph for the user."""
        glibc = f" with glibc >= {self.glibc}" if self.glibc else ""
        libraries = (f" and these system libraries: {', '.join(self.system_libraries)}"
                     if self.system_libraries else "")
        minor = ".".join(self.python.split(".")[:2])
        return (f"executors run the packed CPython {self.python} (bin/python in the archive, "
                f"relocatable; no Python on the nodes is used): every node needs Linux "
                f"{self.machine}{glibc}{libraries}. The driver must run Python {minor} too "
                f"(Spark refuses a driver/worker minor version mismatch).")


def _name(requirement: str) -> str | None:
    """The distribution a requirement names, or None when only an extra asks for it."""
    text, _, marker = requirement.partition(";")
    if re.search(r"\bextra\s*==", marker):
        return None
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", text)
    return match.group(1) if match else None


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_closure(required: Iterable[str], wanted: Iterable[str] = ()
                        ) -> list[metadata.Distribution]:
    """The installed distributions reachable from ``required`` and ``wanted`` through
    requirements that are not behind an extra. A wanted or indirect requirement that is not
    installed is skipped (its environment marker was false here, as ``tomli`` on Python 3.11);
    pyspark and py4j are never included.

    Raises:
        PackError: a required distribution is not installed.
    """
    roots = [_canonical(n) for n in required]
    found: dict[str, metadata.Distribution] = {}
    todo = [*roots, *wanted]
    while todo:
        name = _canonical(todo.pop())
        if name in found or name in NEVER_PACKED:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            if name in roots:
                raise PackError(f"{name} is not installed here: pip install 'rtroute[spark]' "
                                "first (the pack copies this environment's packages)") from None
            continue
        found[name] = dist
        todo.extend(n for n in map(_name, dist.requires or []) if n)
    return [found[n] for n in sorted(found)]


def editable_location(dist: metadata.Distribution) -> str | None:
    """The source directory of an editable (``pip install -e``) install, else None."""
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    info = json.loads(text)
    if not info.get("dir_info", {}).get("editable"):
        return None
    url = info.get("url", "")
    return url.removeprefix("file://") or "?"


def _copy_distribution(dist: metadata.Distribution, site: Path) -> None:
    """Copies the files a distribution installed into site-packages (its RECORD), except its
    test suites and anything outside site-packages (console scripts)."""
    for entry in dist.files or []:
        parts = Path(entry).parts
        if not parts or parts[0] == ".." or _PACKAGE_SKIP.intersection(parts[:-1]):
            continue
        source = Path(dist.locate_file(entry))
        if not source.is_file():
            continue
        target = site.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def build_wheel(source: Path, into: Path, echo: Callable[[str], None]) -> Path:
    """Builds rtroute's wheel from a checkout (a copy of it, so the checkout gets no build
    files), with the native core required (``RTROUTE_REQUIRE_NATIVE=1``).

    Raises:
        PackError: not a checkout of rtroute, or the build failed (its last lines quoted).
    """
    if not (source / "pyproject.toml").is_file() or not (source / "rtroute").is_dir():
        raise PackError(f"{source} is not an rtroute checkout (no pyproject.toml and rtroute/)")
    tree = into / "source"
    shutil.copytree(source, tree, symlinks=True, ignore=lambda _d, names: [
        n for n in names if n in _SOURCE_SKIP or n.endswith((".egg-info", ".so", ".o"))])
    echo(f"building rtroute's wheel from {source} ...")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
         "-q", "-w", str(into / "wheel"), str(tree)],
        check=False, capture_output=True, text=True,
        env={**os.environ, "RTROUTE_REQUIRE_NATIVE": "1"})
    wheels = sorted((into / "wheel").glob("rtroute-*.whl"))
    if done.returncode or not wheels:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise PackError(f"building rtroute's wheel from {source} failed: {tail}")
    return wheels[0]


def _copy_interpreter(prefix: Path) -> tuple[str, list[Path]]:
    """Copies the running interpreter, its shared library and its standard library under
    ``prefix``; returns the binary's name and the ELF files to check for system libraries."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    binary = f"python{version}"
    real = Path(os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable))
    (prefix / "bin").mkdir(parents=True)
    shutil.copy2(real, prefix / "bin" / binary)
    elves = [prefix / "bin" / binary]
    soname = sysconfig.get_config_var("INSTSONAME")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and soname:
        (prefix / "lib").mkdir()
        shutil.copy2(Path(sysconfig.get_config_var("LIBDIR")) / soname, prefix / "lib" / soname)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    target = prefix / "lib" / f"python{version}"
    shutil.copytree(stdlib, target, symlinks=False, ignore=lambda directory, names: [
        n for n in names if (n in _STDLIB_SKIP or n.startswith("config-"))
        and Path(directory) == stdlib])
    for module in (target / "lib-dynload").glob("_tkinter*.so"):
        module.unlink()  # tkinter itself is not packed
    elves += sorted((target / "lib-dynload").glob("*.so"))
    return binary, elves


def system_libraries(elves: Iterable[Path], prefix: Path) -> list[str]:
    """Shared libraries the given ELF files load from outside ``prefix``, glibc's own excepted
    (best effort: empty when ``ldd`` is missing)."""
    if not shutil.which("ldd"):
        return []
    needed: set[str] = set()
    env = {**os.environ, "LD_LIBRARY_PATH": str(prefix / "lib")}
    for elf in elves:
        done = subprocess.run(["ldd", str(elf)], check=False, capture_output=True, text=True,
                              env=env)
        for line in done.stdout.splitlines():
            name, arrow, where = line.strip().partition(" => ")
            if not arrow or _GLIBC.match(name) or where.startswith(str(prefix)):
                continue
            needed.add(name)
    return sorted(needed)


def build_pack(out: str | os.PathLike, source: str | os.PathLike | None = None,
               echo: Callable[[str], None] = print, compresslevel: int = 1) -> PackResult:
    """Writes the executors' environment archive (a ``.tar.gz``) to ``out``.

    Args:
        out: the archive to write (written under a temporary name, then renamed).
        source: an rtroute checkout to build the packed rtroute from (needed when the installed
            rtroute is editable); default: the installed rtroute.
        echo: progress lines.
        compresslevel: gzip level (1 is several times faster than 6 for about 10% more bytes).

    Raises:
        PackError: an editable install without ``source``, a build without the native core, a
            missing pyarrow/pandas, a failed wheel build or a packed interpreter that does not run.
    """
    started = time.monotonic()
    out = Path(out)
    if sys.platform != "linux":
        raise PackError(f"rtroute spark pack builds Linux archives; this is {sys.platform}")
    installed = metadata.distribution("rtroute")
    editable = editable_location(installed)
    if editable and source is None:
        raise PackError(f"rtroute is an editable install (pip install -e {editable}): its code "
                        "stays in that checkout, which executors cannot see; use --source "
                        f"{editable} to pack a wheel built from it, or install rtroute without -e")
    with tempfile.TemporaryDirectory(prefix="rtroute-pack-") as scratch:
        work = Path(scratch)
        prefix = work / "env"
        binary, elves = _copy_interpreter(prefix)
        site = prefix / "lib" / binary / "site-packages"
        site.mkdir()
        dists = requirement_closure(
            EXECUTOR_PACKAGES, [n for n in map(_name, installed.requires or []) if n])
        echo(f"copying {len(dists)} distributions and CPython {platform.python_version()} ...")
        for dist in dists:
            _copy_distribution(dist, site)
        packages = [f"{d.metadata['Name']}=={d.version}" for d in dists]
        if source is not None:
            wheel = build_wheel(Path(source).resolve(), work, echo)
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(site)
            rtroute_from = f"a wheel built from {Path(source).resolve()} ({wheel.name})"
        else:
            _copy_distribution(installed, site)
            rtroute_from = f"the installed rtroute ({installed.locate_file('')})"
        packages.append(f"rtroute=={installed.version}")
        launcher = prefix / "bin" / "python"
        launcher.write_text(LAUNCHER.format(binary=binary))
        launcher.chmod(0o755)
        probe = _probe(prefix)
        if probe["implementation"] != "native":
            raise PackError(f"the rtroute to pack has no native core ({probe['reason']}): "
                            "executors would match with the pure-Python twin, orders of "
                            "magnitude slower; install it where a C compiler is available "
                            "(RTROUTE_REQUIRE_NATIVE=1 makes that an install error)")
        libraries = system_libraries(elves, prefix)
        echo(f"writing {out} ...")
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(f".{out.name}.partial")
        try:
            with tarfile.open(partial, "w:gz", compresslevel=compresslevel) as tar:
                for child in sorted(prefix.iterdir()):
                    tar.add(child, arcname=child.name)
            os.replace(partial, out)
        finally:
            partial.unlink(missing_ok=True)
    return PackResult(
        path=out, bytes=out.stat().st_size, seconds=time.monotonic() - started,
        python=platform.python_version(), machine=platform.machine(),
        glibc=platform.libc_ver()[1] if platform.libc_ver()[0] == "glibc" else "",
        system_libraries=libraries, packages=sorted(packages, key=str.lower),
        core=str(Path(probe["core"]).relative_to(prefix)), rtroute_from=rtroute_from)


def _probe(prefix: Path) -> dict:
    """Runs the packed interpreter with a clean environment: rtroute, pyarrow and pandas import
    and the core is the packed one.

    Raises:
        PackError: the packed interpreter fails, or imports from outside the archive.
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTHON") and k not in ("RTROUTE_PURE", "VIRTUAL_ENV")}
    done = subprocess.run([str(prefix / "bin" / "python"), "-c", _PROBE], check=False,
                          capture_output=True, text=True, env=env, cwd=prefix)
    if done.returncode:
        tail = " | ".join(done.stderr.strip().splitlines()[-2:])
        raise PackError(f"the packed interpreter cannot import rtroute, pyarrow and pandas: {tail}")
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    for path in (probe["prefix"], probe["core"]):
        if path and not Path(path).resolve().is_relative_to(prefix.resolve()):
            raise PackError(f"the packed interpreter loads {path}, outside the archive")
    return probe
