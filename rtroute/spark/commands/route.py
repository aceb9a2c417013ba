"""``rtroute spark route``: route every message of an archive, write the result as Parquet."""
from __future__ import annotations

import os
import time

import click

from rtroute.spark.commands.options import (
    bindings_option,
    conf_option,
    env_archive_option,
    fail_on_input_errors,
    format_option,
    is_local,
    kind_option,
    master_option,
    messages_option,
    overwrite_option,
    top_option,
)
from rtroute.spark.commands.output import echo_cores, echo_err, format_table
from rtroute.spark.commands.session import job_failure, require, start_session, write_then_rename

__all__ = ["route_command"]


@click.command("route")
@messages_option
@bindings_option
@click.option("--out", "out_path", required=True, type=click.Path(),
              help="Output Parquet directory: the messages plus destinations, "
                   "delivered_headers and error.")
@overwrite_option
@master_option
@conf_option
@env_archive_option
@kind_option
@format_option
@top_option
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

    if is_local(out_path) and os.path.exists(out_path) and not overwrite:
        raise click.ClickException(f"{out_path} exists (use --overwrite to replace it)")
    started = time.monotonic()
    session = start_session(master, "rtroute spark route", conf, env_archive)
    echo_err(f"spark {session.version} on {session.sparkContext.master}; "
              f"routing {messages_path} as {kind}")
    stats = RouteStats(session)
    routed = fail_on_input_errors(lambda: route(
        read_messages(session, messages_path, fmt), bindings_path, kind, stats=stats))
    from py4j.protocol import Py4JError

    try:
        with spark_progress(session, echo_err, stats):
            write_then_rename(session, out_path, overwrite,
                               lambda partial: routed.write.parquet(partial))
            echo_err(f"wrote {out_path}; summarizing ...")
            summary = summarize(session.read.parquet(out_path))
    except Py4JError as exc:
        raise job_failure(exc) from None
    elapsed = time.monotonic() - started
    echo_cores(stats)
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
