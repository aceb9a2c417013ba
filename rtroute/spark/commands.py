"""`rtroute spark ...`: route an archive, diff two binding sets, drain a queue into an archive,
route a RabbitMQ stream as it grows.

The commands build the SparkSession (``--master``, default ``local[*]``); the library functions
in :mod:`rtroute.spark` only ever take one.

Size: one click command per `rtroute spark` subcommand (route, diff, drain, stream) with its
options, help and progress output; the work they call lives in the library modules.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Callable

import click

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from rtroute.spark.job import RouteStats

KINDS = ["rtopic", "topic", "direct", "fanout"]


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

    For a ``local`` master the executors' Python is this interpreter (``PYSPARK_PYTHON``) and
    Spark binds to 127.0.0.1 (``SPARK_LOCAL_IP``) unless those variables are already set; on a
    cluster they are the deployment's business (see docs/spark.md).

    Raises:
        click.ClickException: pyspark, pyarrow or pandas is not installed.
    """
    require("pyspark", "pyarrow", "pandas")
    from pyspark.sql import SparkSession

    if master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.showConsoleProgress", "false"))
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _parse_conf(pairs: tuple[str, ...], option: str = "--conf") -> dict[str, str]:
    config = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint=option)
        config[key.strip()] = value
    return config


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _existing_if_local(ctx: click.Context, param: click.Parameter, path: str) -> str:
    """A local path must exist; a URI (hdfs://, s3a://...) is left to Spark."""
    if _is_local(path) and not os.path.exists(path.removeprefix("file://")):
        raise click.BadParameter(f"{path} does not exist")
    return path


def _octal(text: str) -> int:
    """An octal file mode as given on the command line (``0640``, ``640``, ``0o640``)."""
    try:
        return int(text, 8)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an octal mode such as 0600 or 0640") from None


def _echo_err(line: str) -> None:
    click.echo(line, err=True)


def format_table(header: list[str], rows: list[list[object]]) -> str:
    """A markdown table; numbers right-aligned with thousands separators (floats: 1 decimal)."""
    def text(value: object) -> str:
        if isinstance(value, float):
            return f"{value:,.1f}"
        return f"{value:,}" if isinstance(value, int) else str(value)

    texts = [[text(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in texts]) for i, h in enumerate(header)]
    numeric = [bool(rows) and all(isinstance(r[i], (int, float)) for r in rows)
               for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if n else c.ljust(w)
                                 for c, w, n in zip(cells, widths, numeric)) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if n else ("-" * (w + 2))
                          for w, n in zip(widths, numeric)) + "|"
    return "\n".join([line(header), rule] + [line(r) for r in texts])


def _fail_on_input_errors(action: Callable[[], object]) -> object:
    from rtroute.config.bindings_file import BindingsFileError

    try:
        return action()
    except (BindingsFileError, TypeError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


def _start(master: str, app_name: str, conf: tuple[str, ...], env_archive: str | None
           ) -> SparkSession:
    """The session of a command, with the executors checked before any output is written."""
    from rtroute.spark.executors import ExecutorPythonError, archive_config, check_executors

    config = _parse_conf(conf)
    if env_archive:
        if _is_local(env_archive) and not os.path.isfile(env_archive.removeprefix("file://")):
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
        _echo_err(f"executors: {line}")
    if any(r.implementation != "native" for r in reports):
        _echo_err("warning: executors route with the pure-Python core (orders of magnitude "
                  "slower); ship the native one with --env-archive (rtroute spark pack)")
    return session


def _write_then_rename(session: SparkSession, out_path: str, overwrite: bool,
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


def _echo_cores(stats: RouteStats) -> None:
    for line in sorted(stats.cores.value):
        _echo_err(f"routed with the {line}")


def _job_failure(exc: Exception) -> click.ClickException:
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


@click.group()
def spark() -> None:
    """Batch routing on Spark: where would an archive of messages have gone?

    \b
    Messages are Parquet or JSON lines with a `routing_key` column and optional `headers`
    (a JSON object or a struct/map, with CC/BCC arrays), or a RabbitMQ stream (`spark
    stream`). Binding files are those of `rtroute route --bindings`.
    """


_master = click.option("--master", default="local[*]", show_default=True,
                       help="Spark master URL (local[N], spark://..., yarn, k8s://...).")
_conf = click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE",
                     help="Spark configuration (repeatable), e.g. spark.archives=env.tar.gz#env.")
_kind = click.option("--kind", type=click.Choice(KINDS), default="rtopic", show_default=True,
                     help="Exchange semantics to route with.")
_format = click.option("--format", "fmt", type=click.Choice(["parquet", "json"]), default=None,
                       help="Input format.  [default: from the file names]")
_env_archive = click.option(
    "--env-archive", "env_archive", default=None, metavar="ENV.tar.gz",
    help="Ship this archive of `rtroute spark pack` to the executors and run their Python from "
         "it (spark.archives and the executors' PYSPARK_PYTHON are set for you).")
_top = click.option("--top", default=20, show_default=True, type=click.IntRange(0),
                    help="Destinations shown in the summary table.")


@spark.command("route")
@click.option("--messages", "messages_path", required=True, callback=_existing_if_local,
              help="Message archive: a Parquet or JSON lines file or directory (local, or a "
                   "URI such as hdfs://... or s3a://...).")
@click.option("--bindings", "bindings_path", required=True, type=click.Path(dir_okay=False),
              help="TOML or JSON file mapping each destination to its binding key(s).")
@click.option("--out", "out_path", required=True, type=click.Path(),
              help="Output Parquet directory: the messages plus destinations, "
                   "delivered_headers and error.")
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists.")
@_master
@_conf
@_env_archive
@_kind
@_format
@_top
def route_command(messages_path: str, bindings_path: str, out_path: str, overwrite: bool,
                  master: str, conf: tuple[str, ...], env_archive: str | None, kind: str,
                  fmt: str | None, top: int) -> None:
    """Route every message of an archive and write the result as Parquet.

    \b
    Example:
      rtroute spark route --messages day.parquet --bindings bindings.toml --out routed/
    """
    require("pyspark", "pyarrow", "pandas")
    from rtroute.spark import RouteStats, read_messages, route, spark_progress, summarize

    if _is_local(out_path) and os.path.exists(out_path) and not overwrite:
        raise click.ClickException(f"{out_path} exists (use --overwrite to replace it)")
    started = time.monotonic()
    session = _start(master, "rtroute spark route", conf, env_archive)
    _echo_err(f"spark {session.version} on {session.sparkContext.master}; "
              f"routing {messages_path} as {kind}")
    stats = RouteStats(session)
    routed = _fail_on_input_errors(lambda: route(
        read_messages(session, messages_path, fmt), bindings_path, kind, stats=stats))
    from py4j.protocol import Py4JError

    try:
        with spark_progress(session, _echo_err, stats):
            _write_then_rename(session, out_path, overwrite,
                               lambda partial: routed.write.parquet(partial))
            _echo_err(f"wrote {out_path}; summarizing ...")
            summary = summarize(session.read.parquet(out_path))
    except Py4JError as exc:
        raise _job_failure(exc) from None
    elapsed = time.monotonic() - started
    _echo_cores(stats)
    click.echo(format_table(["", "messages"], [
        ["messages", summary.messages], ["routed", summary.routed],
        ["unroutable", summary.unroutable], ["errors", summary.errors],
        ["deliveries", summary.deliveries],
        ["destinations reached", len(summary.destinations)],
    ]))
    if summary.destinations and top:
        click.echo("")
        click.echo(format_table(["destination", "messages"],
                                [list(r) for r in summary.destinations[:top]]))
        if len(summary.destinations) > top:
            click.echo(f"... and {len(summary.destinations) - top:,} more destinations")
    if summary.error_reasons:
        click.echo("")
        click.echo(format_table(["error", "messages"],
                                [list(r) for r in summary.error_reasons[:top or 1]]))
    click.echo(f"\n{summary.messages:,} messages in {elapsed:.1f} s; routed by "
               f"{len(stats.workers.value)} Python worker(s) that built "
               f"{stats.matcher_builds.value} matcher(s) (a reused worker keeps its matcher)")


@spark.command("diff")
@click.option("--messages", "messages_path", required=True, callback=_existing_if_local,
              help="Message archive: a Parquet or JSON lines file or directory (local, or a "
                   "URI such as hdfs://... or s3a://...).")
@click.option("--before", "before_path", required=True, type=click.Path(dir_okay=False),
              help="Binding file in force now.")
@click.option("--after", "after_path", required=True, type=click.Path(dir_okay=False),
              help="Binding file to compare with.")
@click.option("--out", "out_path", default=None, type=click.Path(),
              help="Also write the changed messages (with before/after destinations) as Parquet.")
@_master
@_conf
@_env_archive
@_kind
@_format
@_top
def diff_command(messages_path: str, before_path: str, after_path: str, out_path: str | None,
                 master: str, conf: tuple[str, ...], env_archive: str | None, kind: str,
                 fmt: str | None, top: int) -> None:
    """What changes if the bindings in --after replace those in --before?

    \b
    Example:
      rtroute spark diff --messages day.parquet --before now.toml --after planned.toml
    """
    require("pyspark", "pyarrow", "pandas")
    from pyspark.sql import functions as F

    from rtroute.spark import RouteStats, diff, read_messages, spark_progress, summarize_diff
    from rtroute.spark.job import ADDED, HEADERS_COLUMN, KEY_COLUMN, REMOVED

    if out_path and _is_local(out_path) and os.path.exists(out_path):
        raise click.ClickException(f"{out_path} exists")
    started = time.monotonic()
    session = _start(master, "rtroute spark diff", conf, env_archive)
    _echo_err(f"spark {session.version} on {session.sparkContext.master}; "
              f"diffing {before_path} -> {after_path} over {messages_path} as {kind}")
    stats = RouteStats(session)
    messages = _fail_on_input_errors(lambda: read_messages(session, messages_path, fmt))
    if not out_path:  # only the summary is wanted: carry no bodies through the Python workers
        messages = messages.select(*[c for c in (KEY_COLUMN, HEADERS_COLUMN)
                                     if c in messages.columns])
    diffed = _fail_on_input_errors(lambda: diff(messages, before_path, after_path, kind,
                                                stats=stats))
    from py4j.protocol import Py4JError
    from pyspark import StorageLevel

    # the summary's jobs (and --out) reuse one routing pass, kept on disk: in the heap (the
    # default level) 2M rows with bodies exhausted local[2]'s default 1 GiB
    diffed = diffed.persist(StorageLevel.DISK_ONLY)
    try:
        with spark_progress(session, _echo_err, stats):
            if out_path:
                changed = diffed.where((F.size(ADDED) > 0) | (F.size(REMOVED) > 0))
                _write_then_rename(session, out_path, False,
                                   lambda partial: changed.write.parquet(partial))
                _echo_err(f"wrote the changed messages to {out_path}")
            summary = summarize_diff(diffed)
        diffed.unpersist()
    except Py4JError as exc:
        raise _job_failure(exc) from None
    elapsed = time.monotonic() - started
    _echo_cores(stats)
    click.echo(format_table(["", "messages"], [
        ["messages", summary.messages], ["changed", summary.changed],
        ["unroutable before", summary.unroutable_before],
        ["unroutable after", summary.unroutable_after], ["errors", summary.errors],
    ]))
    if summary.destinations and top:
        click.echo("")
        click.echo(format_table(["destination", "before", "after", "gained", "lost"],
                                [list(r) for r in summary.destinations[:top]]))
        if len(summary.destinations) > top:
            click.echo(f"... and {len(summary.destinations) - top:,} more changed destinations")
    elif not summary.destinations:
        click.echo("\nno destination's traffic changes")
    click.echo(f"\n{summary.messages:,} messages in {elapsed:.1f} s")


@spark.command("pack")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="The archive to write (.tar.gz).")
@click.option("--source", "source", default=None,
              type=click.Path(exists=True, file_okay=False),
              help="Pack a wheel built from this rtroute checkout instead of the installed "
                   "rtroute (needed when that is an editable install).")
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists.")
def pack_command(out_path: str, source: str | None, overwrite: bool) -> None:
    """Pack what executors need into one archive for --env-archive.

    \b
    The archive holds a relocatable copy of this CPython, rtroute with its native core, pyarrow,
    pandas and their requirements (not pyspark: workers use their own Spark's). Nodes need the
    same OS and architecture and no Python of their own.
    \b
    Example:
      rtroute spark pack --out env.tar.gz
      rtroute spark route --master spark://host:7077 --env-archive env.tar.gz ...
    """
    from rtroute.spark.pack import PackError, build_pack

    if os.path.exists(out_path) and not overwrite:
        raise click.ClickException(f"{out_path} exists (use --overwrite to replace it)")
    try:
        result = build_pack(out_path, source=source, echo=_echo_err)
    except PackError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(format_table(["", "value"], [
        ["archive", str(result.path)], ["MB", round(result.bytes / 1e6, 1)],
        ["seconds", round(result.seconds, 1)], ["python", result.python],
        ["rtroute from", result.rtroute_from], ["native core", result.core],
        ["packages", ", ".join(result.packages)],
    ]))
    click.echo(f"\n{result.requirement()}")
    click.echo(f"\nuse it with: rtroute spark route|diff --env-archive {out_path} "
               "--master spark://HOST:7077 ... (no PYSPARK_PYTHON needed)")


@spark.command("stream")
@click.option("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F", show_default=True,
              envvar="RTROUTE_URI", show_envvar=True,
              help="Broker URI (amqp:// or amqps://).")
@click.option("--stream", "streams", required=True, multiple=True,
              help="Stream to read (repeatable: the partitions of a super stream, say).")
@click.option("--bindings", "bindings_path", required=True, type=click.Path(dir_okay=False),
              help="TOML or JSON file mapping each destination to its binding key(s).")
@click.option("--out", "out_path", required=True,
              help="Output directory: one Parquet directory per micro-batch, OUT/batch=N, with "
                   "the messages plus destinations, delivered_headers and error.")
@click.option("--checkpoint", "checkpoint", required=True,
              help="Spark checkpoint directory: where the query goes on from after a stop.")
@click.option("--available-now", is_flag=True,
              help="Process what the streams hold now (in batches of "
                   "--max-records-per-trigger), then stop.")
@click.option("--trigger-interval", default=None, type=click.FloatRange(0, min_open=True),
              metavar="SECONDS",
              help="Start a micro-batch every SECONDS.  [default: as soon as the last ended]")
@click.option("--starting-offset", default="first", show_default=True,
              help="Where a new query starts: first, last, next, an offset, or an ISO 8601 "
                   "time (ignored when the checkpoint exists).")
@click.option("--max-records-per-trigger", default=None, type=click.IntRange(1),
              help="Messages per micro-batch at most.  [default: all that are there]")
@click.option("--source-option", "source_options_given", multiple=True, metavar="KEY=VALUE",
              help="Another option of the rtroute-rabbitmq-stream source (repeatable): "
                   "prefetch, tailWait, offsetsPerPartition, readTimeout.")
@_master
@_conf
@_env_archive
@_kind
def stream_command(uri: str, streams: tuple[str, ...], bindings_path: str, out_path: str,
                   checkpoint: str, available_now: bool, trigger_interval: float | None,
                   starting_offset: str, max_records_per_trigger: int | None,
                   source_options_given: tuple[str, ...], master: str, conf: tuple[str, ...],
                   env_archive: str | None, kind: str) -> None:
    """Route a RabbitMQ stream as it grows: one Parquet directory per micro-batch.

    \b
    Each micro-batch is routed as `spark route` routes an archive and written to OUT/batch=N
    (renamed into place once complete). Offsets live in --checkpoint: a restarted command,
    even after kill -9, goes on where it stopped and writes each message exactly once.
    Without --available-now it runs until Ctrl-C or SIGTERM.
    \b
    Example:
      rtroute spark stream --stream orders --bindings bindings.toml \\
        --out routed/ --checkpoint ckpt/ --available-now
    """
    require("pyspark", "pyarrow", "pandas")
    from py4j.protocol import Py4JError
    from pyspark.errors import StreamingQueryException

    from rtroute.amqp import mask_uri
    from rtroute.spark import RouteStats
    from rtroute.spark.stream_consumer import parse_start
    from rtroute.spark.stream_job import OutputError, run_stream, source_options

    try:
        importlib.import_module("rtroute.spark.stream_source")
    except ImportError as exc:
        raise click.ClickException(str(exc)) from None

    try:
        parse_start(starting_offset)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--starting-offset") from None
    options = _parse_conf(source_options_given, "--source-option")
    _fail_on_input_errors(lambda: source_options(uri, list(streams), starting_offset,
                                                 max_records_per_trigger, options))

    if env_archive and _is_local(env_archive):
        env_archive = os.path.abspath(env_archive.removeprefix("file://"))
    with _driver_runs_env_python(bool(env_archive)):
        session = _start(master, "rtroute spark stream", conf, env_archive)
    _echo_err(f"spark {session.version} on {session.sparkContext.master}; routing "
              f"{', '.join(streams)} on {mask_uri(uri)} as {kind} into {out_path}")
    stats = RouteStats(session)
    try:
        with _stop_on_signals() as stopping:
            result = _fail_on_input_errors(lambda: run_stream(
                session, uri=uri, streams=list(streams), bindings=bindings_path, out=out_path,
                checkpoint=checkpoint, kind=kind, available_now=available_now,
                trigger_interval=trigger_interval, starting_offset=starting_offset,
                max_records=max_records_per_trigger, options=options, stats=stats,
                echo=_echo_err,
                should_stop=stopping.is_set))
    except OutputError as exc:
        raise click.ClickException(str(exc)) from None
    except StreamingQueryException as exc:
        from rtroute.spark.executors import failure_reason

        raise click.ClickException(f"the streaming query failed: {failure_reason(exc)}"
                                   ) from None
    except Py4JError as exc:
        raise _job_failure(exc) from None
    _echo_cores(stats)
    rate = result.messages / result.seconds if result.seconds else 0.0
    click.echo(format_table(["", "value"], [
        ["batches written", result.batches], ["batches already written", result.replayed],
        ["messages", result.messages], ["seconds", round(result.seconds, 1)],
        ["messages/s", round(rate)],
    ]))
    if stopping.signal_name:
        click.echo(f"\nstopped by {stopping.signal_name}; the next run goes on from "
                   f"{checkpoint}")


@contextlib.contextmanager
def _driver_runs_env_python(needed: bool) -> Iterator[None]:
    """Starts the driver's JVM (created in the block) in a private directory where the
    executors' Python of ``--env-archive`` (``./rtroute_env/bin/python``, relative) runs this
    interpreter.

    A Python data source runs Python on the driver as well (planning, the stream's offsets)
    with the same interpreter path as its read tasks on the executors, relative to the JVM's
    working directory; without this, the driver would look for the archive's Python where
    only executors unpack it. Spark's own relative files (spark-warehouse, derby.log) land in
    that directory too; it is removed when the command exits.
    """
    if not needed:
        yield
        return
    import atexit
    import shlex
    import shutil
    import tempfile

    from rtroute.spark.executors import ENV_PYTHON

    directory = tempfile.mkdtemp(prefix="rtroute-driver-")
    atexit.register(shutil.rmtree, directory, True)
    launcher = os.path.join(directory, ENV_PYTHON)
    os.makedirs(os.path.dirname(launcher))
    with open(launcher, "w") as f:
        f.write(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    os.chmod(launcher, 0o700)
    here = os.getcwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(here)


class _StopRequest:
    """Set by SIGINT or SIGTERM while :func:`_stop_on_signals` runs."""

    def __init__(self) -> None:
        import threading

        self.event = threading.Event()
        self.signal_name = ""

    def is_set(self) -> bool:
        return self.event.is_set()


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[_StopRequest]:
    """SIGINT and SIGTERM ask the running query to stop instead of killing the command."""
    import signal
    import threading

    request = _StopRequest()

    def on_signal(number: int, _frame: object) -> None:
        request.signal_name = signal.Signals(number).name
        request.event.set()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGINT, signal.SIGTERM):
            previous[number] = signal.signal(number, on_signal)
    try:
        yield request
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@spark.command("drain")
@click.option("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F", show_default=True,
              envvar="RTROUTE_URI", show_envvar=True,
              help="Broker URI.")
@click.option("--queue", required=True, help="Queue to drain (it must exist).")
@click.option("--out", "out_path", required=True, type=click.Path(file_okay=False),
              help="Directory for the Parquet files (created if needed).")
@click.option("--batch-size", default=10_000, show_default=True,
              type=click.IntRange(1, 65535), help="Messages per file (and prefetch window).")
@click.option("--idle-timeout", default=2.0, show_default=True, type=click.FloatRange(0.01),
              help="Stop after this many seconds without a message.")
@click.option("--max-messages", default=None, type=click.IntRange(1),
              help="Stop after this many messages.  [default: until the queue is idle]")
@click.option("--mode", "file_mode", default="0600", show_default=True, metavar="OCTAL",
              callback=lambda _ctx, _param, text: _octal(text),
              help="Permissions of the Parquet files (directories the drain creates get the "
                   "matching search bits: 0640 gives 0750). Messages may be private: widen "
                   "with care.")
def drain_command(uri: str, queue: str, out_path: str, batch_size: int, idle_timeout: float,
                  max_messages: int | None, file_mode: int) -> None:
    """Drain a queue into Parquet files, acking each file's messages once it is on disk.

    \b
    Example:
      rtroute spark drain --queue audit.copy --out archive/2024-05-01/
    """
    require("pyarrow")
    from rtroute.amqp import mask_uri
    from rtroute.spark.archive import DrainError, drain

    _echo_err(f"draining {queue} on {mask_uri(uri)} into {out_path}")
    try:
        stats = drain(uri, queue, out_path, batch_size=batch_size, idle_timeout=idle_timeout,
                      max_messages=max_messages, echo=_echo_err, mode=file_mode)
    except (DrainError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    rate = stats.messages / stats.seconds if stats.seconds else 0.0
    click.echo(format_table(["", "value"], [
        ["messages", stats.messages], ["files", len(stats.files)], ["bytes", stats.bytes],
        ["seconds", stats.seconds], ["messages/s", round(rate)],
    ]))
