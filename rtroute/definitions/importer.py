"""Convert a definitions export for the broker it goes to, then import it there through the
management API (``POST /api/definitions``), checking first what the import would trip on."""
from __future__ import annotations

from typing import Any

from rtroute.amqp.management import ManagementClient, NotFound
from rtroute.definitions.convert import Conversion, Finding, convert

__all__ = ["ImportRefused", "import_converted", "is_one_vhost_export"]


class ImportRefused(Exception):
    """Nothing was imported: the findings say why (each a :class:`Finding`)."""

    def __init__(self, message: str, findings: list[Finding]) -> None:
        super().__init__(message)
        self.findings = findings


def is_one_vhost_export(definitions: dict[str, Any]) -> bool:
    """True for ``GET /api/definitions/VHOST``'s export: its items name no vhost."""
    items = [*definitions.get("exchanges", []), *definitions.get("queues", []),
             *definitions.get("bindings", []), *definitions.get("policies", [])]
    return "vhosts" not in definitions and not any("vhost" in item for item in items)


def import_converted(management: ManagementClient, definitions: dict[str, Any],
                     layout: str = "proxy", vhost: str | None = None,
                     accept_partial: bool = False) -> Conversion:
    """Converts ``definitions`` for the broker behind ``management`` (its version decides the
    layout's types) and imports the result. Importing the same export again changes nothing.

    Args:
        vhost: where a one-vhost export goes (default ``/``); must be None for a whole export.
        accept_partial: import even if some items cannot be carried over as they were
            (findings of kind ``cannot``).

    Returns:
        The conversion that was imported.

    Raises:
        ImportRefused: nothing imported: items that cannot be carried over (without
            ``accept_partial``), or exchanges that exist on the broker with another type (an
            x-rtopic exchange of the plugin still there, say).
        DefinitionsError: not a definitions export.
        ManagementError: the API refused the import or cannot be reached.
    """
    one_vhost = is_one_vhost_export(definitions)
    if vhost is not None and not one_vhost:
        raise ImportRefused("--vhost is for the export of one vhost; this export names the "
                            "vhost of each item", [])
    version = str(management.overview().get("rabbitmq_version", ""))
    conversion = convert(definitions, layout=layout, target_version=version or "4")
    if conversion.cannot and not accept_partial:
        raise ImportRefused(f"{len(conversion.cannot)} item(s) cannot be carried over as they "
                            "were (import anyway with --accept-partial)", conversion.cannot)
    target = (vhost or "/") if one_vhost else None
    clashes = _type_clashes(management, conversion.definitions, target)
    if clashes:
        raise ImportRefused(f"{len(clashes)} exchange(s) exist on the broker with another "
                            "type, so the import would stop half-way", clashes)
    management.import_definitions(conversion.definitions, target)
    return conversion


def _type_clashes(management: ManagementClient, definitions: dict[str, Any],
                  one_vhost: str | None) -> list[Finding]:
    """Exchanges of ``definitions`` that exist on the broker with another type (RabbitMQ cannot
    change an exchange's type: the import would fail on it after importing what came before)."""
    wanted: dict[str | None, dict[str, str]] = {}
    for x in definitions.get("exchanges", []):
        where = one_vhost if one_vhost is not None else x.get("vhost", "/")
        wanted.setdefault(where, {})[x["name"]] = x.get("type", "")
    clashes = []
    for where, types in wanted.items():
        try:
            existing = {x["name"]: x.get("type") for x in management.exchanges(where or "/")}
        except NotFound:  # a vhost the import creates
            continue
        for name, kind in types.items():
            have = existing.get(name)
            if have is not None and have != kind:
                advice = " (the plugin's exchange: delete it first, its bindings go with " \
                    "it, or import into a broker without it; docs/migrate.md)" \
                    if have == "x-rtopic" else ""
                clashes.append(Finding("cannot", where, f"exchange '{name}'",
                                       f"exists as {have}, the import declares {kind}{advice}"))
    return clashes
