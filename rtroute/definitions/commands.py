"""``rtroute definitions``: carry a RabbitMQ definitions export with x-rtopic exchanges to a broker
without the plugin (RabbitMQ 4.3, a hosted broker).

Exit codes: 0 done; 1 an error (unreadable file, not an export, the API refused); 2 a usage
error; 3 ``convert``: written, but some items cannot be carried over as they were (listed as
``cannot:``), ``import``: nothing imported (the reasons are listed).
"""
from __future__ import annotations

import json
import sys
from typing import Any

import click

__all__ = ["definitions"]

PARTIAL = 3
# an export larger than this is refused unread (a million bindings take about 250 MB)
MAX_EXPORT_BYTES = 1 << 30
_LAYOUT_HELP = ("proxy: clients keep using NAME through `rtroute proxy` (default); sidecar: "
                "`rtroute run --rtopic NAME` routes what is published to NAME, queues bind to "
                "NAME.bindings")


@click.group()
def definitions() -> None:
    """Carry RabbitMQ definitions exports that hold x-rtopic exchanges to a broker without the
    plugin, in rtroute's layout (docs/migrate.md).

    \b
    Examples:
      rtroute definitions convert definitions.json -o for-4.3.json
      rtroute definitions import definitions.json --management-uri http://admin:secret@new:15672/
    """


@definitions.command("convert")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="Where the converted export goes ('-': standard output).")
@click.option("--layout", type=click.Choice(["proxy", "sidecar"]), default="proxy",
              show_default=True, help=_LAYOUT_HELP)
@click.option("--target-version", default="4.3", show_default=True, metavar="VERSION",
              help="RabbitMQ version that will import it: NAME.bindings is direct from 4 on, "
                   "topic on 3.x; classic mirroring keys are dropped from 4 on.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Also write the findings as JSON to this file.")
def convert_command(file: str, output: str, layout: str, target_version: str,
                    report_path: str | None) -> None:
    """Convert FILE (GET /api/definitions, or one vhost's) for a broker without the x-rtopic
    plugin: each x-rtopic exchange in rtroute's layout, everything else unchanged. Prints what
    was converted, changed or needs a look; exits 3 if something cannot be carried over."""
    from rtroute.definitions.convert import DefinitionsError, convert

    data = _read(file)
    try:
        conversion = convert(data, layout=layout, target_version=target_version)
    except DefinitionsError as exc:
        raise click.ClickException(f"{_name(file)}: {exc}") from None
    text = json.dumps(conversion.definitions, indent=2, ensure_ascii=False) + "\n"
    if output == "-":
        sys.stdout.write(text)
    else:
        with open(output, "w", encoding="utf-8") as out:
            out.write(text)
    _print_findings(conversion.findings, err=output == "-")
    if report_path:
        with open(report_path, "w", encoding="utf-8") as out:
            json.dump(conversion.report(), out, indent=2)
    click.echo(f"{len(conversion.converted)} x-rtopic exchange(s) converted for RabbitMQ "
               f"{target_version} ({layout} layout), written to {_name(output)}",
               err=output == "-")
    if conversion.cannot:
        sys.exit(PARTIAL)


@definitions.command("import")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--management-uri", envvar="RTROUTE_MANAGEMENT_URI", required=True,
              metavar="URL", help="The target's management API, e.g. "
              "http://admin:secret@127.0.0.1:15672/ (environment: RTROUTE_MANAGEMENT_URI).")
@click.option("--layout", type=click.Choice(["proxy", "sidecar"]), default="proxy",
              show_default=True, help=_LAYOUT_HELP)
@click.option("--vhost", default=None, help="Where the export of ONE vhost goes (default /).")
@click.option("--accept-partial", is_flag=True,
              help="Import even if some items cannot be carried over as they were.")
def import_command(file: str, management_uri: str, layout: str, vhost: str | None,
                   accept_partial: bool) -> None:
    """Convert FILE for the broker behind --management-uri (its version picks the layout's
    types) and import it there (POST /api/definitions). Importing again changes nothing.
    Exits 3, importing nothing, if an exchange exists there with another type (the plugin's,
    say) or an item cannot be carried over."""
    from rtroute.amqp.management import ManagementClient, ManagementError
    from rtroute.amqp.uri import mask_uri
    from rtroute.definitions.convert import DefinitionsError
    from rtroute.definitions.importer import ImportRefused, import_converted, is_one_vhost_export

    data = _read(file)
    management = ManagementClient(management_uri, timeout=120.0)
    where = mask_uri(management_uri)
    try:
        conversion = import_converted(management, data, layout=layout, vhost=vhost,
                                      accept_partial=accept_partial)
    except DefinitionsError as exc:
        raise click.ClickException(f"{_name(file)}: {exc}") from None
    except ImportRefused as exc:
        _print_findings(exc.findings, err=True)
        click.echo(f"rtroute: nothing imported into {where}: {exc}", err=True)
        sys.exit(PARTIAL)
    except ManagementError as exc:
        raise click.ClickException(f"import into {where} failed: {exc}") from None
    _print_findings(conversion.findings, err=False)
    into = f"{where}, vhost {vhost or '/'!r}" if is_one_vhost_export(data) else where
    click.echo(f"imported into {into}: {len(conversion.converted)} x-rtopic exchange(s) in "
               f"rtroute's {layout} layout")


def _read(file: str) -> Any:
    try:
        if file == "-":
            raw = sys.stdin.buffer.read(MAX_EXPORT_BYTES + 1)
        else:
            with open(file, "rb") as f:
                raw = f.read(MAX_EXPORT_BYTES + 1)
    except OSError as exc:
        raise click.ClickException(f"cannot read {_name(file)}: {exc.strerror}") from None
    if len(raw) > MAX_EXPORT_BYTES:
        raise click.ClickException(f"{_name(file)} is larger than "
                                   f"{MAX_EXPORT_BYTES // (1024 * 1024)} MiB")
    try:
        return json.loads(raw)
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        at = f":{line}" if line else ""
        raise click.ClickException(f"{_name(file)}{at}: not JSON: "
                                   f"{getattr(exc, 'msg', exc)}") from None


def _name(file: str) -> str:
    return "standard input/output" if file == "-" else file


def _print_findings(findings: list, err: bool) -> None:
    for finding in findings:
        click.echo(f"  {finding}", err=err)


if __name__ == "__main__":
    definitions()
