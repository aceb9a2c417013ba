"""Whether an x-rtopic registration found in the broker may be followed (see
:mod:`rtroute.proxy.catalog`): ``NAME`` must be the layout's fanout, marked by a proxy or fed to
a sidecar's ingress, so that a user who may not read ``NAME`` cannot have the proxy send its
messages to an exchange of theirs. Blocking: management API requests (the catalog runs them in
its executor)."""
from __future__ import annotations

from typing import Any

from rtroute.amqp.management import ManagementClient, NotFound
from rtroute.routing.rtopic_layout import LAYOUT_ARGUMENT, LAYOUT_VALUE

__all__ = ["BATCH_CHECK", "layout_error", "layout_errors"]

# registrations checked one by one at most; more at once are checked from one listing
BATCH_CHECK = 8


def layout_error(management: ManagementClient, name: str, vhost: str) -> str | None:
    """Why a registration of ``name`` must not be followed (None: it is an x-rtopic exchange
    of the layout: see the module doc). Blocking: management API requests."""
    try:
        exchange = management.exchange(name, vhost)
    except NotFound:
        return f"there is no exchange {name!r}"
    return _layout_error_of(management, name, vhost, exchange)


def layout_errors(management: ManagementClient, names: list[str], vhost: str
                  ) -> dict[str, str | None]:
    """:func:`layout_error` of each of ``names``: a few one by one, more from one listing of
    the vhost's exchanges (a proxy that starts beside thousands of x-rtopic exchanges asks the
    API once, not thousands of times). Blocking."""
    if len(names) <= BATCH_CHECK:
        return {name: layout_error(management, name, vhost) for name in names}
    listed = {e.get("name"): e for e in management.exchanges(vhost)}
    return {name: _layout_error_of(management, name, vhost, listed[name]) if name in listed
            else f"there is no exchange {name!r}" for name in names}


def _layout_error_of(management: ManagementClient, name: str, vhost: str,
                     exchange: dict[str, Any]) -> str | None:
    if exchange.get("type") != "fanout":
        return f"exchange {name!r} is of type {exchange.get('type')!r}, not the layout's fanout"
    if (exchange.get("arguments") or {}).get(LAYOUT_ARGUMENT) == LAYOUT_VALUE:
        return None
    sidecar = {("queue", f"rtroute.ingress.{name}"), ("exchange", f"{name}.shards")}
    if any((b.destination_type, b.destination) in sidecar
           for b in management.exchange_bindings(name, vhost)):
        return None
    return (f"exchange {name!r} was neither declared x-rtopic through a proxy nor is it a "
            "sidecar's ingress")
