"""`rtroute spark route|diff` on a Spark standalone cluster (a master and two one-core workers on
loopback), shipping rtroute with `rtroute spark pack` and `--env-archive`: the same rows as
local[2], routed by the archive's native core; and a cluster whose executors cannot import
rtroute fails at once, with one line and no output folder.

The commands run as the user runs them (subprocesses, no PYSPARK_PYTHON in their environment);
the data is tiny, the cluster and the archive are built once per session.
"""
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

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .conftest import PLUGIN, random_messages

pytestmark = [pytest.mark.slow, pytest.mark.island]

REPO = Path(__file__).resolve().parents[2]
RTROUTE = [sys.executable, "-m", "rtroute.cli", "spark"]
EXECUTOR_MEMORY = "512m"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _user_env() -> dict[str, str]:
    """The environment of a user who set nothing for Spark's Python."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def _wait(condition, what: str, log: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            if condition():
                return
        time.sleep(0.5)
    raise AssertionError(f"{what} within {timeout:.0f} s; {log}:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory):
    """``spark://127.0.0.1:PORT``: a master and two workers of one core each, from the Spark
    that pyspark ships (bin/spark-class), torn down afterwards."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    root = tmp_path_factory.mktemp("standalone")
    env = {**_user_env(), "SPARK_HOME": str(spark_class.parent.parent),
           "SPARK_DAEMON_MEMORY": "256m", "SPARK_LOG_DIR": str(root)}
    master_port, master_ui = _free_port(), _free_port()
    url = f"spark://127.0.0.1:{master_port}"
    processes: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> Path:
        log = root / f"{name}.log"
        with log.open("wb") as out:
            processes.append(subprocess.Popen(
                [str(spark_class), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                cwd=root, start_new_session=True))
        return log

    def alive_workers() -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=2) as r:
            return int(json.load(r).get("aliveworkers", 0))

    try:
        log = start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(master_port), "--webui-port", str(master_ui))
        _wait(lambda: alive_workers() >= 0, "the master did not answer", log)
        for n in (1, 2):
            work = root / f"worker{n}"
            work.mkdir()
            log = start(f"worker{n}", "org.apache.spark.deploy.worker.Worker", "--host",
                        "127.0.0.1", "--port", str(_free_port()), "--webui-port",
                        str(_free_port()), "--cores", "1", "--memory", EXECUTOR_MEMORY,
                        "--work-dir", str(work), url)
        _wait(lambda: alive_workers() == 2, "two workers did not register", root / "master.log")
        yield {"url": url, "root": root}
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture(scope="session")
def env_archive(tmp_path_factory) -> Path:
    """The archive of ``rtroute spark pack``, its rtroute built from this checkout (the test
    venv's rtroute is an editable install, which pack refuses to ship)."""
    out = tmp_path_factory.mktemp("pack") / "env.tar.gz"
    done = subprocess.run([*RTROUTE, "pack", "--out", str(out), "--source", str(REPO)],
                          capture_output=True, text=True, env=_user_env(), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "executors run the packed CPython" in done.stdout
    return out


@pytest.fixture(scope="session")
def cluster_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster-data")
    rows = random_messages(600, seed=21) + [{"id": 600, "routing_key": None, "headers": None}]
    archive = root / "archive"
    archive.mkdir()
    for n in range(3):  # three files: several tasks, on both workers
        pq.write_table(pa.Table.from_pylist(rows[n::3]), archive / f"part-{n}.parquet")
    before = root / "before.toml"
    before.write_text("".join(f'{d} = "{k}"\n' for d, k in PLUGIN.items()))
    after = root / "after.json"
    after.write_text(json.dumps({**PLUGIN, "F": [], "H": ["server1.app1.mod1.info", "#.error"]}))
    return {"root": root, "messages": archive, "before": before, "after": after}


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*RTROUTE, *args], capture_output=True, text=True,
                          env=env or _user_env(), check=False)


def _on_cluster(cluster, archive: Path, *args: str) -> subprocess.CompletedProcess:
    done = _run(*args, "--master", cluster["url"], "--env-archive", str(archive),
                "--conf", f"spark.executor.memory={EXECUTOR_MEMORY}")
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _on_local(*args: str) -> subprocess.CompletedProcess:
    done = _run(*args, "--master", "local[2]")
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _rows(path: Path) -> list[dict]:
    return pq.read_table(path).sort_by("id").to_pylist()


def _assert_archive_core(cluster, stderr: str) -> None:
    """The executors routed with the native core unpacked from the archive in a worker's
    directory (not this checkout's), under the archive's interpreter."""
    lines = [line for line in stderr.splitlines() if line.startswith("routed with the ")]
    assert lines, stderr
    for line in lines:
        assert line.startswith("routed with the native core "), line
        core = line.split()[5]
        assert core.startswith(str(cluster["root"] / "worker")), line
        assert "/rtroute_env/lib/python3" in core and "/rtroute/core/_native" in core, line
        assert f"(python {core.split('/rtroute_env/')[0]}/rtroute_env/bin/python3" in line, line


def test_route_on_a_standalone_cluster_equals_local_row_for_row(
        standalone_cluster, env_archive, cluster_files, tmp_path):
    common = ["route", "--messages", str(cluster_files["messages"]),
              "--bindings", str(cluster_files["before"])]
    cluster = _on_cluster(standalone_cluster, env_archive, *common, "--out",
                          str(tmp_path / "cluster"))
    local = _on_local(*common, "--out", str(tmp_path / "local"))
    assert cluster.stdout.split("\n\n")[:-1] == local.stdout.split("\n\n")[:-1]  # the tables
    expected = _rows(tmp_path / "local")
    assert len(expected) == 601
    assert _rows(tmp_path / "cluster") == expected
    _assert_archive_core(standalone_cluster, cluster.stderr)
    assert "executors: native core " in cluster.stderr


def test_diff_on_a_standalone_cluster_equals_local_row_for_row(
        standalone_cluster, env_archive, cluster_files, tmp_path):
    common = ["diff", "--messages", str(cluster_files["messages"]),
              "--before", str(cluster_files["before"]), "--after", str(cluster_files["after"])]
    cluster = _on_cluster(standalone_cluster, env_archive, *common, "--out",
                          str(tmp_path / "cluster"))
    local = _on_local(*common, "--out", str(tmp_path / "local"))
    assert cluster.stdout.split("\n\n")[:-1] == local.stdout.split("\n\n")[:-1]
    expected = _rows(tmp_path / "local")
    assert 0 < len(expected) < 601  # some messages change, not all
    assert _rows(tmp_path / "cluster") == expected
    _assert_archive_core(standalone_cluster, cluster.stderr)


def test_executors_without_rtroute_fail_at_once_with_one_line_and_no_output(
        standalone_cluster, cluster_files, tmp_path):
    # an executor Python that has the standard library and pyspark (from the workers' Spark)
    # but no site-packages: what a node without rtroute installed gives
    python = tmp_path / "bare-python"
    python.write_text(f'#!/bin/sh\nexec {Path(sys.executable).resolve()} -S "$@"\n')
    python.chmod(0o755)
    out = tmp_path / "routed"
    done = _run("route", "--messages", str(cluster_files["messages"]), "--bindings",
                str(cluster_files["before"]), "--out", str(out), "--master",
                standalone_cluster["url"], "--conf", f"spark.executor.memory={EXECUTOR_MEMORY}",
                env={**_user_env(), "PYSPARK_PYTHON": str(python)})
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: the executors cannot import rtroute (ModuleNotFoundError: "
                           "No module named 'rtroute'"), done.stderr
    assert "rtroute spark pack --out env.tar.gz" in last and "--env-archive" in last
    assert "Traceback" not in done.stderr
    assert not out.exists()
    assert not list(tmp_path.glob(".routed*"))
