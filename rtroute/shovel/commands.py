"""``rtroute shovel``: run shovels, and show the status of a running shovel process.

The lead's ``rtroute/cli.py`` adds this group with ``main.add_command(shovel)``; it also runs on
its own: ``python -m rtroute.shovel.commands run -c rtroute.toml``.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import click

__all__ = ["load_shovels", "shovel"]


def load_shovels(config_paths: tuple[str, ...] = (), definitions: tuple[str, ...] = (),
                 erlang_configs: tuple[str, ...] = ()) -> tuple[list[Any], Any]:
    """Read shovels from ``rtroute.toml`` files, definitions exports and Erlang configs.

    Returns:
        ``(shovels, http)``: the shovels in the order given, and the ``[http]`` section of the
        first ``rtroute.toml`` (None without one).

    Raises:
        ConfigError: a malformed file, naming the shovel, the field and the line.
        ValueError: two shovels share a name (and vhost).
        OSError: a file cannot be read.
    """
    from rtroute.config import load
    from rtroute.shovel.importers import from_definitions, from_erlang_config

    shovels: list[Any] = []
    http = None
    for path in config_paths:
        config = load(path)
        shovels += config.shovels
        http = http or config.http
    for path in definitions:
        with open(path, encoding="utf-8") as handle:
            shovels += from_definitions(handle.read(), path)
    for path in erlang_configs:
        with open(path, encoding="utf-8") as handle:
            shovels += from_erlang_config(handle.read(), path)
    seen: set[tuple[str | None, str]] = set()
    for config in shovels:
        key = (config.vhost, config.name)
        if key in seen:
            where = f" in vhost {config.vhost!r}" if config.vhost is not None else ""
            raise ValueError(f"shovel {config.name!r}{where} is defined twice (across files)")
        seen.add(key)
    return shovels, http


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
                   "[default: the config's [http] listen, else 127.0.0.1:9419]")
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

    from rtroute.config_lines import ConfigError
    from rtroute.logsetup import configure as configure_logging
    from rtroute.shovel.runner import ShovelRunner, serve

    if not (config_paths or definitions or erlang_configs):
        raise click.UsageError("nothing to run: give -c FILE, --definitions FILE or "
                               "--erlang-config FILE")
    configure_logging(log_level, log_format)
    try:
        shovels, http = load_shovels(config_paths, definitions, erlang_configs)
    except (ConfigError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    if only:
        unknown = set(only) - {s.name for s in shovels}
        if unknown:
            raise click.ClickException(f"no shovel named {', '.join(sorted(unknown))}")
        shovels = [s for s in shovels if s.name in only]
    if not shovels:
        raise click.ClickException("the given files declare no shovels")
    from rtroute.ops_http import ListenError

    token = cli_token or (http.token if http is not None else None)
    listen = None if no_http else (http_listen or (http.listen if http else "127.0.0.1:9419"))
    try:
        runner = ShovelRunner(shovels)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        serve(runner, listen, token, keep_serving=not exit_when_done,
              allow_unauthenticated_changes=bool(http and http.allow_unauthenticated_changes),
              protect_reads=bool(http and http.protect_reads))
    except (ListenError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


@shovel.command("status")
@click.option("--http", "http_listen", default="127.0.0.1:9419", show_default=True,
              metavar="HOST:PORT", help="Ops endpoint of the running shovel process.")
@click.option("--token", default=None, envvar="RTROUTE_HTTP_TOKEN",
              help="Bearer token of the endpoint (env RTROUTE_HTTP_TOKEN).")
@click.option("--json", "as_json", is_flag=True, help="Print the /status JSON as is.")
def status_command(http_listen: str, token: str | None, as_json: bool) -> None:
    """Print each shovel's state (starting, running, blocked, terminated) as a table."""
    from rtroute.netaddr import split_listen

    try:
        host, port = split_listen(http_listen)
    except ValueError as exc:
        raise click.BadParameter(f"{http_listen!r} {exc}", param_hint="--http") from None
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}/status"
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            data = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise click.ClickException(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise click.ClickException(f"{url}: {getattr(exc, 'reason', exc)}") from None
    if as_json:
        click.echo(json.dumps(data, indent=1))
        return
    rows = data.get("shovels", [])
    if not rows:
        click.echo("no shovels")
        return
    click.echo(format_table(rows))


def format_table(rows: list[dict[str, Any]]) -> str:
    """The status rows as an aligned text table (one line per shovel)."""
    header = ["NAME", "STATE", "SINCE", "SOURCE", "DESTINATION", "MOVED", "REASON"]
    with_vhost = any("vhost" in row for row in rows)
    if with_vhost:
        header.insert(1, "VHOST")
    lines = [header]
    for row in rows:
        line = [row.get("name", ""), row.get("state", ""), row.get("since", "")[:19],
                row.get("source", ""), row.get("destination", ""),
                str(row.get("counters", {}).get("moved", "")), row.get("reason", "") or ""]
        if with_vhost:
            line.insert(1, row.get("vhost", ""))
        lines.append(line)
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip()
        for line in lines)


if __name__ == "__main__":  # pragma: no cover
    shovel()
