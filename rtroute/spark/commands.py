"""`rtroute spark ...`: route an archive, diff two binding sets, drain a queue into an archive.

The commands build the SparkSession (``--master``, default ``local[*]``); the library functions
in :mod:`rtroute.spark` only ever take one.
"""
from __future__ import annotations

import importlib
import os
import sys
import time
from typing import TYPE_CHECKING, Callable

import click

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
    cluster they are the deployment's business (see the README).

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


def _parse_conf(pairs: tuple[str, ...]) -> dict[str, str]:
    config = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--conf")
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
    from rtroute.bindings_file import BindingsFileError

    try:
        return action()
    except (BindingsFileError, TypeError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


@click.group()
def spark() -> None:
    """Batch routing on Spark: where would an archive of messages have gone?

    \b
    Messages are Parquet or JSON lines with a `routing_key` column and optional `headers`
    (a JSON object or a struct/map, with CC/BCC arrays). Binding files are those of
    `rtroute route --bindings`.
    """


_master = click.option("--master", default="local[*]", show_default=True,
                       help="Spark master URL (local[N], spark://..., yarn, k8s://...).")
_conf = click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE",
                     help="Spark configuration (repeatable), e.g. spark.archives=env.tar.gz#env.")
_kind = click.option("--kind", type=click.Choice(KINDS), default="rtopic", show_default=True,
                     help="Exchange semantics to route with.")
_format = click.option("--format", "fmt", type=click.Choice(["parquet", "json"]), default=None,
                       help="Input format.  [default: from the file names]")
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
@_kind
@_format
@_top
def route_command(messages_path: str, bindings_path: str, out_path: str, overwrite: bool,
                  master: str, conf: tuple[str, ...], kind: str, fmt: str | None,
                  top: int) -> None:
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
    session = spark_session(master, "rtroute spark route", _parse_conf(conf))
    _echo_err(f"spark {session.version} on {session.sparkContext.master}; "
              f"routing {messages_path} as {kind}")
    stats = RouteStats(session)
    routed = _fail_on_input_errors(lambda: route(
        read_messages(session, messages_path, fmt), bindings_path, kind, stats=stats))
    with spark_progress(session, _echo_err, stats):
        routed.write.mode("overwrite" if overwrite else "errorifexists").parquet(out_path)
        _echo_err(f"wrote {out_path}; summarizing ...")
        summary = summarize(session.read.parquet(out_path))
    elapsed = time.monotonic() - started
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
@_kind
@_format
@_top
def diff_command(messages_path: str, before_path: str, after_path: str, out_path: str | None,
                 master: str, conf: tuple[str, ...], kind: str, fmt: str | None,
                 top: int) -> None:
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
    session = spark_session(master, "rtroute spark diff", _parse_conf(conf))
    _echo_err(f"spark {session.version} on {session.sparkContext.master}; "
              f"diffing {before_path} -> {after_path} over {messages_path} as {kind}")
    stats = RouteStats(session)
    messages = _fail_on_input_errors(lambda: read_messages(session, messages_path, fmt))
    if not out_path:  # only the summary is wanted: carry no bodies through the Python workers
        messages = messages.select(*[c for c in (KEY_COLUMN, HEADERS_COLUMN)
                                     if c in messages.columns])
    diffed = _fail_on_input_errors(lambda: diff(messages, before_path, after_path, kind,
                                                stats=stats))
    diffed = diffed.persist()  # the summary's jobs (and --out) reuse one routing pass
    with spark_progress(session, _echo_err, stats):
        if out_path:
            changed = diffed.where((F.size(ADDED) > 0) | (F.size(REMOVED) > 0))
            changed.write.parquet(out_path)
            _echo_err(f"wrote the changed messages to {out_path}")
        summary = summarize_diff(diffed)
    diffed.unpersist()
    elapsed = time.monotonic() - started
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
