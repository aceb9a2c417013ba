"""``rtroute shovel``: run shovels; show, delete and restart the shovels of a running process.

The lead's ``rtroute/cli.py`` adds this group with ``main.add_command(shovel)``; it also runs on
its own: ``python -m rtroute.shovel.commands run -c rtroute.toml``.
"""
from __future__ import annotations

import json
import os
import urllib.parse
from typing import Any

import click

from rtroute.control.client import endpoint, resolve_token, token_options

# the shovel_status table (rtroute status shows it too, so it lives with the status tables)
from rtroute.control.status_tables import SHOVEL_COLUMNS as TABLE_COLUMNS
from rtroute.control.status_tables import shovel_table as format_table
from rtroute.ops.logsetup import log_options

__all__ = ["TABLE_COLUMNS", "format_table", "load_shovels", "shovel"]


def load_shovels(config_paths: tuple[str, ...] = (), definitions: tuple[str, ...] = (),
                 erlang_configs: tuple[str, ...] = (), *,
                 refused: list[Any] | None = None,
                 token_given: bool = False) -> tuple[list[Any], Any]:
    """Read shovels from ``rtroute.toml`` files, definitions exports and Erlang configs.

    Each file's size is checked before it is read (16 MiB for a definitions export, 4 MiB
    otherwise, the parsers' own limits), so a huge file fails at once, unread.

    Args:
        refused: where the imported shovels that are not run go
            (:class:`~rtroute.config.shovel.RefusedShovel`: AMQP 1.0 ones, unknown keys).
        token_given: the HTTP token comes from ``--token``, so an ``[http] listen`` beyond
            loopback needs none in the file.

    Returns:
        ``(shovels, http)``: the shovels in the order given (none is fine), and the ``[http]``
        section of the first ``rtroute.toml`` (None without one).

    Raises:
        ConfigError: a malformed or too large file, naming the shovel, the field and the line.
        ValueError: two shovels share a name (and vhost).
        OSError: a file cannot be read.
    """
    from rtroute.config.lines import MAX_CONFIG_BYTES, MAX_DEFINITIONS_BYTES
    from rtroute.config.rtroute_toml import load
    from rtroute.shovel.importers import from_definitions, from_erlang_config

    shovels: list[Any] = []
    http = None
    for path in config_paths:
        config = load(path, token_given=token_given)
        shovels += config.shovels
        http = http or config.http
    for path in definitions:
        shovels += from_definitions(_read_limited(path, MAX_DEFINITIONS_BYTES), path,
                                    refused=refused)
    for path in erlang_configs:
        shovels += from_erlang_config(_read_limited(path, MAX_CONFIG_BYTES).decode("utf-8"),
                                      path)
    seen: set[tuple[str | None, str]] = set()
    for config in shovels:
        key = (config.vhost, config.name)
        if key in seen:
            where = f" in vhost {config.vhost!r}" if config.vhost is not None else ""
            raise ValueError(f"shovel {config.name!r}{where} is defined twice (across files)")
        seen.add(key)
    return shovels, http


def _read_limited(path: str, limit: int) -> bytes:
    """The file's bytes, refused unread when its size is above ``limit`` (and never more than
    ``limit`` + 1 bytes read, for files whose size the system does not know, such as pipes).

    Raises:
        ConfigError: the file is larger than ``limit`` or not UTF-8.
        OSError: it cannot be read.
    """
    from rtroute.config.lines import ConfigError, check_size

    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise ConfigError(f"the file is {size} bytes, larger than {limit // (1024 * 1024)} "
                              "MiB; is it the right file?", None, path)
        data = handle.read(limit + 1)
    check_size(data, path, limit)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError("the file is not UTF-8", line, path) from None
    return data


@click.group("shovel")
def shovel() -> None:
    """Move messages between brokers, as RabbitMQ's shovel plugin does, from outside."""


@shovel.command("run")
@click.option("-c", "--config", "config_paths", multiple=True,
              type=click.Path(dir_okay=False, exists=True),
              help="rtroute.toml with [[shovel]] tables (repeatable).")
@click.option("--definitions", multiple=True, type=click.Path(dir_okay=False, exists=True),
              help="RabbitMQ definitions export: its dynamic shovels (repeatable).")
@click.option("--erlang-config", "erlang_configs", multiple=True,
              type=click.Path(dir_okay=False, exists=True),
              help="rabbitmq.config / advanced.config: its static shovels (repeatable).")
@click.option("--only", "only", multiple=True, metavar="NAME",
              help="Run only the shovel(s) with this name (repeatable).")
@click.option("--http", "http_listen", default=None, metavar="HOST:PORT",
              help="Ops endpoint (/healthz /status /metrics).  "
                   "[default: the config's [http] listen, else 127.0.0.1:8419]")
@click.option("--no-http", is_flag=True, help="Serve no HTTP endpoint.")
@click.option("--token", "cli_token", default=None, envvar="RTROUTE_HTTP_TOKEN",
              show_envvar=True, help="Bearer token of the endpoint (overrides [http] token).")
@click.option("--token-file", "token_file", default=None, envvar="RTROUTE_HTTP_TOKEN_FILE",
              show_envvar=True, type=click.Path(dir_okay=False),
              help="Read that token from a file (its content, stripped).")
@click.option("--exit-when-done", is_flag=True,
              help="Exit once every shovel ended (src-delete-after reached, or terminated "
                   "with reconnect_delay = 0) instead of serving its final status.")
@log_options
def run_command(config_paths: tuple, definitions: tuple, erlang_configs: tuple, only: tuple,
                http_listen: str | None, no_http: bool, exit_when_done: bool,
                log_level: str, log_format: str, cli_token: str | None,
                token_file: str | None) -> None:
    """Run shovels until SIGTERM/SIGINT (then stop taking, wait for confirms, close).

    \b
    Examples:
      rtroute shovel run -c rtroute.toml
      rtroute shovel run --definitions definitions.json --http 127.0.0.1:8420
      rtroute shovel run --erlang-config /etc/rabbitmq/advanced.config
    """

    import logging

    from rtroute.config.lines import ConfigError
    from rtroute.ops.logsetup import configure as configure_logging
    from rtroute.shovel.runner import ShovelRunner, serve

    if not (config_paths or definitions or erlang_configs):
        raise click.UsageError("nothing to run: give -c FILE, --definitions FILE or "
                               "--erlang-config FILE")
    configure_logging(log_level, log_format)
    cli_token = resolve_token(cli_token, token_file)
    refused: list[Any] = []
    try:
        shovels, http = load_shovels(config_paths, definitions, erlang_configs,
                                     refused=refused, token_given=bool(cli_token))
    except (ConfigError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    if only:
        unknown = set(only) - {s.name for s in shovels} - {r.name for r in refused}
        if unknown:
            raise click.ClickException(f"no shovel named {', '.join(sorted(unknown))}")
        shovels = [s for s in shovels if s.name in only]
        refused = [r for r in refused if r.name in only]
    if not shovels:
        # as the plugin with no shovel defined: run, and serve an empty status
        logging.getLogger("rtroute.shovel").warning("the given files declare no shovel to run")
    from rtroute.ops.http import ListenError

    token = cli_token or (http.token if http is not None else None)
    listen = None if no_http else (http_listen or (http.listen if http else "127.0.0.1:8419"))
    try:
        runner = ShovelRunner(shovels, refused=refused)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        serve(runner, listen, token, keep_serving=not exit_when_done,
              allow_unauthenticated_changes=bool(http and http.allow_unauthenticated_changes),
              protect_reads=bool(http and http.protect_reads))
    except (ListenError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


def _call(url: str, token: str | None, method: str = "GET") -> Any:
    """The JSON answer of the ops endpoint to ``method url``.

    Raises:
        click.ClickException: the endpoint cannot be reached or refused (with its reason).
    """
    from rtroute.control.client import OpsClientError, call

    try:
        return call(url, token, method)
    except OpsClientError as exc:
        raise click.ClickException(str(exc)) from None


_HTTP_OPTION = click.option("--http", "http_listen", default="127.0.0.1:8419",
                            show_default=True, metavar="HOST:PORT",
                            help="Ops endpoint of the running shovel process.")
_VHOST_OPTION = click.option("-p", "--vhost", default="/", show_default=True,
                             help="Virtual host of the (dynamic) shovel, as rabbitmqctl's -p; "
                                  "a static one is found under /.")


@shovel.command("status")
@_HTTP_OPTION
@token_options
@click.option("--json", "as_json", is_flag=True, help="Print the /status JSON as is.")
def status_command(http_listen: str, token: str | None, token_file: str | None,
                   as_json: bool) -> None:
    """Print each shovel's status as ``rabbitmqctl shovel_status`` does, as a table."""
    data = _call(f"{endpoint(http_listen)}/status", resolve_token(token, token_file))
    if as_json:
        click.echo(json.dumps(data, indent=1))
        return
    rows = data.get("shovels", [])
    if not rows:
        click.echo("no shovels")
        return
    click.echo(format_table(rows))


def _change(action: str, name: str, vhost: str, http_listen: str, token: str | None) -> None:
    path = f"/shovels/{urllib.parse.quote(vhost, safe='')}/{urllib.parse.quote(name, safe='')}"
    method = "DELETE" if action == "delete" else "POST"
    _call(f"{endpoint(http_listen)}{path}" + ("" if action == "delete" else "/restart"),
          token, method)


@shovel.command("delete")
@click.argument("name")
@_VHOST_OPTION
@_HTTP_OPTION
@token_options
def delete_command(name: str, vhost: str, http_listen: str, token: str | None,
                   token_file: str | None) -> None:
    """Stop shovel NAME of a running process and remove it (``rabbitmqctl delete_shovel``).

    Deliveries in flight are confirmed and acknowledged first; the rest stay in the source
    queue. The files are not changed: the shovel runs again when the process is restarted.
    """
    token = resolve_token(token, token_file)
    click.echo(f"Deleting shovel {name} in vhost {vhost}")
    _change("delete", name, vhost, http_listen, token)


@shovel.command("restart")
@click.argument("name")
@_VHOST_OPTION
@_HTTP_OPTION
@token_options
def restart_command(name: str, vhost: str, http_listen: str, token: str | None,
                    token_file: str | None) -> None:
    """Stop shovel NAME of a running process gracefully and start it again
    (``rabbitmqctl restart_shovel``)."""
    token = resolve_token(token, token_file)
    click.echo(f"Restarting shovel {name} in vhost {vhost}")
    _change("restart", name, vhost, http_listen, token)


@shovel.command("add")
@click.argument("name")
@click.argument("settings", nargs=-1, metavar="[KEY=VALUE]...")
@click.option("--definition", default=None, metavar="JSON",
              help="The whole definition as one JSON object, as rabbitmqctl set_parameter "
                   "shovel NAME '{...}' takes it (instead of KEY=VALUE).")
@click.option("--replace", is_flag=True,
              help="Replace a shovel of that name (stopped gracefully first); without it, "
                   "one that exists is refused.")
@_VHOST_OPTION
@_HTTP_OPTION
@token_options
def add_command(name: str, settings: tuple[str, ...], definition: str | None, replace: bool,
                vhost: str, http_listen: str, token: str | None,
                token_file: str | None) -> None:
    """Start shovel NAME in a running process (``rabbitmqctl set_parameter shovel``).

    Each KEY=VALUE is a key of the plugin's dynamic shovels (src-uri, src-queue,
    src-exchange, dest-uri, dest-queue, dest-exchange, ack-mode, ...); a VALUE that is JSON
    (a number, true, a list, a quoted string) is taken as such, anything else as a string.
    The shovel runs until deleted or the process stops (the files are not changed).

    \b
    Examples:
      rtroute shovel add move-orders src-uri=amqp://host1 src-queue=orders \\
          dest-uri=amqp://host2 dest-queue=orders --http 127.0.0.1:8420
      rtroute shovel add move-orders --definition '{"src-uri": "amqp://", ...}'
    """
    token = resolve_token(token, token_file)
    value = _definition_value(settings, definition)
    path = f"/shovels/{urllib.parse.quote(vhost, safe='')}/{urllib.parse.quote(name, safe='')}"
    from rtroute.control.client import OpsClientError, call

    try:
        call(f"{endpoint(http_listen)}{path}", token, "PUT",
             body={"value": value, "replace": replace})
    except OpsClientError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{'Replaced' if replace else 'Added'} shovel {name} in vhost {vhost}")


def _definition_value(settings: tuple[str, ...], definition: str | None) -> dict[str, Any]:
    """The definition of ``shovel add``: ``--definition`` or the KEY=VALUE arguments.

    Raises:
        click.UsageError: both or neither given, a malformed pair or JSON.
    """
    if definition is not None:
        if settings:
            raise click.UsageError("give either --definition or KEY=VALUE arguments, not both")
        try:
            parsed = json.loads(definition)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--definition") from None
        if not isinstance(parsed, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--definition")
        return parsed
    if not settings:
        raise click.UsageError("give the shovel's keys as KEY=VALUE (src-uri=... src-queue=... "
                               "dest-uri=... dest-queue=...) or --definition JSON")
    value: dict[str, Any] = {}
    for setting in settings:
        key, equals, text = setting.partition("=")
        if not equals or not key:
            raise click.BadParameter(f"{setting!r} is not KEY=VALUE", param_hint="KEY=VALUE")
        if key in value:
            raise click.BadParameter(f"{key} is given twice", param_hint="KEY=VALUE")
        try:
            value[key] = json.loads(text)
        except ValueError:
            value[key] = text
    return value


if __name__ == "__main__":  # pragma: no cover
    shovel()
