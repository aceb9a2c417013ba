"""``rtroute spark drain``: a queue into Parquet files, each file's messages acked once it is on
disk."""
from __future__ import annotations

import click

from rtroute.spark.commands.options import octal_mode, uri_option
from rtroute.spark.commands.output import echo_err, format_table
from rtroute.spark.commands.session import require

__all__ = ["drain_command"]


@click.command("drain")
@uri_option
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
              callback=lambda _ctx, _param, text: octal_mode(text),
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

    echo_err(f"draining {queue} on {mask_uri(uri)} into {out_path}")
    try:
        stats = drain(uri, queue, out_path, batch_size=batch_size, idle_timeout=idle_timeout,
                      max_messages=max_messages, echo=echo_err, mode=file_mode)
    except (DrainError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    rate = stats.messages / stats.seconds if stats.seconds else 0.0
    click.echo(format_table(["", "value"], [
        ["messages", stats.messages], ["files", len(stats.files)], ["bytes", stats.bytes],
        ["seconds", stats.seconds], ["messages/s", round(rate)],
    ]))
