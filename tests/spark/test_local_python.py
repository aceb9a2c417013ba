"""On a local master Spark's Python workers import this environment's compiled pyspark, not
the pyspark.zip Spark puts first on their path (which every new worker process, such as each
streaming query's source runner, would compile again)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pyspark
import pytest

from rtroute.spark.commands.session import local_python

PACKAGE = os.path.dirname(os.path.abspath(pyspark.__file__))
ZIP = os.path.join(PACKAGE, "python", "lib", "pyspark.zip")


def test_the_launcher_leaves_out_only_what_this_environment_has_installed(monkeypatch,
                                                                         tmp_path):
    """Out: Spark's pyspark.zip, the py4j zip of the py4j installed here, the pyspark
    package's jars (Spark puts its core jar there; Python reads a jar's directory, thousands
    of entries, in every new worker). Kept: everything else, a py4j zip of another version
    and a jar elsewhere included."""
    if not os.path.isfile(ZIP):
        pytest.skip("pyspark without python/lib/pyspark.zip: nothing to leave out")
    from py4j.version import __version__ as py4j_version

    monkeypatch.delenv("SPARK_HOME", raising=False)
    launcher = local_python()
    assert launcher != sys.executable
    lib = os.path.dirname(ZIP)
    py4j_zip = os.path.join(lib, f"py4j-{py4j_version}-src.zip")
    core_jar = os.path.join(PACKAGE, "jars", "spark-core_2.13-9.9.9.jar")
    left_out = [ZIP, py4j_zip, core_jar]
    kept = [str(tmp_path / "a dir"), ZIP + "x", os.path.join(lib, "py4j-0.0.1-src.zip"),
            str(tmp_path / "jars" / "other.jar"), os.path.join(PACKAGE, "jars")]
    result = subprocess.run(
        [launcher, "-c", "import json, sys, pyspark; print(json.dumps([sys.path, pyspark.__file__]))"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(left_out[:2] + kept + left_out[2:])},
        capture_output=True, text=True, check=True)
    path, imported = json.loads(result.stdout)
    assert [entry for entry in left_out if entry in path] == []
    assert [entry for entry in kept if entry not in path] == []
    assert os.path.dirname(imported) == PACKAGE


def test_another_spark_home_keeps_this_interpreter(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert local_python() == sys.executable


def test_a_launcher_that_cannot_run_keeps_this_interpreter(monkeypatch):
    if not os.path.isfile(ZIP):
        pytest.skip("pyspark without python/lib/pyspark.zip: no launcher")
    monkeypatch.delenv("SPARK_HOME", raising=False)

    def noexec(*_args, **_kwargs):
        raise PermissionError("noexec")

    monkeypatch.setattr(subprocess, "run", noexec)
    assert local_python() == sys.executable
