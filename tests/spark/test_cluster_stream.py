"""`rtroute spark stream --available-now` on a Spark standalone cluster (a master and two
one-core workers on loopback, as test_cluster.py starts it), rtroute shipped with `rtroute spark
pack` and `--env-archive`: a stream of 3,000 messages in three micro-batches, each read by
partitions on the executors, gives the same rows as local[2], each message once, routed by the
archive's native core on both workers.

Marked broker (it reads a stream of the broker under test), so it runs in the broker leg of
scripts/test.sh (the 4.3 node in CI), beside the unit leg whose islands run the batch cluster
tests; the cluster and the archive are its own (test_cluster.py's fixtures)."""
from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pytest

from .stream_support import (
    bindings_file,
    expected_routing,
    messages,
    publish,
    rabbit_stream,
    read_back,
)
from .test_cluster import (  # noqa: F401 - the fixtures, session-scoped
    EXECUTOR_MEMORY,
    _assert_archive_core,
    _run,
    env_archive,
    standalone_cluster,
)

pytestmark = [pytest.mark.slow]

COUNT = 3000


def _stream(broker_uri: str, stream: str, tmp_path: Path, name: str, *args: str):
    done = _run("stream", "--uri", broker_uri, "--stream", stream, "--bindings",
                bindings_file(tmp_path), "--out", str(tmp_path / name), "--checkpoint",
                str(tmp_path / f"{name}.checkpoint"), "--available-now",
                "--max-records-per-trigger", "1000", "--source-option",
                "offsetsPerPartition=500", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _rows(out: Path) -> list[dict]:
    return sorted(ds.dataset(str(out), format="parquet").to_table(
        columns=["stream", "offset", "routing_key", "destinations", "error"]).to_pylist(),
        key=lambda r: r["offset"])


def test_stream_available_now_on_a_standalone_cluster_equals_local_row_for_row(
        standalone_cluster, env_archive, broker_uri, tmp_path):  # noqa: F811
    with rabbit_stream(broker_uri, "cluster") as stream:
        publish(broker_uri, stream, messages(COUNT, seed=31))
        cluster = _stream(broker_uri, stream, tmp_path, "cluster", "--master",
                          standalone_cluster["url"], "--env-archive", str(env_archive),
                          "--conf", f"spark.executor.memory={EXECUTOR_MEMORY}")
        local = _stream(broker_uri, stream, tmp_path, "local", "--master", "local[2]")
        expected = expected_routing(read_back(broker_uri, stream, COUNT))
    for done in (cluster, local):
        assert [line.split(":")[0] for line in done.stderr.splitlines()
                if line.startswith("batch ")] == ["batch 0", "batch 1", "batch 2"], done.stderr
    # three batches logged by Spark's file sink; each message once, as local[2] wrote it
    assert sorted(p.name for p in (tmp_path / "cluster" / "_spark_metadata").iterdir()
                  if p.name[:1].isdigit()) == ["0", "1", "2"]
    rows = _rows(tmp_path / "cluster")
    assert [r["offset"] for r in rows] == list(range(COUNT))
    assert rows == _rows(tmp_path / "local")
    assert all(r["error"] is None and r["destinations"] == expected[r["offset"]][0]
               for r in rows)
    # read and routed on the executors, by the archive's core, on both workers
    _assert_archive_core(standalone_cluster, cluster.stderr)
    workers = {line.split()[5].split("/app-")[0] for line in cluster.stderr.splitlines()
               if line.startswith("routed with the native core ")}
    assert len(workers) == 2, cluster.stderr
