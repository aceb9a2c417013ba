"""The options several ``rtroute spark`` subcommands share, defined once, and the checks of what
a user gives them."""
from __future__ import annotations

import os
from typing import Callable

import click

from rtroute.config.constants import DEFAULT_URI

__all__ = ["KINDS", "bindings_option", "conf_option", "env_archive_option", "existing_if_local",
           "fail_on_input_errors", "format_option", "is_local", "kind_option", "master_option",
           "messages_option", "octal_mode", "overwrite_option", "parse_conf", "top_option",
           "uri_option"]

KINDS = ["rtopic", "topic", "direct", "fanout"]

def parse_conf(pairs: tuple[str, ...], option: str = "--conf") -> dict[str, str]:
    """``KEY=VALUE`` pairs (of ``option``) as a dict.

    Raises:
        click.BadParameter: a pair without ``=`` or a key.
    """
    config = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint=option)
        config[key.strip()] = value
    return config


def is_local(path: str) -> bool:
    """``path`` is on this machine (no URI scheme, or ``file://``)."""
    return "://" not in path or path.startswith("file://")


def existing_if_local(ctx: click.Context, param: click.Parameter, path: str) -> str:
    """A local path must exist; a URI (hdfs://, s3a://...) is left to Spark."""
    if is_local(path) and not os.path.exists(path.removeprefix("file://")):
        raise click.BadParameter(f"{path} does not exist")
    return path


def octal_mode(text: str) -> int:
    """An octal file mode as given on the command line (``0640``, ``640``, ``0o640``)."""
    try:
        return int(text, 8)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an octal mode such as 0600 or 0640") from None


def fail_on_input_errors(action: Callable[[], object]) -> object:
    """``action()``, with a bad binding file or input made a one-line command error.

    Raises:
        click.ClickException: ``action`` raised BindingsFileError, TypeError or ValueError.
    """
    from rtroute.config.bindings_file import BindingsFileError

    try:
        return action()
    except (BindingsFileError, TypeError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


uri_option = click.option("--uri", default=DEFAULT_URI, show_default=True, envvar="RTROUTE_URI",
                          show_envvar=True, help="Broker URI (amqp:// or amqps://).")
master_option = click.option("--master", default="local[*]", show_default=True,
                             help="Spark master URL (local[N], spark://..., yarn, k8s://...).")
conf_option = click.option(
    "--conf", "conf", multiple=True, metavar="KEY=VALUE",
    help="Spark configuration (repeatable), e.g. spark.archives=env.tar.gz#env.")
kind_option = click.option("--kind", type=click.Choice(KINDS), default="rtopic",
                           show_default=True, help="Exchange semantics to route with.")
format_option = click.option("--format", "fmt", type=click.Choice(["parquet", "json"]),
                             default=None, help="Input format.  [default: from the file names]")
env_archive_option = click.option(
    "--env-archive", "env_archive", default=None, metavar="ENV.tar.gz",
    help="Ship this archive of `rtroute spark pack` to the executors and run their Python from "
         "it (spark.archives and the executors' PYSPARK_PYTHON are set for you).")
messages_option = click.option(
    "--messages", "messages_path", required=True, callback=existing_if_local,
    help="Message archive: a Parquet or JSON lines file or directory (local, or a URI such as "
         "hdfs://... or s3a://...).")
bindings_option = click.option(
    "--bindings", "bindings_path", required=True, type=click.Path(dir_okay=False),
    help="TOML or JSON file mapping each destination to its binding key(s).")
overwrite_option = click.option("--overwrite", is_flag=True, help="Replace --out if it exists.")
top_option = click.option("--top", default=20, show_default=True, type=click.IntRange(0),
                          help="Destinations shown in the summary table.")
