"""`rtroute spark pack`'s refusals and the executor helpers, without building an archive (the
cluster test builds and runs a real one)."""
from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from rtroute.spark import pack
from rtroute.spark.commands import spark as spark_group
from rtroute.spark.executors import ENV_PYTHON, archive_config, failure_reason


def test_an_editable_install_is_refused_with_the_source_option_to_use(monkeypatch, tmp_path):
    monkeypatch.setattr(pack, "editable_location", lambda _dist: "/src/rtroute")
    result = CliRunner().invoke(spark_group, ["pack", "--out", str(tmp_path / "env.tar.gz")])
    assert result.exit_code == 1
    [line] = [x for x in result.output.splitlines() if x.strip()]
    assert line.startswith("Error: rtroute is an editable install (pip install -e /src/rtroute)")
    assert "--source /src/rtroute" in line
    assert not (tmp_path / "env.tar.gz").exists()


def test_a_build_without_the_native_core_is_refused(monkeypatch, tmp_path):
    def fake_interpreter(prefix):
        (prefix / "bin").mkdir(parents=True)
        (prefix / "lib" / "python3.x").mkdir(parents=True)
        return "python3.x", []

    monkeypatch.setattr(pack, "editable_location", lambda _dist: None)
    monkeypatch.setattr(pack, "_copy_interpreter", fake_interpreter)
    monkeypatch.setattr(pack, "_copy_distribution", lambda _dist, _site: None)
    monkeypatch.setattr(pack, "_probe", lambda _prefix: {
        "implementation": "reference", "reason": "the native extension cannot be imported"})
    with pytest.raises(pack.PackError, match=r"^the rtroute to pack has no native core \(the "
                                             r"native extension cannot be imported\)"):
        pack.build_pack(tmp_path / "env.tar.gz", echo=lambda _line: None)
    assert list(tmp_path.iterdir()) == []


def test_the_closure_follows_requirements_but_not_extras_nor_pyspark():
    names = {d.metadata["Name"].lower() for d in pack.requirement_closure(["pandas"], ["tomli"])}
    assert {"pandas", "numpy", "python-dateutil"} <= names
    assert not names & {"pyspark", "py4j", "pytest"}  # pandas' test extra is not followed
    with pytest.raises(pack.PackError, match="no-such-dist is not installed"):
        pack.requirement_closure(["no-such-dist"])


def test_archive_config_ships_the_archive_and_points_the_executors_python_into_it(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", "python3")  # restored afterwards: archive_config sets it
    config = archive_config("env.tar.gz", {"spark.archives": "hdfs:///other.zip#other"})
    assert config["spark.archives"] == (
        f"hdfs:///other.zip#other,{os.path.abspath('env.tar.gz')}#rtroute_env")
    assert config["spark.pyspark.python"] == ENV_PYTHON == "./rtroute_env/bin/python"
    assert os.environ["PYSPARK_PYTHON"] == ENV_PYTHON
    assert archive_config("s3a://b/env.tar.gz")["spark.archives"] == "s3a://b/env.tar.gz#rtroute_env"


class _JavaFailure(Exception):
    def __init__(self, message: str) -> None:
        super().__init__("<exception str() failed>")
        self.java_exception = type("J", (), {"getMessage": lambda _self: message})()


def test_failure_reason_is_the_python_error_line_or_the_java_failure():
    python = _JavaFailure(
        "Job aborted due to stage failure: Task 0 in stage 0.0 failed 4 times, most recent "
        "failure: Lost task 0.3 (TID 3): org.apache.spark.api.python.PythonException: "
        "Traceback (most recent call last):\n  File \"worker.py\", line 1\n"
        "pyspark.errors.exceptions.base.PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] Python "
        "in worker has different version\n\n\tat org.apache.spark.api.python.Foo(Foo.scala:1)")
    assert failure_reason(python) == ("pyspark.errors.exceptions.base.PySparkRuntimeError: "
                                      "[PYTHON_VERSION_MISMATCH] Python in worker has different "
                                      "version")
    java = _JavaFailure("Job aborted due to stage failure: Task 0 failed 4 times, most recent "
                        "failure: Lost task 0.3: java.io.IOException: Cannot run program "
                        "\"./x/bin/python\": error=2, No such file or directory\n\tat x.y(z)")
    assert failure_reason(java).startswith("Lost task 0.3: java.io.IOException: Cannot run")
