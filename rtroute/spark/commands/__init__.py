"""`rtroute spark ...`: route an archive, diff two binding sets, drain a queue into an archive,
route a RabbitMQ stream as it grows, pack the executors' environment: one module per
subcommand (:mod:`~rtroute.spark.commands.route`, ``diff``, ``drain``, ``stream``, ``pack``),
the options they share defined once in :mod:`~rtroute.spark.commands.options`.

The commands build the SparkSession (``--master``, default ``local[*]``:
:mod:`~rtroute.spark.commands.session`); the library functions in :mod:`rtroute.spark` only
ever take one.
"""
from __future__ import annotations

import click

from rtroute.spark.commands.diff import diff_command
from rtroute.spark.commands.drain import drain_command
from rtroute.spark.commands.pack import pack_command
from rtroute.spark.commands.route import route_command
from rtroute.spark.commands.stream import stream_command

__all__ = ["spark"]


@click.group()
def spark() -> None:
    """Batch routing on Spark: where would an archive of messages have gone?

    \b
    Messages are Parquet or JSON lines with a `routing_key` column and optional `headers`
    (a JSON object or a struct/map, with CC/BCC arrays), or a RabbitMQ stream (`spark
    stream`). Binding files are those of `rtroute route --bindings`.
    """


for _command in (route_command, diff_command, pack_command, stream_command, drain_command):
    spark.add_command(_command)
