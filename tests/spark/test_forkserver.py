"""The fork server of a local master's driver-side Python processes: a module run through its
client behaves as ``python -m MODULE`` (arguments, environment, working directory, standard
streams, exit status), in a fork of the server; anything else, or no server, runs a new
interpreter."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from rtroute.spark import forkserver

MODULE = "rtroute_forkserver_probe"
PROBE = """
import json, os, sys
line = sys.stdin.readline().strip()
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(),
                  "argv": sys.argv, "line": line, "probe": os.environ.get("PROBE"),
                  "name": __name__, "warm": "pyarrow" in sys.modules}))
print("to stderr", file=sys.stderr)
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
"""


@pytest.fixture
def server(tmp_path):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / f"{MODULE}.py").write_text(PROBE)
    path = str(tmp_path / "server.sock")
    process = forkserver.start(path, (MODULE,))
    deadline = time.monotonic() + 60
    while not os.path.exists(path):  # it binds once its imports are done
        assert process.poll() is None, "the fork server ended"
        assert time.monotonic() < deadline, "the fork server never listened"
        time.sleep(0.05)
    yield path, tmp_path
    process.stdin.close()
    assert process.wait(10) == 0
    assert not os.path.exists(path)


def _client(path, args, cwd, env):
    return subprocess.run([sys.executable, "-I", "-S", "-c", forkserver.CLIENT, path,
                           sys.executable, *args], input="hello\n", capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=60, check=False)


def test_a_module_runs_in_a_fork_as_python_dash_m_would(server):
    import json

    path, tmp_path = server
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "mods"), "PROBE": "yes", "PROBE_EXIT": "3"}
    result = _client(path, ["-m", MODULE], work, env)
    assert result.returncode == 3, result.stderr
    seen = json.loads(result.stdout)
    assert seen["line"] == "hello" and seen["probe"] == "yes" and seen["cwd"] == str(work)
    assert seen["name"] == "__main__" and seen["argv"][0].endswith(f"{MODULE}.py")
    assert seen["warm"]  # a fork of the server, which imported pyarrow
    assert "to stderr" in result.stderr


def test_another_module_or_no_server_runs_a_new_interpreter(server, tmp_path):
    import json

    path, _ = server
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "mods")}
    code = "import json, sys; print(json.dumps('pyarrow' in sys.modules))"
    result = _client(path, ["-c", code], tmp_path, env)
    assert result.returncode == 0 and json.loads(result.stdout) is False
    result = _client(str(tmp_path / "no-server.sock"), ["-m", MODULE], tmp_path, env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[0])["warm"] is False


def test_sigterm_to_the_client_ends_the_fork(server):
    path, tmp_path = server
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "mods")}
    (tmp_path / "mods" / "rtroute_forkserver_sleeper.py").write_text(
        "import os, sys, time\nprint(os.getpid(), flush=True)\ntime.sleep(120)\n")
    process = forkserver.start(path + "2", ("rtroute_forkserver_sleeper",))
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(path + "2"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        client = subprocess.Popen([sys.executable, "-I", "-S", "-c", forkserver.CLIENT,
                                   path + "2", sys.executable, "-m",
                                   "rtroute_forkserver_sleeper"], stdout=subprocess.PIPE,
                                  text=True, env=env)
        child = int(client.stdout.readline())
        assert child != client.pid
        client.terminate()
        assert client.wait(10) != 0
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{child}") and _state(child) != "Z":
            assert time.monotonic() < deadline, "the fork outlived its client"
            time.sleep(0.05)
    finally:
        process.stdin.close()
        process.wait(10)


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
