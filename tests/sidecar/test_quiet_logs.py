"""Connection failures are one rtroute line each (URI masked, the cause, the next try), not
pika's 6-7 ERROR lines with object reprs; --log-format json gives one JSON object per line."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading

import pytest

from rtroute.amqp import parse_uri

from ..conftest import BROKER_URI

pytestmark = pytest.mark.broker


def _run_until(expected: str, *args: str, timeout: float = 60.0) -> str:
    """What ``rtroute run ARGS`` printed until a line holding ``expected`` (or ``timeout``
    seconds, or its end), then SIGTERM: a process that starts slowly on a busy machine is
    waited for, not cut short."""
    proc = subprocess.Popen([sys.executable, "-m", "rtroute.cli", "run", "--rtopic",
                             "rtroute-test.quiet", "--http", "127.0.0.1:0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if expected in line:
                seen.set()
        seen.set()  # its end

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen.wait(timeout)
    proc.send_signal(signal.SIGTERM)
    proc.wait(20)
    reader.join(20)
    return "".join(lines)


def _with_password(password: str) -> str:
    uri = parse_uri(BROKER_URI, strict=False)
    return f"amqp://{uri.username}:{password}@{uri.host}:{uri.port}/%2F"


def test_a_wrong_password_is_one_clear_masked_line_per_attempt(broker_uri):
    out = _run_until("connection lost or failed", "--uri", _with_password("Hunter2-wrong"))
    lines = out.strip().splitlines()
    failures = [line for line in lines if "connection lost or failed" in line]
    assert failures and all("refused the login" in line and "trying again in" in line
                            for line in failures)
    assert "Hunter2-wrong" not in out
    assert not [line for line in lines if " pika" in line]  # pika's own lines stay at DEBUG
    assert "Traceback" not in out


def test_json_log_lines_parse(broker_uri):
    out = _run_until("refused the login", "--uri", _with_password("wrong"), "--log-format",
                     "json")
    entries = [json.loads(line) for line in out.strip().splitlines()]
    assert {"ts", "level", "logger", "message"} <= set(entries[0])
    assert any(e["level"] == "WARNING" and "refused the login" in e["message"] for e in entries)
