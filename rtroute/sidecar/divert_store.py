"""Diverts created at run time, kept in the broker so that they outlive the sidecar.

Artemis persists the diverts its management API creates. With ``[http] persist_diverts`` the
sidecar does the same in RabbitMQ: the global parameter ``rtroute.diverts.VHOST`` holds the
diverts created with ``POST /diverts`` (as last changed by ``PUT``/``PATCH /diverts/NAME``) as
a JSON list (the objects that endpoint takes, in creation order). Every persisting sidecar of
the vhost loads it at start, whether or not its config file names them, and reads it again
every few seconds, so a standby has the diverts the active sidecar was given when it takes
over, and a restarted sidecar has them again. A stored divert named like one of the config
file is not loaded there: the file wins (as in Artemis's ``recoverStoredDiverts``).

Writes read the list, change one entry and write it back: two sidecars changing diverts in the
same instant can lose one of the changes (the HTTP answer said it was stored; send it again).
"""
from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from rtroute.amqp import ManagementClient
from rtroute.config.rtroute_toml import ConfigError, DivertConfig, loads_divert

__all__ = ["DivertStore", "divert_json"]


def divert_json(config: Any) -> dict[str, Any]:
    """A divert as the JSON object ``POST /diverts`` takes (keys left at their default out)."""
    out: dict[str, Any] = {}
    for f in fields(DivertConfig):
        value = getattr(config, f.name)
        if value != f.default and not (f.name == "routing_name" and value == config.name):
            out[f.name] = value
    return out


class DivertStore:
    """The run-time diverts of one vhost, in a broker global parameter.

    Args:
        management: the broker's management API.
        vhost: the sidecar's vhost (several vhosts keep separate lists).

    Every method may raise :class:`rtroute.amqp.ManagementError` (broker unreachable, no
    permission to set global parameters: that needs the ``administrator`` tag).
    """

    def __init__(self, management: ManagementClient, vhost: str) -> None:
        self.management = management
        self.parameter = f"rtroute.diverts.{vhost}"

    def load(self) -> tuple[list[DivertConfig], list[str]]:
        """The stored diverts that parse, and one problem per entry that does not."""
        value = self.management.global_parameter(self.parameter)
        if value is None:
            return [], []
        if not isinstance(value, list):
            problem = f"global parameter {self.parameter}: expected a list, got " \
                f"{type(value).__name__}"
            return [], [problem]
        configs, problems = [], []
        for i, entry in enumerate(value):
            try:
                configs.append(loads_divert(json.dumps(entry),
                                            f"global parameter {self.parameter}[{i}]"))
            except ConfigError as exc:
                problems.append(str(exc))
        return configs, problems

    def put(self, config: Any) -> None:
        """Stores ``config``, replacing a stored divert of the same name."""
        entries = self._entries()
        entry = divert_json(config)
        for i, stored in enumerate(entries):
            if isinstance(stored, dict) and stored.get("name") == config.name:
                entries[i] = entry
                break
        else:
            entries.append(entry)
        self.management.put_global_parameter(self.parameter, entries)

    def remove(self, name: str) -> bool:
        """Forgets the divert ``name``; False if it was not stored."""
        entries = self._entries()
        kept = [e for e in entries if not (isinstance(e, dict) and e.get("name") == name)]
        if len(kept) == len(entries):
            return False
        if kept:
            self.management.put_global_parameter(self.parameter, kept)
        else:
            self.management.delete_global_parameter(self.parameter)
        return True

    def _entries(self) -> list[Any]:
        value = self.management.global_parameter(self.parameter)
        return list(value) if isinstance(value, list) else []
