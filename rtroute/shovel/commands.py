"""``rtroute shovel``: run shovels; show, delete and restart the shovels of a running process.

The lead's ``rtroute/cli.py`` adds this group with ``main.add_command(shovel)``; it also runs on
its own: ``python -m rtroute.shovel.commands run -c rtroute.toml``.
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import click

__all__ = ["load_shovels", "shovel"]


def load_shovels(config_paths: tuple[str, ...] = (), definitions: tuple[str, ...] = (),
                 erlang_configs: tuple[str, ...] = (), *,
                 refused: list[Any] | None = None) -> tuple[list[Any], Any]:
    """Read shovels from ``rtroute.toml`` files, definitions exports and Erlang configs.

    Each file's size is checked before it is read (16 MiB for a definitions export, 4 MiB
    otherwise, the parsers' own limits), so a huge file fails at once, unread.

    Args:
        refused: where the imported shovels that are not run go
            (:class:`~rtroute.shovel.config.RefusedShovel`: AMQP 1.0 ones, unknown keys).

    Returns:
        ``(shovels, http)``: the shovels in the order given (none is fine), and the ``[http]``
        section of the first ``rtroute.toml`` (None without one).

    Raises:
        ConfigError: a malformed or too large file, naming the shovel, the field and the line.
        ValueError: two shovels share a name (and vhost).
        OSError: a file cannot be read.
    """
    from rtroute.config import load
    from rtroute.config_lines import MAX_CONFIG_BYTES, MAX_DEFINITIONS_BYTES
    from rtroute.shovel.importers import from_definitions, from_erlang_config

    shovels: list[Any] = []
    http = None
    for path in config_paths:
        config = load(path)
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
    from rtroute.config_lines import ConfigError, check_size

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
@click.option("--exit-when-done", is_flag=True,
              help="Exit once every shovel ended (src-delete-after reached, or terminated "
                   "with reconnect_delay = 0) instead of serving its final status.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
@click.option("--log-format", default="text", show_default=True, envvar="RTROUTE_LOG_FORMAT",
              type=click.Choice(["text", "json"]),
              help="Log lines as text or as one JSON object per line.")
def run_command(config_paths: tuple, definitions: tuple, erlang_configs: tuple, only: tuple,
                http_listen: str | None, no_http: bool, exit_when_done: bool,
                log_level: str, log_format: str, cli_token: str | None) -> None:
    """Run shovels until SIGTERM/SIGINT (then stop taking, wait for confirms, close).

    \b
    Examples:
      rtroute shovel run -c rtroute.toml
      rtroute shovel run --definitions definitions.json --http 127.0.0.1:9420
      rtroute shovel run --erlang-config /etc/rabbitmq/advanced.config
    """

    import logging

    from rtroute.config_lines import ConfigError
    from rtroute.logsetup import configure as configure_logging
    from rtroute.shovel.runner import ShovelRunner, serve

    if not (config_paths or definitions or erlang_configs):
        raise click.UsageError("nothing to run: give -c FILE, --definitions FILE or "
                               "--erlang-config FILE")
    configure_logging(log_level, log_format)
    refused: list[Any] = []
    try:
        shovels, http = load_shovels(config_paths, definitions, erlang_configs,
                                     refused=refused)
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
    from rtroute.ops_http import ListenError

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


def _endpoint(http_listen: str) -> str:
    """``http://HOST:PORT`` of the ops endpoint at ``http_listen``."""
    from rtroute.netaddr import split_listen

    try:
        host, port = split_listen(http_listen)
    except ValueError as exc:
        raise click.BadParameter(f"{http_listen!r} {exc}", param_hint="--http") from None
    return f"http://{host if ':' not in host else f'[{host}]'}:{port}"


def _call(url: str, token: str | None, method: str = "GET") -> Any:
    """The JSON answer of the ops endpoint to ``method url``.

    Raises:
        click.ClickException: the endpoint cannot be reached or refused (with its reason).
    """
    request = urllib.request.Request(url, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            reason = json.loads(exc.read()).get("error")
        except (ValueError, AttributeError, OSError):
            reason = None
        raise click.ClickException(f"{url}: HTTP {exc.code}" + (f": {reason}" if reason else "")
                                   ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise click.ClickException(f"{url}: {getattr(exc, 'reason', exc)}") from None


_HTTP_OPTION = click.option("--http", "http_listen", default="127.0.0.1:8419",
                            show_default=True, metavar="HOST:PORT",
                            help="Ops endpoint of the running shovel process.")
_TOKEN_OPTION = click.option("--token", default=None, envvar="RTROUTE_HTTP_TOKEN",
                             help="Bearer token of the endpoint (env RTROUTE_HTTP_TOKEN).")
_VHOST_OPTION = click.option("-p", "--vhost", default="/", show_default=True,
                             help="Virtual host of the (dynamic) shovel, as rabbitmqctl's -p; "
                                  "a static one is found under /.")


@shovel.command("status")
@_HTTP_OPTION
@_TOKEN_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the /status JSON as is.")
def status_command(http_listen: str, token: str | None, as_json: bool) -> None:
    """Print each shovel's status as ``rabbitmqctl shovel_status`` does, as a table."""
    data = _call(f"{_endpoint(http_listen)}/status", token)
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
    _call(f"{_endpoint(http_listen)}{path}" + ("" if action == "delete" else "/restart"),
          token, method)


@shovel.command("delete")
@click.argument("name")
@_VHOST_OPTION
@_HTTP_OPTION
@_TOKEN_OPTION
def delete_command(name: str, vhost: str, http_listen: str, token: str | None) -> None:
    """Stop shovel NAME of a running process and remove it (``rabbitmqctl delete_shovel``).

    Deliveries in flight are confirmed and acknowledged first; the rest stay in the source
    queue. The files are not changed: the shovel runs again when the process is restarted.
    """
    click.echo(f"Deleting shovel {name} in vhost {vhost}")
    _change("delete", name, vhost, http_listen, token)


@shovel.command("restart")
@click.argument("name")
@_VHOST_OPTION
@_HTTP_OPTION
@_TOKEN_OPTION
def restart_command(name: str, vhost: str, http_listen: str, token: str | None) -> None:
    """Stop shovel NAME of a running process gracefully and start it again
    (``rabbitmqctl restart_shovel``)."""
    click.echo(f"Restarting shovel {name} in vhost {vhost}")
    _change("restart", name, vhost, http_listen, token)


#: The columns of ``rabbitmqctl shovel_status`` (RabbitMQ 4.0), then rtroute's count, then
#: the columns RabbitMQ 4.3 added (appended, so the earlier ones keep their places).
TABLE_COLUMNS = ("name", "vhost", "type", "state", "source_protocol", "source",
                 "destination_protocol", "destination", "termination_reason", "last_changed",
                 "moved", "pending", "source_queue", "destination_queue", "remaining",
                 "remaining_unacked", "forwarded")


def format_table(rows: list[dict[str, Any]]) -> str:
    """The status rows as an aligned text table, one line per shovel, with the columns of
    ``rabbitmqctl shovel_status`` (:data:`TABLE_COLUMNS`); an empty cell shows as ``-``."""
    lines = [list(TABLE_COLUMNS)]
    for row in rows:
        line = []
        for column in TABLE_COLUMNS:
            if column == "moved":
                value = row.get("counters", {}).get("moved", "")
            elif column == "termination_reason":
                value = row.get("termination_reason", row.get("reason")) or ""
            else:
                value = row.get(column, "")
            if value is None:
                value = ""
            line.append(" ".join(str(value).split()) or "-")
        lines.append(line)
    widths = [max(len(line[i]) for line in lines) for i in range(len(TABLE_COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
        for line in lines)


if __name__ == "__main__":  # pragma: no cover
    shovel()
