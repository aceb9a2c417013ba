"""``rtroute spark diff``: what changes for an archive's messages if one binding set replaces
another."""
from __future__ import annotations

import os
import time

import click

from rtroute.spark.commands.options import (
    conf_option,
    env_archive_option,
    fail_on_input_errors,
    format_option,
    is_local,
    kind_option,
    master_option,
    messages_option,
    top_option,
)
from rtroute.spark.commands.output import echo_cores, echo_err, format_table
from rtroute.spark.commands.session import job_failure, require, start_session, write_then_rename

__all__ = ["diff_command"]


@click.command("diff")
@messages_option
@click.option("--before", "before_path", required=True, type=click.Path(dir_okay=False),
              help="Binding file in force now.")
@click.option("--after", "after_path", required=True, type=click.Path(dir_okay=False),
              help="Binding file to compare with.")
@click.option("--out", "out_path", default=None, type=click.Path(),
              help="Also write the changed messages (with before/after destinations) as Parquet.")
@master_option
@conf_option
@env_archive_option
@kind_option
@format_option
@top_option
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

    if out_path and is_local(out_path) and os.path.exists(out_path):
        raise click.ClickException(f"{out_path} exists")
    started = time.monotonic()
    session = start_session(master, "rtroute spark diff", conf, env_archive)
    echo_err(f"spark {session.version} on {session.sparkContext.master}; "
              f"diffing {before_path} -> {after_path} over {messages_path} as {kind}")
    stats = RouteStats(session)
    messages = fail_on_input_errors(lambda: read_messages(session, messages_path, fmt))
    if not out_path:  # only the summary is wanted: carry no bodies through the Python workers
        messages = messages.select(*[c for c in (KEY_COLUMN, HEADERS_COLUMN)
                                     if c in messages.columns])
    diffed = fail_on_input_errors(lambda: diff(messages, before_path, after_path, kind,
                                                stats=stats))
    from py4j.protocol import Py4JError
    from pyspark import StorageLevel

    # the summary's jobs (and --out) reuse one routing pass, kept on disk: in the heap (the
    # default level) 2M rows with bodies exhausted local[2]'s default 1 GiB
    diffed = diffed.persist(StorageLevel.DISK_ONLY)
    try:
        with spark_progress(session, echo_err, stats):
            if out_path:
                changed = diffed.where((F.size(ADDED) > 0) | (F.size(REMOVED) > 0))
                write_then_rename(session, out_path, False,
                                   lambda partial: changed.write.parquet(partial))
                echo_err(f"wrote the changed messages to {out_path}")
            summary = summarize_diff(diffed)
        diffed.unpersist()
    except Py4JError as exc:
        raise job_failure(exc) from None
    elapsed = time.monotonic() - started
    echo_cores(stats)
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
