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


def test_the_launcher_leaves_out_only_sparks_pyspark_zip(monkeypatch, tmp_path):
    if not os.path.isfile(ZIP):
        pytest.skip("pyspark without python/lib/pyspark.zip: nothing to leave out")
    monkeypatch.delenv("SPARK_HOME", raising=False)
    launcher = local_python()
    assert launcher != sys.executable
    other = str(tmp_path / "a dir")
    result = subprocess.run(
        [launcher, "-c", "import json, sys, pyspark; print(json.dumps([sys.path, pyspark.__file__]))"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([ZIP, other, ZIP + "x"])},
        capture_output=True, text=True, check=True)
    path, imported = json.loads(result.stdout)
    assert ZIP not in path and other in path and ZIP + "x" in path
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
