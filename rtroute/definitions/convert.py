"""A RabbitMQ definitions export with x-rtopic exchanges, turned into one that a broker without
the plugin (RabbitMQ 4.3, a hosted broker) imports, with rtroute's layout in their place.

Pure logic over the export's JSON (dicts and lists): no file, no broker. Each x-rtopic exchange
``NAME`` becomes the layout the proxy declares (``rtroute proxy``, the default) or the one the
sidecar declares (``layout="sidecar"``); the bindings from ``NAME`` move to ``NAME.bindings``;
what RabbitMQ 4 no longer accepts (classic queue mirroring keys in policies) is dropped;
everything else is kept as it is, in its order. Every change, and everything that cannot be
carried over as it was, is a :class:`Finding` with its reason.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from rtroute.routing.delivery_plan import bindings_exchange_type
from rtroute.routing.rtopic_layout import (
    BINDINGS_SUFFIX,
    LAYOUT_ARGUMENT,
    LAYOUT_VALUE,
    REGISTRY_EXCHANGE,
)

__all__ = ["LAYOUTS", "Conversion", "DefinitionsError", "Finding", "convert"]

RTOPIC_TYPE = "x-rtopic"
LAYOUTS = ("proxy", "sidecar")
# the sidecar's ingress queue (rtroute.config.rtroute_toml.ExchangeConfig.ingress_queue)
INGRESS_PREFIX = "rtroute.ingress."
# policy keys of classic queue mirroring, removed in RabbitMQ 4.0 (a 4.x broker refuses them)
MIRRORING_KEYS = ("ha-mode", "ha-params", "ha-sync-mode", "ha-sync-batch-size",
                  "ha-promote-on-shutdown", "ha-promote-on-failure")
_ITEM_KINDS = ("exchanges", "queues", "bindings", "policies", "permissions")


class DefinitionsError(ValueError):
    """The input is not a RabbitMQ definitions export (with what is wrong and where)."""


@dataclass(frozen=True)
class Finding:
    """One thing the conversion did or could not do.

    Attributes:
        kind: ``converted`` (an x-rtopic exchange now in rtroute's layout), ``changed``
            (something else altered so that the target imports it), ``check`` (kept as it
            was, but it acts differently with the new layout: the text says what to do) or
            ``cannot`` (kept as it was; it will not work as it did with the plugin).
        vhost: the virtual host (None in a one-vhost export).
        subject: what it is about, e.g. ``exchange 'logs'``.
        text: what was done, or why not.
    """

    kind: str
    vhost: str | None
    subject: str
    text: str

    def __str__(self) -> str:
        where = "" if self.vhost is None else f" (vhost '{self.vhost}')"
        return f"{self.kind}: {self.subject}{where}: {self.text}"


@dataclass
class Conversion:
    """The converted export and what was done to get it."""

    definitions: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)

    @property
    def converted(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "converted"]

    @property
    def cannot(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "cannot"]

    def report(self) -> dict[str, Any]:
        """The findings as JSON-ready data (``--report``)."""
        return {"findings": [{"kind": f.kind, "vhost": f.vhost, "subject": f.subject,
                              "text": f.text} for f in self.findings],
                "converted": len(self.converted), "cannot": len(self.cannot)}


def convert(definitions: Any, layout: str = "proxy", target_version: str = "4.3",
            ingress_queue_type: str = "quorum") -> Conversion:
    """Converts a definitions export (``GET /api/definitions`` or one vhost's) for a broker of
    ``target_version`` without the x-rtopic plugin.

    Args:
        definitions: the export, as parsed from its JSON (left unchanged).
        layout: ``proxy`` (clients reach the broker through ``rtroute proxy``, as they reached
            the plugin) or ``sidecar`` (``rtroute run --rtopic NAME`` routes what is
            published to ``NAME``, ingress queue ``rtroute.ingress.NAME``).
        target_version: the RabbitMQ version that will import it: ``NAME.bindings`` is a
            direct exchange from 4 on, a topic exchange on 3.x, as the proxy and the sidecar
            declare it; mirroring keys are dropped from 4 on.
        ingress_queue_type: the sidecar's ingress queues (``classic`` or ``quorum``).

    Raises:
        DefinitionsError: not a definitions export, or an unknown layout.
    """
    if layout not in LAYOUTS:
        raise DefinitionsError(f"unknown layout {layout!r}: use one of {', '.join(LAYOUTS)}")
    _check_shape(definitions)
    out = copy.deepcopy(definitions)
    findings: list[Finding] = []
    major = _major(target_version)
    rtopic = {(_vhost(x), x.get("name")): x for x in out.get("exchanges", [])
              if x.get("type") == RTOPIC_TYPE}
    names = {(_vhost(x), x.get("name")) for x in out.get("exchanges", [])}
    refused = _name_clashes(rtopic, names, findings)
    for key in refused:
        del rtopic[key]
    if rtopic:
        bindings_type = bindings_exchange_type(target_version)
        moved = _move_bindings(out, rtopic, bindings_type, findings)
        _convert_exchanges(out, rtopic, layout, bindings_type, ingress_queue_type, moved,
                           findings)
        if layout == "proxy":
            _check_broker_routed(out, rtopic, findings)
        _check_policies(out, rtopic, findings)
        _check_permissions(out, rtopic, layout, findings)
    if major >= 4:
        _drop_mirroring(out, findings)
    return Conversion(out, findings)


def _check_shape(definitions: Any) -> None:
    if not isinstance(definitions, dict):
        raise DefinitionsError("a definitions export is a JSON object, this is "
                               f"{type(definitions).__name__}")
    if not any(k in definitions for k in (*_ITEM_KINDS, "vhosts", "users")):
        raise DefinitionsError("no exchanges, queues, bindings, policies, vhosts or users: "
                               "not a RabbitMQ definitions export")
    for kind in _ITEM_KINDS:
        items = definitions.get(kind, [])
        if not isinstance(items, list):
            raise DefinitionsError(f"'{kind}' is {type(items).__name__}, not a list")
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise DefinitionsError(f"{kind}[{i}] is {type(item).__name__}, not an object")
            if kind in ("exchanges", "queues", "policies") and \
                    not isinstance(item.get("name"), str):
                raise DefinitionsError(f"{kind}[{i}] has no name")
            if kind == "bindings" and not all(isinstance(item.get(k), str) for k in
                                              ("source", "destination", "destination_type")):
                raise DefinitionsError(f"bindings[{i}] needs source, destination and "
                                       "destination_type")


def _major(version: str) -> int:
    head = str(version).split(".", 1)[0]
    if not head.isdigit():
        raise DefinitionsError(f"target version {version!r} is not a RabbitMQ version "
                               "such as 4.3 or 3.13")
    return int(head)


def _vhost(item: dict[str, Any]) -> str | None:
    return item.get("vhost")


def _with_vhost(vhost: str | None, item: dict[str, Any]) -> dict[str, Any]:
    """``item`` with the vhost first, as RabbitMQ exports it (none in a one-vhost export)."""
    return item if vhost is None else {"vhost": vhost, **item}


def _name_clashes(rtopic: dict, names: set, findings: list[Finding]) -> list:
    refused = []
    for (vhost, name) in rtopic:
        if (vhost, name + BINDINGS_SUFFIX) in names:
            findings.append(Finding(
                "cannot", vhost, f"exchange '{name}'",
                f"'{name}{BINDINGS_SUFFIX}' already exists in the export, and rtroute's layout "
                "needs that name: kept as x-rtopic (the target will refuse its type)"))
            refused.append((vhost, name))
    return refused


def _convert_exchanges(out: dict, rtopic: dict, layout: str, bindings_type: str,
                       ingress_queue_type: str, moved: dict, findings: list[Finding]) -> None:
    exchanges: list[dict[str, Any]] = []
    queues: list[dict[str, Any]] = []
    bindings: list[dict[str, Any]] = []
    registries: set[str | None] = set()
    for x in out.get("exchanges", []):
        key = (_vhost(x), x.get("name"))
        if key not in rtopic:
            exchanges.append(x)
            continue
        vhost, name = key
        durable, auto_delete = bool(x.get("durable", True)), bool(x.get("auto_delete", False))
        arguments = dict(x.get("arguments") or {})
        exchanges.append(_with_vhost(vhost, {
            "name": name, "type": "fanout", "durable": durable, "auto_delete": auto_delete,
            "internal": bool(x.get("internal", False)),
            "arguments": {LAYOUT_ARGUMENT: LAYOUT_VALUE}}))
        # the client's arguments (an alternate-exchange) go where the routing happens
        exchanges.append(_with_vhost(vhost, {
            "name": name + BINDINGS_SUFFIX, "type": bindings_type, "durable": durable,
            "auto_delete": auto_delete, "internal": False, "arguments": arguments}))
        if layout == "proxy":
            if vhost not in registries:
                registries.add(vhost)
                exchanges.append(_with_vhost(vhost, {
                    "name": REGISTRY_EXCHANGE, "type": "direct", "durable": True,
                    "auto_delete": False, "internal": True, "arguments": {}}))
            bindings.append(_with_vhost(vhost, {
                "source": REGISTRY_EXCHANGE, "destination": name + BINDINGS_SUFFIX,
                "destination_type": "exchange", "routing_key": name, "arguments": {}}))
            how = (f"fanout '{name}' (marked {LAYOUT_ARGUMENT}={LAYOUT_VALUE}) + {bindings_type} "
                   f"'{name}{BINDINGS_SUFFIX}' + registration in '{REGISTRY_EXCHANGE}'")
        else:
            ingress = INGRESS_PREFIX + name
            queue_args: dict[str, Any] = {"x-single-active-consumer": True,
                                          "x-queue-type": ingress_queue_type}
            queues.append(_with_vhost(vhost, {"name": ingress, "durable": True,
                                              "auto_delete": False, "arguments": queue_args}))
            bindings.append(_with_vhost(vhost, {
                "source": name, "destination": ingress, "destination_type": "queue",
                "routing_key": "", "arguments": {}}))
            how = (f"fanout '{name}' + {bindings_type} '{name}{BINDINGS_SUFFIX}' + ingress "
                   f"queue '{ingress}' (run the sidecar with --rtopic {name})")
        if not durable:
            how += "; transient, as it was: it goes with a node restart"
        findings.append(Finding("converted", vhost, f"exchange '{name}'",
                                f"{how}; {moved.get(key, 0)} binding(s) moved to "
                                f"'{name}{BINDINGS_SUFFIX}'"))
    out["exchanges"] = exchanges
    if queues:
        out["queues"] = [*out.get("queues", []), *queues]
    out["bindings"] = [*out.get("bindings", []), *bindings]


def _move_bindings(out: dict, rtopic: dict, bindings_type: str,
                   findings: list[Finding]) -> dict:
    """Moves the bindings from each ``NAME`` to ``NAME.bindings``; how many, per exchange."""
    moved: dict = {}
    for b in out.get("bindings", []):
        key = (_vhost(b), b["source"])
        if key not in rtopic:
            continue
        moved[key] = moved.get(key, 0) + 1
        b["source"] = b["source"] + BINDINGS_SUFFIX
        key = str(b.get("routing_key", ""))
        if bindings_type == "topic" and any(w in ("*", "#") for w in key.split(".")):
            findings.append(Finding(
                "check", _vhost(b), f"binding of '{b['destination']}' with key '{key}'",
                "with the plugin a '*' or '#' word in a binding key is a plain word; in the "
                f"topic exchange '{b['source']}' (the layout on RabbitMQ 3.x) it is a "
                "wildcard (docs/proxy.md)"))
    return moved


def _check_broker_routed(out: dict, rtopic: dict, findings: list[Finding]) -> None:
    """What the broker itself routes into an x-rtopic ``NAME`` (not a client through the
    proxy): the layout's fanout has no bindings, so with the proxy such messages reach no
    queue. The sidecar's layout routes them (they reach its ingress queue)."""
    advice = "with the proxy's layout such messages reach no queue: use --layout sidecar"
    for b in out.get("bindings", []):
        if b["destination_type"] == "exchange" and (_vhost(b), b["destination"]) in rtopic:
            findings.append(Finding(
                "cannot", _vhost(b), f"binding '{b['source']}' -> '{b['destination']}'",
                f"the broker routes into '{b['destination']}' from another exchange; {advice}"))
    for kind, what, argument in (("exchanges", "exchange", "alternate-exchange"),
                                 ("queues", "queue", "x-dead-letter-exchange")):
        for item in out.get(kind, []):
            target = (item.get("arguments") or {}).get(argument)
            if (_vhost(item), target) in rtopic:
                findings.append(Finding(
                    "cannot", _vhost(item), f"{what} '{item['name']}'",
                    f"its {argument} is x-rtopic '{target}'; {advice}"))
    for policy in out.get("policies", []):
        definition = policy.get("definition") or {}
        for argument in ("alternate-exchange", "dead-letter-exchange"):
            target = definition.get(argument)
            if (_vhost(policy), target) in rtopic:
                findings.append(Finding(
                    "cannot", _vhost(policy), f"policy '{policy['name']}'",
                    f"its {argument} is x-rtopic '{target}'; {advice}"))


def _check_policies(out: dict, rtopic: dict, findings: list[Finding]) -> None:
    """A policy for exchanges that matched ``NAME`` (an alternate exchange) now applies to
    the fanout; the routing happens in ``NAME.bindings``, which its pattern may not match."""
    for policy in out.get("policies", []):
        if policy.get("apply-to", "all") not in ("all", "exchanges"):
            continue
        pattern = _regex(policy.get("pattern", ""))
        if pattern is None:
            continue
        for (vhost, name) in rtopic:
            if vhost != _vhost(policy) or not pattern.search(name) or \
                    pattern.search(name + BINDINGS_SUFFIX):
                continue
            findings.append(Finding(
                "check", vhost, f"policy '{policy['name']}'",
                f"its pattern matches '{name}' but not '{name}{BINDINGS_SUFFIX}', where the "
                f"messages of '{name}' are routed now: extend it, e.g. "
                f"'^{re.escape(name)}(\\.bindings)?$'"))


def _check_permissions(out: dict, rtopic: dict, layout: str, findings: list[Finding]) -> None:
    """Binding to ``NAME`` and publishing to it through the proxy need the same permission on
    ``NAME.bindings`` too (docs/proxy.md): a pattern that covers ``NAME`` only refuses them."""
    for permission in out.get("permissions", []):
        vhost = _vhost(permission)
        for operation in ("write", "read"):
            pattern = _regex(permission.get(operation, ""))
            if pattern is None:
                continue
            missing = sorted(name for (v, name) in rtopic if v == vhost and
                             pattern.search(name) and not pattern.search(name + BINDINGS_SUFFIX))
            if not missing:
                continue
            shown = ", ".join(f"'{n}'" for n in missing[:5]) + \
                (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            refused = "binds and publishes through the proxy" if layout == "proxy" else "binds"
            findings.append(Finding(
                "check", vhost, f"permissions of user '{permission.get('user')}'",
                f"{operation} covers {shown} but not the '{BINDINGS_SUFFIX}' exchange of "
                f"each: {refused} will be refused; extend the pattern, e.g. "
                f"'^{re.escape(missing[0])}(\\.bindings)?$'"))


def _regex(pattern: Any) -> re.Pattern[str] | None:
    """RabbitMQ's patterns are Erlang (PCRE) regular expressions; the common ones read the same
    in Python. One Python cannot compile is skipped (None), not guessed."""
    try:
        return re.compile(str(pattern))
    except re.error:
        return None


def _drop_mirroring(out: dict, findings: list[Finding]) -> None:
    kept = []
    for policy in out.get("policies", []):
        definition = policy.get("definition")
        dropped = [k for k in MIRRORING_KEYS if isinstance(definition, dict) and k in definition]
        if not dropped:
            kept.append(policy)
            continue
        rest = {k: v for k, v in definition.items() if k not in MIRRORING_KEYS}
        what = ", ".join(dropped)
        if rest:
            policy["definition"] = rest
            kept.append(policy)
            text = f"dropped {what}: classic queue mirroring was removed in RabbitMQ 4.0 " \
                   "(use quorum queues for replication); the rest of the policy is kept"
        else:
            text = f"removed: it held only {what}, and classic queue mirroring was removed " \
                   "in RabbitMQ 4.0 (use quorum queues for replication)"
        findings.append(Finding("changed", _vhost(policy), f"policy '{policy['name']}'", text))
    if "policies" in out:
        out["policies"] = kept
