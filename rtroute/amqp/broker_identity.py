"""Is this management API the one of the broker we are connected to over AMQP?

A management URI derived from an AMQP URI (``host:5673`` gives ``http://host:15672/``) can point
at *another* broker on the same host. Trusting it is how a sidecar ends up with the binding
table of the wrong broker: an empty listing, every message unroutable. So every user of the
management API checks, before it believes a listing, that both sides name the same cluster.

What is compared: the ``cluster_name`` that RabbitMQ sends in the AMQP ``connection.start``
server properties and the ``cluster_name`` of ``GET /api/overview``. Two separate brokers report
different ones unless an operator named them alike. A cluster whose name was set
(``rabbitmqctl set_cluster_name``) reports it on every node, so a client may connect to one node
and ask another's API. A cluster whose name was never set does not: RabbitMQ 3.x and 4.0 derive
the default from the node answering, its node name with the host as the machine's FQDN (node
``rabbit-2@localhost`` on host ``vm`` says ``rabbit-2@vm``). So when the names differ and the API
lists the nodes of its cluster, the AMQP side's name still matches if it is the default name of
one of those nodes (same node name before ``@``; the host after it equal, one the FQDN of the
other, or ``localhost``). Pure functions, no I/O.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = ["BrokerIdentity", "BrokerMismatch", "check_same_broker", "identity_from_overview",
           "identity_from_server_properties", "is_default_name_of"]


class BrokerMismatch(ValueError):
    """The management API belongs to another broker than the AMQP connection (the message is
    one line and says what to set)."""


@dataclass(frozen=True)
class BrokerIdentity:
    """What a broker says it is: its cluster name and version (either may be unknown), and,
    from the management API, its exchange types (``x-rtopic`` where the plugin runs)."""

    cluster_name: str | None
    version: str | None = None
    exchange_types: tuple[str, ...] = field(default=(), compare=False)

    def describe(self) -> str:
        name = self.cluster_name or "an unnamed cluster"
        return f"{name!r} (RabbitMQ {self.version})" if self.version else repr(name)


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return None if value is None else str(value)


def identity_from_server_properties(properties: Mapping[str, Any] | None) -> BrokerIdentity:
    """The identity in an AMQP ``connection.start`` (pika: ``connection.server_properties``)."""
    properties = properties or {}
    return BrokerIdentity(_text(properties.get("cluster_name")),
                          _text(properties.get("version")))


def identity_from_overview(overview: Mapping[str, Any] | None) -> BrokerIdentity:
    """The identity in the management API's ``GET /api/overview``."""
    overview = overview or {}
    types = overview.get("exchange_types")
    return BrokerIdentity(_text(overview.get("cluster_name")),
                          _text(overview.get("rabbitmq_version")),
                          tuple(str(t.get("name")) for t in types if isinstance(t, dict))
                          if isinstance(types, list) else ())


def is_default_name_of(cluster_name: str, nodes: Sequence[str]) -> bool:
    """Whether ``cluster_name`` is RabbitMQ's default cluster name as one of ``nodes`` (Erlang
    node names, ``NAME@HOST``) would report it (see the module's docstring)."""
    name, _, host = cluster_name.partition("@")
    for node in nodes:
        node_name, _, node_host = node.partition("@")
        if node_name == name and _same_host(host, node_host):
            return True
    return False


def _same_host(a: str, b: str) -> bool:
    if a == b or "localhost" in (a, b):
        return True
    return a.startswith(b + ".") or b.startswith(a + ".")


def check_same_broker(amqp: BrokerIdentity, management: BrokerIdentity, amqp_where: str,
                      management_where: str, option: str = "--management-uri",
                      management_nodes: Sequence[str] = ()) -> None:
    """Raises :class:`BrokerMismatch` unless both identities name the same cluster.

    Args:
        amqp, management: what each side said.
        amqp_where, management_where: the two endpoints, for the message (pass masked URIs).
        option: what the user sets to fix it, named in the message.
        management_nodes: the nodes the management API lists for its cluster (``GET
            /api/nodes``), for a cluster without a name of its own.

    A side that does not name its cluster (an AMQP server other than RabbitMQ, a proxy that
    hides it) cannot be checked: that is not a mismatch.
    """
    if not amqp.cluster_name or not management.cluster_name:
        return
    if amqp.cluster_name == management.cluster_name:
        return
    if len(management_nodes) > 1 and is_default_name_of(amqp.cluster_name, management_nodes) \
            and is_default_name_of(management.cluster_name, management_nodes):
        return  # one cluster without a name of its own: each node says its own default
    hint = _conventional_management_url(amqp_where)
    if hint and _host_port(hint) == _host_port(management_where):
        hint = None
    raise BrokerMismatch(
        f"the management API {management_where} belongs to broker {management.describe()}, "
        f"not to {amqp.describe()} at {amqp_where}: set {option} to that broker's management "
        f"API" + (f" (by RabbitMQ's port convention {hint})" if hint else ""))


def _host_port(uri: str) -> tuple[str | None, int | None]:
    try:
        parts = urlsplit(uri)
        return parts.hostname, parts.port
    except ValueError:
        return None, None


def _conventional_management_url(amqp_where: str) -> str | None:
    """``http://host:PORT+10000/`` for an AMQP URI on a non-default port (5673 -> 15673)."""
    try:
        parts = urlsplit(amqp_where)
        port = parts.port
    except ValueError:
        return None
    if port is None or parts.hostname is None or port + 10000 > 65535:
        return None
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    scheme = "https" if parts.scheme == "amqps" else "http"
    return f"{scheme}://{host}:{port + 10000}/"
