"""``rtroute spark pack``: what executors need, in one archive for ``--env-archive``."""
from __future__ import annotations

import os

import click

from rtroute.spark.commands.options import overwrite_option
from rtroute.spark.commands.output import echo_err, format_table

__all__ = ["pack_command"]


@click.command("pack")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="The archive to write (.tar.gz).")
@click.option("--source", "source", default=None,
              type=click.Path(exists=True, file_okay=False),
              help="Pack a wheel built from this rtroute checkout instead of the installed "
                   "rtroute (needed when that is an editable install).")
@overwrite_option
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
        result = build_pack(out_path, source=source, echo=echo_err)
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
