"""The executors' Python: ship a packed environment to them, and check them before a job.

:func:`archive_config` is what ``--env-archive`` adds to a session: the archive in
``spark.archives`` under the alias :data:`ENV_ALIAS`, unpacked by Spark into each executor's
working directory, and the executors' Python pointed at its launcher. :func:`check_executors`
runs one tiny job whose tasks import rtroute the way the routing tasks will, so a cluster whose
executors cannot import it fails at once with one line saying what to do, instead of after
every task's retries, with a long trace, and with an output folder already created.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ENV_ALIAS = "rtroute_env"
# where Spark unpacks spark.archives (the executor's, and a local driver's, files directory),
# relative to the Python worker's working directory
ENV_PYTHON = f"./{ENV_ALIAS}/bin/python"

FIX = ("ship rtroute with `rtroute spark pack --out env.tar.gz` and `--env-archive env.tar.gz`, "
       "or install rtroute[spark] on every node and point PYSPARK_PYTHON at that Python")


class ExecutorPythonError(RuntimeError):
    """The executors cannot run rtroute; the message is one line that says what to do."""


@dataclass(frozen=True)
class ExecutorPython:
    """What one executor task's Python reported.

    Attributes:
        host: the executor's host name.
        executable: ``sys.executable`` of its Python worker.
        python: its version (``3.11.7``).
        implementation: ``native`` or ``reference`` (``rtroute.core.IMPLEMENTATION``), "" when
            rtroute cannot be imported.
        core: the core's module file ("" when rtroute cannot be imported).
        error: why rtroute, pyarrow or pandas cannot be imported, else "".
    """

    host: str
    executable: str
    python: str
    implementation: str = ""
    core: str = ""
    error: str = ""


def archive_config(archive: str, config: dict[str, str] | None = None) -> dict[str, str]:
    """The Spark configuration that ships ``archive`` (made by ``rtroute spark pack``) and runs
    the executors' Python from it; ``config``'s own ``spark.archives`` entries are kept.

    The executors' Python is set in ``PYSPARK_PYTHON`` too (this process's environment), which
    is where pyspark's driver reads it when it creates the SparkContext.
    """
    config = dict(config or {})
    location = archive
    if "://" not in archive:
        location = os.path.abspath(archive)
    config["spark.archives"] = ",".join(
        filter(None, [config.get("spark.archives"), f"{location}#{ENV_ALIAS}"]))
    config["spark.pyspark.python"] = ENV_PYTHON
    os.environ["PYSPARK_PYTHON"] = ENV_PYTHON
    return config


def executor_pythons(spark: SparkSession, tasks: int | None = None) -> list[ExecutorPython]:
    """Runs ``tasks`` tiny tasks (default: the default parallelism) that import rtroute, pyarrow
    and pandas as a routing task does, and returns what each task's Python reported.

    Raises:
        ExecutorPythonError: a task failed outright (its Python could not start, or its version
            differs from the driver's); the message is the reason in one line.
    """
    from py4j.protocol import Py4JJavaError

    def probe(_index, _rows):  # a nested function: pickled by value, so no rtroute import
        import importlib
        import os
        import socket
        import sys

        report = {"host": socket.gethostname(), "executable": sys.executable,
                  "python": ".".join(map(str, sys.version_info[:3]))}
        try:
            # rtroute first: its absence is the error to report
            core = importlib.import_module("rtroute.core")
            importlib.import_module("pyarrow")
            importlib.import_module("pandas")
            native = sys.modules.get("rtroute.core._native")
            report["implementation"] = core.IMPLEMENTATION
            report["core"] = os.path.abspath(getattr(native, "__file__", None) or core.__file__)
        except ImportError as exc:
            report["error"] = f"{type(exc).__name__}: {exc}"
        yield report

    context = spark.sparkContext
    count = tasks or max(1, context.defaultParallelism)
    try:
        reports = context.parallelize(range(count), count).mapPartitionsWithIndex(probe).collect()
    except Py4JJavaError as exc:
        raise ExecutorPythonError(f"the executors' Python fails: {failure_reason(exc)}; "
                                  + FIX) from None
    return [ExecutorPython(**r) for r in reports]


def check_executors(spark: SparkSession) -> list[ExecutorPython]:
    """:func:`executor_pythons`, failing when any executor cannot import rtroute.

    Raises:
        ExecutorPythonError: one line naming the first failure, where and with which Python.
    """
    reports = executor_pythons(spark)
    for report in reports:
        if report.error:
            raise ExecutorPythonError(
                f"the executors cannot import rtroute ({report.error}, on {report.host} with "
                f"{report.executable}): {FIX}")
    return reports


_PYTHON_ERROR = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception): \S")


def failure_reason(exc: BaseException) -> str:
    """The one line that says why a Spark job failed: the last Python exception line of the
    task's trace, else the Java failure after "most recent failure: ", else the first line."""
    try:
        text = str(exc.java_exception.getMessage())  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - the JVM may be gone: fall back to the Python side
        try:
            text = str(exc)
        except Exception:  # noqa: BLE001 - Py4JJavaError's own str() can fail
            return type(exc).__name__
    lines = text.splitlines()
    python = [line.strip() for line in lines if _PYTHON_ERROR.match(line.strip())
              and not line.strip().startswith(("org.apache.spark.", "java."))]
    if python:
        return python[-1][:500]
    first = lines[0] if lines else type(exc).__name__
    return first.split("most recent failure: ", 1)[-1][:500]
