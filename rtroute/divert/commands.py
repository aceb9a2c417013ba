"""``rtroute divert``: list, add, update and delete the diverts of a running ``rtroute run``
through its ops endpoint (``/diverts``), and import the diverts of an Artemis ``broker.xml``.

The lead's ``rtroute/cli.py`` adds this group with ``main.add_command(divert)``.
"""
from __future__ import annotations

import json
import urllib.parse
from typing import Any

import click

from rtroute.config.constants import EXCHANGE_KINDS, ROUTING_TYPES
from rtroute.control.client import endpoint, resolve_token, token_options

__all__ = ["divert"]

#: the columns of ``rtroute divert list``: the divert, then its counters
LIST_COLUMNS = ("name", "address", "forwarding_address", "exclusive", "routing_type", "filter",
                "transformer", "matched", "forwarded", "dead_lettered", "unrouted")

_HTTP_OPTION = click.option("--http", "http_listen", default="127.0.0.1:8419",
                            show_default=True, metavar="HOST:PORT",
                            help="Ops endpoint of the running sidecar (rtroute run --http).")


@click.group("divert")
def divert() -> None:
    """Diverts of a running sidecar (ActiveMQ Artemis style), and Artemis's broker.xml."""


def _call(http_listen: str, path: str, token: str | None, method: str = "GET",
          body: Any = None) -> Any:
    """The JSON answer of the sidecar's endpoint to ``method path``.

    Raises:
        click.ClickException: unreachable or refused, in one line with the server's reason.
    """
    from rtroute.control.client import OpsClientError, OpsHttpError, call

    url = f"{endpoint(http_listen)}{path}"
    try:
        return call(url, token, method, body=body)
    except OpsHttpError as exc:
        message = str(exc)
        if exc.code in (404, 405) and exc.reason in ("not found", "method not allowed"):
            message += ": no divert API there; is it the endpoint of rtroute run (--http)?"
        raise click.ClickException(message) from None
    except OpsClientError as exc:
        raise click.ClickException(str(exc)) from None


def _divert_path(name: str) -> str:
    return f"/diverts/{urllib.parse.quote(name, safe='')}"


def _echo_warnings(answer: Any) -> None:
    for warning in (answer or {}).get("warnings", []) if isinstance(answer, dict) else []:
        click.echo(f"warning: {warning}", err=True)


@divert.command("list")
@_HTTP_OPTION
@token_options
@click.option("--json", "as_json", is_flag=True, help="Print the GET /diverts JSON as is.")
def list_command(http_listen: str, token: str | None, token_file: str | None,
                 as_json: bool) -> None:
    """Print each divert (its settings and counters) as a table."""
    from rtroute.control.status_tables import aligned

    rows = _call(http_listen, "/diverts", resolve_token(token, token_file))
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    if not rows:
        click.echo("no diverts")
        return
    click.echo(aligned(LIST_COLUMNS, [[row.get(c) for c in LIST_COLUMNS] for row in rows]))


def _settings(options: dict[str, Any]) -> dict[str, Any]:
    """The divert keys of the options given (an option left out is None)."""
    return {key: value for key, value in options.items() if value is not None}


@divert.command("add")
@click.argument("name")
@click.option("--address", required=True,
              help="The managed exchange watched, or a topic pattern over their names.")
@click.option("--forwarding-address", "forwarding_address", required=True,
              help="Where copies go (comma-separated for several).")
@click.option("--exclusive", is_flag=True, default=False,
              help="Move the message instead of copying it.")
@click.option("--filter", "--filter-string", "filter_", default=None, metavar="SELECTOR",
              help="JMS selector a message must match (SQL-92, as Artemis's filter).")
@click.option("--routing-type", "routing_type", default=None,
              type=click.Choice(ROUTING_TYPES, case_sensitive=False),
              help="Where a copy goes (default STRIP).")
@click.option("--routing-name", "routing_name", default=None,
              help="Diverts sharing one take turns (default: the name).")
@click.option("--routing-key", "routing_key", default=None,
              help="Routing key of the copies (default: the original's).")
@click.option("--transformer", "--transformer-class-name", "transformer", default=None,
              metavar="MODULE:FUNCTION",
              help="Python function applied to each copy (one the sidecar allows: [http] "
                   "allowed_transformers).")
@_HTTP_OPTION
@token_options
def add_command(name: str, address: str, forwarding_address: str, exclusive: bool,
                filter_: str | None, routing_type: str | None, routing_name: str | None,
                routing_key: str | None, transformer: str | None, http_listen: str,
                token: str | None, token_file: str | None) -> None:
    """Create divert NAME in the running sidecar (Artemis's createDivert).

    \b
    Example:
      rtroute divert add prices-divert --address priceUpdates \\
          --forwarding-address priceForwarding --filter "office = 'New York'" --exclusive
    """
    body = {"name": name, "address": address, "forwarding_address": forwarding_address,
            "exclusive": exclusive, **_settings({
                "filter": filter_, "routing_name": routing_name, "routing_key": routing_key,
                "transformer": transformer,
                "routing_type": routing_type.upper() if routing_type else None})}
    answer = _call(http_listen, "/diverts", resolve_token(token, token_file), "POST", body)
    _echo_warnings(answer)
    click.echo(f"Added divert {name}: {address} -> {forwarding_address}")


@divert.command("update")
@click.argument("name")
@click.option("--forwarding-address", "forwarding_address", default=None,
              help="Where copies go (comma-separated for several).")
@click.option("--filter", "--filter-string", "filter_", default=None, metavar="SELECTOR",
              help="The new selector.")
@click.option("--no-filter", is_flag=True, help="Remove the filter (every message matches).")
@click.option("--routing-type", "routing_type", default=None,
              type=click.Choice(ROUTING_TYPES, case_sensitive=False))
@click.option("--routing-key", "routing_key", default=None)
@click.option("--no-routing-key", is_flag=True, help="Copies keep the original's key.")
@click.option("--transformer", "--transformer-class-name", "transformer", default=None,
              metavar="MODULE:FUNCTION")
@click.option("--no-transformer", is_flag=True, help="Remove the transformer.")
@click.option("--address", default=None,
              help="Refused by the sidecar, as by Artemis's updateDivert (passed on so that "
                   "it says so): delete and add the divert instead.")
@click.option("--exclusive/--not-exclusive", "exclusive", default=None,
              help="Refused by the sidecar, as --address.")
@_HTTP_OPTION
@token_options
def update_command(name: str, forwarding_address: str | None, filter_: str | None,
                   no_filter: bool, routing_type: str | None, routing_key: str | None,
                   no_routing_key: bool, transformer: str | None, no_transformer: bool,
                   address: str | None, exclusive: bool | None, http_listen: str,
                   token: str | None, token_file: str | None) -> None:
    """Change the given settings of divert NAME (Artemis's updateDivert: the filter, the
    forwarding address, the routing type, the transformer, and rtroute's routing key)."""
    body = _settings({"forwarding_address": forwarding_address, "filter": filter_,
                      "routing_type": routing_type.upper() if routing_type else None,
                      "routing_key": routing_key, "transformer": transformer,
                      "address": address, "exclusive": exclusive})
    for flag, key, value in (("--no-filter", "filter", no_filter),
                             ("--no-routing-key", "routing_key", no_routing_key),
                             ("--no-transformer", "transformer", no_transformer)):
        if value:
            if key in body:
                raise click.UsageError(f"give either --{key.replace('_', '-')} or {flag}")
            body[key] = None
    if not body:
        raise click.UsageError("nothing to change: give --forwarding-address, --filter, "
                               "--routing-type, --routing-key or --transformer")
    answer = _call(http_listen, _divert_path(name), resolve_token(token, token_file), "PATCH",
                   body)
    _echo_warnings(answer)
    click.echo(f"Updated divert {name}")


@divert.command("delete")
@click.argument("name")
@_HTTP_OPTION
@token_options
def delete_command(name: str, http_listen: str, token: str | None,
                   token_file: str | None) -> None:
    """Delete divert NAME from the running sidecar (Artemis's destroyDivert)."""
    _call(http_listen, _divert_path(name), resolve_token(token, token_file), "DELETE")
    click.echo(f"Deleted divert {name}")


@divert.command("import")
@click.argument("broker_xml", type=click.Path(dir_okay=False, exists=True))
@click.option("-p", "--vhost", default=None,
              help="Virtual host to serve: adds a [broker] table (set its host and "
                   "credentials).")
@click.option("--kind", default="topic", show_default=True,
              type=click.Choice(EXCHANGE_KINDS),
              help="Kind of the managed exchanges made for the diverts' addresses.")
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False),
              help="Write the TOML to this file (default: standard output).")
def import_command(broker_xml: str, vhost: str | None, kind: str, output: str | None) -> None:
    """Print the [[divert]] tables (and the [[exchange]] tables they watch) of rtroute.toml
    for the <diverts> of an ActiveMQ Artemis broker.xml.

    Java transformers cannot be carried over: each is named in a comment and a warning.
    """
    from rtroute.config.lines import MAX_CONFIG_BYTES
    from rtroute.divert.artemis_xml import ArtemisXmlError, import_diverts

    try:
        with open(broker_xml, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
        result = import_diverts(data, broker_xml, vhost=vhost, kind=kind)
    except (ArtemisXmlError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if output is None:
        click.echo(result.toml, nl=False)
        return
    try:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(result.toml)
    except OSError as exc:
        raise click.ClickException(f"{output}: {exc.strerror or exc}") from None
    click.echo(f"{output}: {len(result.diverts)} divert(s) written", err=True)


if __name__ == "__main__":  # pragma: no cover
    divert()
