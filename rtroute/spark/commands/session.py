"""The SparkSession of an ``rtroute spark`` subcommand: the ``spark`` extra checked, the
executors' Python checked before any output is written, results renamed into place, and a
failed job said in one line."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Callable

import click

from rtroute.spark import forkserver
from rtroute.spark.commands.options import is_local, parse_conf
from rtroute.spark.commands.output import echo_err

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["job_failure", "local_python", "require", "spark_session", "start_session",
           "write_then_rename"]


def require(*modules: str) -> None:
    """Fails with an install hint unless every module of the ``spark`` extra can be imported.

    Raises:
        click.ClickException: one is missing.
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            raise click.ClickException(
                f"{module} is not installed: pip install 'rtroute[spark]'") from None


def spark_session(master: str = "local[*]", app_name: str = "rtroute",
                  config: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession for the CLI and the benchmark (library code takes one instead).

    For a ``local`` master the executors' Python is this interpreter (``PYSPARK_PYTHON``, through
    :func:`local_python`'s launcher) and Spark binds to 127.0.0.1 (``SPARK_LOCAL_IP``) unless those variables are already set; on a
    cluster they are the deployment's business (see docs/spark.md).

    Raises:
        click.ClickException: pyspark, pyarrow or pandas is not installed.
    """
    require("pyspark", "pyarrow", "pandas")
    from pyspark.sql import SparkSession

    if master.startswith("local") and "PYSPARK_PYTHON" not in os.environ:
        os.environ["PYSPARK_PYTHON"] = local_python()
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.showConsoleProgress", "false"))
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


_LAUNCHER = """#!/bin/sh
# Spark puts {zip} first on the path of its Python workers, then py4j's zip and the jar of
# Spark's core; {python} has that pyspark and that py4j installed and compiled: leave them
# out, so that a worker neither compiles pyspark again nor reads a zip's or a jar's directory
# (thousands of entries) at its first import and at each importlib.invalidate_caches().
set -f
IFS=:
kept=
for entry in $PYTHONPATH; do
    case "$entry" in
    {left_out}) ;;
    *) kept="${{kept:+$kept:}}$entry" ;;
    esac
done
unset IFS
PYTHONPATH=$kept
export PYTHONPATH
# a query's driver-side source runner and planners: a fork of the warm server, if it answers
if [ $# = 2 ] && [ "$1" = -m ] && [ -S {socket_word} ]; then
    case "$2" in
    {modules}) exec {python_word} -I -S -c {client_word} {socket_word} {python_word} "$@" ;;
    esac
fi
exec {python_word} "$@"
"""


def _left_out(package: str) -> str:
    """The shell ``case`` pattern of what the launcher leaves out of a worker's
    ``PYTHONPATH``: ``package``'s ``pyspark.zip``, its py4j zip when the installed py4j is that
    version, and its jars."""
    import shlex

    lib = os.path.join(package, "python", "lib")
    left = [os.path.join(lib, "pyspark.zip")]
    try:
        from py4j.version import __version__ as py4j_version
    except ImportError:  # pragma: no cover - pyspark depends on py4j
        py4j_version = None
    if py4j_version:
        left.append(os.path.join(lib, f"py4j-{py4j_version}-src.zip"))
    # quoted: literal; the jars' * unquoted: a pattern
    return "|".join([shlex.quote(path) for path in left]
                    + [shlex.quote(os.path.join(package, "jars")) + "/*.jar"])


def local_python() -> str:
    """The Python of Spark's Python workers on a local master: this interpreter, through a
    launcher when this environment's pyspark is the Spark that runs (a pip-installed pyspark:
    ``SPARK_HOME`` unset or the package itself).

    Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's path, and
    Python compiles what it imports from a zip anew in every process: a streaming query's
    source runner (a new process per query) spent 0.5 s of CPU on a quiet machine, over 1 s
    on a busy one, compiling pyspark before it could answer (rtroute bench spark
    --stream-uri). The launcher leaves that zip out, so workers import the same pyspark
    from this environment, compiled once. It also leaves out what else Spark puts there that
    this environment has installed: py4j's zip (when this py4j is its version) and the jars
    of the pyspark package (Spark's core jar, for a pyspark shipped inside it). Python reads
    the directory of each zip or jar on its path (the core jar: thousands of entries) in
    every new process and again at each ``importlib.invalidate_caches()``, which Spark's
    worker set-up calls: 0.15-0.3 s of each streaming query's source runner.
    """
    import shlex

    import pyspark

    package = os.path.dirname(os.path.abspath(pyspark.__file__))
    archive = os.path.join(package, "python", "lib", "pyspark.zip")
    home = os.environ.get("SPARK_HOME")
    if not os.path.isfile(archive) or (home and os.path.realpath(home)
                                       != os.path.realpath(package)):
        return sys.executable
    import atexit
    import shutil
    import tempfile

    directory = tempfile.mkdtemp(prefix="rtroute-python-")
    atexit.register(shutil.rmtree, directory, True)
    launcher = os.path.join(directory, "python")
    server = os.path.join(directory, "forkserver.sock")
    with open(launcher, "w") as f:
        f.write(_LAUNCHER.format(zip=archive, python=sys.executable,
                                 left_out=_left_out(package),
                                 python_word=shlex.quote(sys.executable),
                                 socket_word=shlex.quote(server),
                                 modules="|".join(forkserver.MODULES),
                                 client_word=shlex.quote(forkserver.CLIENT)))
    os.chmod(launcher, 0o700)
    try:  # a temporary directory mounted noexec, say: workers that cannot start fail the job
        subprocess.run([launcher, "-c", "pass"], check=True, timeout=60,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return sys.executable
    if os.environ.get("RTROUTE_SPARK_FORKSERVER", "1") != "0":
        process = forkserver.start(server)
        atexit.register(_stop, process)
    return launcher


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Ends a fork server (its stdin closed), waiting a little for it."""
    try:
        if process.stdin is not None:
            process.stdin.close()
        process.wait(5)
    except (OSError, subprocess.TimeoutExpired):
        process.kill()


def start_session(master: str, app_name: str, conf: tuple[str, ...], env_archive: str | None
           ) -> SparkSession:
    """The session of a command, with the executors checked before any output is written."""
    from rtroute.spark.executors import ExecutorPythonError, archive_config, check_executors

    config = parse_conf(conf)
    if env_archive:
        if is_local(env_archive) and not os.path.isfile(env_archive.removeprefix("file://")):
            raise click.BadParameter(f"{env_archive} does not exist",
                                     param_hint="--env-archive")
        config = archive_config(env_archive, config)
    session = spark_session(master, app_name, config)
    try:
        reports = check_executors(session)
    except ExecutorPythonError as exc:
        session.stop()
        raise click.ClickException(str(exc)) from None
    for line in sorted({f"{r.implementation} core {r.core} (python {r.executable} {r.python})"
                        for r in reports}):
        echo_err(f"executors: {line}")
    if any(r.implementation != "native" for r in reports):
        echo_err("warning: executors route with the pure-Python core (orders of magnitude "
                  "slower); ship the native one with --env-archive (rtroute spark pack)")
    return session


def write_then_rename(session: SparkSession, out_path: str, overwrite: bool,
                       write: Callable[[str], None]) -> None:
    """Runs ``write(temporary_path)`` next to ``out_path``, then renames the result to
    ``out_path`` (replacing it with ``overwrite``); on any failure removes the temporary
    folder, so a failed job never leaves a folder that looks like a result. Works on any
    Hadoop file system (local, hdfs://, s3a:// ...)."""
    import uuid

    jvm = session._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path
    target = hadoop_path(os.path.abspath(out_path) if "://" not in out_path else out_path)
    fs = target.getFileSystem(session._jsc.hadoopConfiguration())
    partial = hadoop_path(target.getParent(),
                          f".{target.getName()}.rtroute-{uuid.uuid4().hex[:12]}.partial")
    try:
        write(partial.toString())
        if overwrite and fs.exists(target):
            fs.delete(target, True)
        if not fs.rename(partial, target):
            raise click.ClickException(f"could not rename {partial.toString()} to {out_path}")
    finally:
        if fs.exists(partial):
            fs.delete(partial, True)


def job_failure(exc: Exception) -> click.ClickException:
    """One line for a failed Spark job, with the memory setting to raise on a heap exhaustion
    (when the JVM died of it, its own log above says so)."""
    from rtroute.spark.executors import failure_reason

    reason = failure_reason(exc)
    memory = ("give Spark more memory: --conf spark.driver.memory=4g for local[*] (its "
              "executors run in the driver's JVM), --conf spark.executor.memory=4g on a cluster")
    if "OutOfMemoryError" in reason:
        return click.ClickException(f"the Spark job ran out of memory ({reason}): {memory}")
    if type(exc).__name__ == "Py4JNetworkError" or "Answer from Java side" in reason:
        return click.ClickException(
            f"the Spark JVM died during the job ({reason}); if its log above shows "
            f"java.lang.OutOfMemoryError, {memory}")
    return click.ClickException(f"the Spark job failed: {reason}")
