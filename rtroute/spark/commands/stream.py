"""``rtroute spark stream``: route a RabbitMQ stream as it grows into Spark's file sink (Parquet
by default, any ``--format`` Spark has) or one directory per micro-batch, until stopped (SIGINT,
SIGTERM) or, with ``--available-now``, caught up."""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator

import click

from rtroute.spark.commands.options import (
    bindings_option,
    conf_option,
    env_archive_option,
    fail_on_input_errors,
    is_local,
    kind_option,
    master_option,
    parse_conf,
    uri_option,
)
from rtroute.spark.commands.output import echo_cores, echo_err, format_table
from rtroute.spark.commands.session import job_failure, require, start_session

__all__ = ["stream_command"]


@click.command("stream")
@uri_option
@click.option("--stream", "streams", required=True, multiple=True,
              help="Stream to read (repeatable: the partitions of a super stream, say).")
@bindings_option
@click.option("--out", "out_path", required=True,
              help="Output directory: the messages plus destinations, delivered_headers and "
                   "error, written by Spark's file sink (its log in OUT/_spark_metadata), or "
                   "one directory per micro-batch, OUT/batch=N, with --batch-directories.")
@click.option("--format", "output_format", default="parquet", show_default=True,
              metavar="FORMAT",
              help="Any data source Spark has on its classpath: parquet, json, csv (arrays, "
                   "maps and binary as JSON and base64 text), orc, delta (add its package), ...")
@click.option("--batch-directories", is_flag=True,
              help="Write each micro-batch to its own directory OUT/batch=N, renamed into "
                   "place once complete, so that any reader (pyarrow, pandas), not only "
                   "Spark's, sees each message once.")
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
@master_option
@conf_option
@env_archive_option
@kind_option
def stream_command(uri: str, streams: tuple[str, ...], bindings_path: str, out_path: str,
                   checkpoint: str, output_format: str, batch_directories: bool,
                   available_now: bool, trigger_interval: float | None,
                   starting_offset: str, max_records_per_trigger: int | None,
                   source_options_given: tuple[str, ...], master: str, conf: tuple[str, ...],
                   env_archive: str | None, kind: str) -> None:
    """Route a RabbitMQ stream as it grows, into Spark's file sink (or batch directories).

    \b
    Each micro-batch is routed as `spark route` routes an archive and written by Spark's
    file sink in --format (Spark's readers of OUT see only what its log OUT/_spark_metadata
    lists), or with --batch-directories to OUT/batch=N (renamed into place once complete).
    Offsets live in --checkpoint: a restarted command, even after kill -9, goes on where it
    stopped and writes each message exactly once. Without --available-now it runs until
    Ctrl-C or SIGTERM.
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
    options = parse_conf(source_options_given, "--source-option")
    fail_on_input_errors(lambda: source_options(uri, list(streams), starting_offset,
                                                 max_records_per_trigger, options))

    if env_archive and is_local(env_archive):
        env_archive = os.path.abspath(env_archive.removeprefix("file://"))
    with _driver_runs_env_python(bool(env_archive)):
        session = start_session(master, "rtroute spark stream", conf, env_archive)
    echo_err(f"spark {session.version} on {session.sparkContext.master}; routing "
              f"{', '.join(streams)} on {mask_uri(uri)} as {kind} into {out_path}")
    stats = RouteStats(session)
    try:
        with _stop_on_signals() as stopping:
            result = fail_on_input_errors(lambda: run_stream(
                session, uri=uri, streams=list(streams), bindings=bindings_path, out=out_path,
                checkpoint=checkpoint, kind=kind, available_now=available_now,
                trigger_interval=trigger_interval, starting_offset=starting_offset,
                max_records=max_records_per_trigger, options=options, stats=stats,
                echo=echo_err, should_stop=stopping.is_set, output_format=output_format,
                batch_directories=batch_directories))
    except OutputError as exc:
        raise click.ClickException(str(exc)) from None
    except StreamingQueryException as exc:
        from rtroute.spark.executors import failure_reason

        raise click.ClickException(f"the streaming query failed: {failure_reason(exc)}"
                                   ) from None
    except Py4JError as exc:
        raise job_failure(exc) from None
    echo_cores(stats)
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
