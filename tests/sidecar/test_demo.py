"""The README's main-job command works: the plugin's example through a real sidecar."""
import os
import subprocess
import sys
import uuid

from rtroute.ops.netaddr import free_port
from rtroute.sidecar.demo import run


def test_demo_delivers_the_plugin_readme_example(broker_uri, management_uri):
    lines = []
    received = run(broker_uri, echo=lines.append, management_uri=management_uri)
    got = {q: sorted(keys) for q, keys in received.items()}
    assert got["A"] == sorted(["server1.app1.mod1.info", "*.app1.mod1.info", "#.info",
                               "#.mod1.info", "#", "server1.app1.mod1.*", "server1.app1.#",
                               "server1.app1.mod1.info (CC)"])
    assert got["B"] == sorted(["#", "server1.app1.mod1.*", "server1.app1.#"])
    assert got["C"] == sorted(["#.info", "#.mod1.info", "#", "server1.app1.mod1.info (CC)"])
    assert got["D"] == sorted(["#", "server1.app1.mod1.info (CC)"])
    assert got["E"] == sorted(["#.info", "#", "server1.app1.#"])
    assert got["F"] == sorted(["*.app1.mod1.info", "#.info", "#.mod1.info", "#"])
    assert any("A, F" in line for line in lines)


def _processes_with(mark: str) -> list[int]:
    """The processes whose environment holds ``mark``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def test_a_broker_that_does_not_answer_is_an_error_and_leaves_no_sidecar_behind():
    # the demo's sidecar started before the demo's own connection failed, and outlived it
    mark = f"RTROUTE_TEST_MARK={uuid.uuid4().hex}"
    env = dict(os.environ, RTROUTE_TEST_MARK=mark.split("=", 1)[1])
    port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "rtroute.cli", "demo", "--uri",
         f"amqp://guest:guest@127.0.0.1:{port}/%2F", "--management-uri",
         f"http://127.0.0.1:{free_port()}/"],
        check=False, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    assert f"127.0.0.1:{port}" in done.stderr, done.stderr
    assert _processes_with(mark) == []
