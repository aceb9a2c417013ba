"""An install without the native core works, and says so where an operator looks: the log of
`rtroute run`."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

from click.testing import CliRunner

import rtroute.core
import rtroute.ops.logsetup
from rtroute.cli import main


def _core_in_a_fresh_process(**env: str) -> list[str]:
    code = ("import rtroute.core as c; print(c.IMPLEMENTATION); print(c.FALLBACK_REASON); "
            "print(c.warn_if_fallback())")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                          capture_output=True, text=True, check=True)
    return done.stdout.splitlines() + [done.stderr]


def test_rtroute_pure_selects_the_twin_and_warns_why():
    implementation, reason, warned, stderr = _core_in_a_fresh_process(RTROUTE_PURE="1")
    assert (implementation, reason, warned) == ("reference", "RTROUTE_PURE=1 is set", "True")
    assert "pure-Python matching core" in stderr and "RTROUTE_PURE=1" in stderr
    assert "reinstall" not in stderr  # asked for: no advice to rebuild


def test_a_missing_extension_warns_with_the_reason_and_the_remedy(monkeypatch, caplog):
    monkeypatch.setattr(rtroute.core, "FALLBACK_REASON",
                        "the native extension cannot be imported (No module named x)")
    monkeypatch.setattr(rtroute.core, "_NATIVE_MISSING", True)
    with caplog.at_level(logging.WARNING, logger="rtroute.core"):
        assert rtroute.core.warn_if_fallback() is True
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "No module named x" in record.getMessage()
    assert "C compiler" in record.getMessage()


def test_the_native_core_is_silent(monkeypatch, caplog):
    monkeypatch.setattr(rtroute.core, "FALLBACK_REASON", None)
    with caplog.at_level(logging.DEBUG):
        assert rtroute.core.warn_if_fallback() is False
    assert caplog.records == []


def test_rtroute_run_checks_the_core_once_logging_is_set_up(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(rtroute.ops.logsetup, "configure", lambda *a, **k: calls.append("logging"))
    monkeypatch.setattr(rtroute.core, "warn_if_fallback", lambda *a, **k: calls.append("core"))
    result = CliRunner().invoke(main, ["run"])  # nothing to serve: stops right after
    assert result.exit_code == 2, result.output
    assert calls == ["logging", "core"]


def test_version_says_which_matching_core_is_in_use(monkeypatch):
    """``pip install .`` without a compiler gives the pure-Python core: ``--version`` says so
    (before: the version alone, whatever the core)."""
    native = CliRunner().invoke(main, ["--version"])
    assert native.exit_code == 0
    if rtroute.core.FALLBACK_REASON is None:
        assert native.output.endswith("(native core)\n")
    monkeypatch.setattr(rtroute.core, "FALLBACK_REASON",
                        "the native extension cannot be imported (No module named x)")
    twin = CliRunner().invoke(main, ["--version"])
    assert twin.exit_code == 0 and twin.output.startswith("rtroute, version ")
    assert "(pure-Python core, the native one is not in use: the native extension cannot be " \
        "imported (No module named x))" in twin.output
