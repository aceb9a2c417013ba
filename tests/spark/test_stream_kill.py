"""`rtroute spark stream` stopped by SIGTERM, then killed with kill -9 in the middle of a
micro-batch (the command, its JVM and its Python workers at once, as a crash of the machine
would), then started again: every message of the stream is in the output exactly once, routed
as the library routes it; with Spark's file sink (the default: read through its log, as
Spark's readers read it) and with batch directories (read by pyarrow)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pyarrow.dataset as ds
import pytest

from ..conftest import wait_for
from .stream_support import (
    bindings_file,
    expected_routing,
    messages,
    publish,
    rabbit_stream,
    read_back,
)

pytestmark = [pytest.mark.broker, pytest.mark.slow,
              pytest.mark.every_broker]  # loss: kill -9 of the streaming query

COUNT = 5000


def _batch_ids(directory) -> set[int]:
    return {int(p.name) for p in directory.iterdir() if p.name.isdigit()} \
        if directory.is_dir() else set()


def _in_flight(checkpoint) -> set[int]:
    """Batches whose offsets Spark logged and whose commit it has not: running now."""
    return _batch_ids(checkpoint / "offsets") - _batch_ids(checkpoint / "commits")


def _gone(group: int) -> bool:
    """Whether no process of the process group ``group`` is left (the JVM and the workers)."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return True
    return False


def _wrote_a_batch(log, process) -> bool:
    text = log.read_text()
    return bool(re.search(r"^batch \d+: 500 messages", text, re.MULTILINE)) \
        or process.poll() is not None


def _written(out, sink: tuple[str, ...]) -> set[str]:
    """The batches written to ``out``: its batch directories, or the batches the file sink
    logged."""
    if sink:
        return {p.name for p in out.iterdir() if p.name.startswith("batch=")}
    return {p.name for p in (out / "_spark_metadata").iterdir() if p.name[:1].isdigit()}


@pytest.mark.parametrize("sink", [(), ("--batch-directories",)],
                         ids=["spark-file-sink", "batch-directories"])
def test_sigterm_then_kill_9_mid_batch_then_restart_write_each_message_exactly_once(
        spark, broker_uri, tmp_path, sink):
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with rabbit_stream(broker_uri) as stream:
        command = [sys.executable, "-m", "rtroute.cli", "spark", "stream", "--uri", broker_uri,
                   "--stream", stream, "--bindings", bindings_file(tmp_path), "--out", str(out),
                   "--checkpoint", str(checkpoint), "--max-records-per-trigger", "500",
                   "--master", "local[2]", *sink]
        publish(broker_uri, stream, messages(COUNT, seed=9))

        def start(log):
            # its own process group, so that a kill reaches its JVM and Python workers too
            with log.open("wb") as log_file:  # the child keeps its own descriptor
                return subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT,
                                        env=env, start_new_session=True)

        # 1. without --available-now it runs until SIGTERM, then stops cleanly, JVM and all
        log = tmp_path / "first.log"
        process = start(log)
        try:
            wait_for(lambda: _wrote_a_batch(log, process), timeout=600, interval=0.2)
            assert process.poll() is None, log.read_text()
            process.send_signal(signal.SIGTERM)
            assert process.wait(120) == 0, log.read_text()[-3000:]
            assert "stopped by SIGTERM; the next run goes on from" in log.read_text()
            wait_for(lambda: _gone(process.pid), timeout=60)
        finally:
            if not _gone(process.pid):
                os.killpg(process.pid, signal.SIGKILL)
        first = _written(out, sink)
        assert first

        # 2. kill -9 of the whole process group while a batch runs
        command.append("--available-now")
        log = tmp_path / "second.log"
        process = start(log)
        try:
            wait_for(lambda: _wrote_a_batch(log, process), timeout=600, interval=0.2)
            assert process.poll() is None, log.read_text()
            running = wait_for(lambda: _in_flight(checkpoint), timeout=60, interval=0.01)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
        finally:
            if not _gone(process.pid):
                os.killpg(process.pid, signal.SIGKILL)
        assert _in_flight(checkpoint) == running  # it died mid-batch: logged, not committed
        second = _written(out, sink)
        assert first < second and len(second) < COUNT // 500

        # 3. started again, it finishes: every message once
        again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900,
                               check=False)
        assert again.returncode == 0, again.stderr[-3000:]
        assert "| messages " in again.stdout
        assert not [p for p in out.iterdir() if p.name.endswith(".partial")]
        if sink:
            rows = ds.dataset(str(out), format="parquet", partitioning="hive").to_table(
                columns=["stream", "offset", "destinations", "error"]).to_pylist()
        else:  # Spark's readers read the files its log lists (not those of the batch cut short)
            rows = [r.asDict() for r in spark.read.parquet(str(out)).select(
                "stream", "offset", "destinations", "error").collect()]
        assert sorted(r["offset"] for r in rows) == list(range(COUNT))  # each exactly once
        assert {r["stream"] for r in rows} == {stream}
        expected = expected_routing(read_back(broker_uri, stream, COUNT))
        assert all(r["error"] is None and r["destinations"] == expected[r["offset"]][0]
                   for r in rows)
