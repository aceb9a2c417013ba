"""One way to run an rtroute command as a real process under test (so that it can be killed
with ``kill -9``): its output in a log file, its ``/status`` endpoint on a free port, a
graceful stop that fails the test when SIGTERM is ignored. The sidecar, shovel and proxy
fixtures build on :class:`RtrouteProcess`."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO

import pytest

from rtroute.ops.netaddr import free_port


class RtrouteProcess:
    """``python -m MODULE ARGS`` (e.g. ``rtroute.cli run ...``), output appended to ``log``.

    Args:
        module: the module run with ``-m``.
        args: its arguments.
        log: the log file.
        http: give it ``--http 127.0.0.1:PORT`` (a free port, :attr:`port`).
    """

    def __init__(self, module: str, args: list[str], log: Path, http: bool = True,
                 port: int | None = None) -> None:
        self.port = port or free_port()
        self.log_path = log
        self._log: IO[bytes] = open(log, "ab")  # noqa: SIM115 - the child writes until it exits
        extra = ["--http", f"127.0.0.1:{self.port}"] if http else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args, *extra], stdout=self._log,
            stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))

    def status(self) -> dict | None:
        """Its ``/status``, or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/status", timeout=2) as r:
                return json.load(r)
        except OSError:
            return None

    def log(self) -> str:
        """The end of its log."""
        return self.log_path.read_text(errors="replace")[-4000:]

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    kill = kill9

    def terminate(self, timeout: float = 20) -> int:
        """SIGTERM, and its exit status; fails the test if it does not exit in ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                pytest.fail(f"{self.proc.args[2]} ignored SIGTERM for {timeout} s:\n{self.log()}")
        return self.proc.returncode

    def stop(self) -> None:
        """At teardown: gone, whatever its state (SIGKILL if it still runs)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self._log.close()


def systemd_notifications(tmp_path: Path, args: list[str], env: dict[str, str]
                          ) -> tuple[bytes, bytes, int]:
    """Runs ``python -m rtroute.cli ARGS`` with a ``NOTIFY_SOCKET`` (as systemd's
    ``Type=notify`` does): its first notification, SIGTERM, its next one and its exit status."""
    import socket

    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(path))
        server.settimeout(30)
        proc = subprocess.Popen([sys.executable, "-m", "rtroute.cli", *args],
                                env=dict(env, NOTIFY_SOCKET=str(path)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            ready = server.recv(200)
            proc.terminate()
            stopping = server.recv(200)
            return ready, stopping, proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def stop_group(proc: subprocess.Popen, log: Path, timeout: float = 20) -> None:
    """SIGTERM to the process group that ``proc`` leads (a shell and what it started), then
    wait until every process of it has exited; fails the test if one ignores SIGTERM."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"ignored SIGTERM for {timeout} s:\n{log.read_text(errors='replace')}")
    deadline = time.monotonic() + timeout
    while _group_alive(proc.pid):
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"ignored SIGTERM for {timeout} s:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
