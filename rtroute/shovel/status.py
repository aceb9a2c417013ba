"""The status registry: what each shovel is doing, as the plugin reports it, plus counters.

A shovel is ``starting``, ``running``, ``blocked`` (the destination sent
``connection.blocked``) or ``terminated`` with a reason; every change records the time. The
worker thread writes a :class:`ShovelStatus`; the HTTP thread reads :meth:`StatusRegistry.snapshot`
and :meth:`StatusRegistry.metrics`. Plain attribute writes and reads of ints and strings are
atomic under the GIL, and a state change (state, reason, time) is written under a lock so a
reader never sees half of one.

URIs appear only masked (``amqp://user:***@host:5672/vhost``); reasons are masked again on the
way in, so a password that slipped into an exception text does not reach ``/status``.
"""
from __future__ import annotations

import enum
import re
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from rtroute.amqp.uri import mask_uri
from rtroute.shovel.config import ShovelConfig

__all__ = ["COUNTERS", "ShovelState", "ShovelStatus", "StatusRegistry", "scrub"]


class ShovelState(enum.Enum):
    """The plugin's shovel states; ``/status`` shows the value as is."""

    STARTING = "starting"
    RUNNING = "running"
    BLOCKED = "blocked"
    TERMINATED = "terminated"


#: Counter name -> help text; each is exported as ``rtroute_shovel_<name>_total``.
COUNTERS: dict[str, str] = {
    "moved": "Messages published to the destination and settled there (confirmed, or sent when "
             "confirms are off).",
    "acked": "Source messages acknowledged (moved, or dropped by the filter/on_unroutable).",
    "nacked": "Publishes the destination nacked (each nack counts, retries included).",
    "returned": "Publishes the destination returned as unroutable (mandatory).",
    "retried": "Republishes after a destination nack.",
    "refused": "Source messages the destination nacked more than nack_retries times (once "
               "per round; each is then requeued or dead-lettered, see on_refused).",
    "dead_lettered": "Source messages nacked without requeue to the source queue's "
                     "dead-letter exchange (unroutable or refused; only when it has one).",
    "requeued": "Source messages given back to the source queue (filter leave, "
                "on_unroutable requeue, refused, or no dead-letter exchange to take them).",
    "filtered": "Source messages the filter did not match.",
    "reconnects": "Times the shovel connected both ends again after losing them.",
}


_USERINFO_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)[^@\s]*@")


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with the password of every URI in it masked and each secret replaced by ``***``."""
    text = _USERINFO_RE.sub(r"\1***@", text)
    for secret in secrets:
        if secret and len(secret) >= 3:
            text = text.replace(secret, "***")
    return text


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds")


class ShovelStatus:
    """One shovel's state and counters (written by its worker, read by anyone).

    Attributes:
        name, vhost: the shovel's name and (imported dynamic shovels) virtual host.
        source, destination: the configured URIs, masked; ``current_source`` and
            ``current_destination`` the ones in use (masked), or None.
        state, reason, since: the current :class:`ShovelState`, the termination reason (or
            None) and the wall-clock time of the last change.
        completed: True once ``src-delete-after`` was reached (terminated on purpose).
        counters: see :data:`COUNTERS`.
    """

    def __init__(self, config: ShovelConfig) -> None:
        self.name = config.name
        self.vhost = config.vhost
        self.source = [mask_uri(u) for u in config.sources.brokers]
        self.destination = [mask_uri(u) for u in config.destinations.brokers]
        self._secrets = _passwords(config.sources.brokers + config.destinations.brokers)
        self.current_source: str | None = None
        self.current_destination: str | None = None
        self.state = ShovelState.STARTING
        self.reason: str | None = None
        self.since = time.time()
        self.completed = False
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.history: list[tuple[ShovelState, str | None, float]] = [
            (self.state, None, self.since)
        ]
        self._lock = threading.Lock()

    def set_state(self, state: ShovelState, reason: str | None = None) -> None:
        """Record a state change (a no-op when neither state nor reason changes)."""
        if reason is not None:
            reason = scrub(reason, self._secrets)
        with self._lock:
            if state is self.state and reason == self.reason:
                return
            self.state = state
            self.reason = reason if state is ShovelState.TERMINATED else None
            self.since = time.time()
            self.history.append((state, self.reason, self.since))
            del self.history[:-50]

    def snapshot(self) -> dict[str, Any]:
        """This shovel as plain data (what ``/status`` shows)."""
        with self._lock:
            state, reason, since = self.state, self.reason, self.since
        row: dict[str, Any] = {
            "name": self.name,
            "state": state.value,
            "since": _iso(since),
            "source": self.current_source or ", ".join(self.source),
            "destination": self.current_destination or ", ".join(self.destination),
        }
        if self.vhost is not None:
            row["vhost"] = self.vhost
        if reason is not None:
            row["reason"] = reason
        if self.completed:
            row["completed"] = True
        row["counters"] = dict(self.counters)
        return row

    @property
    def healthy(self) -> bool:
        """False while terminated by an error (a completed shovel is healthy)."""
        return self.state is not ShovelState.TERMINATED or self.completed


def _passwords(uris: list[str]) -> list[str]:
    from urllib.parse import unquote, urlsplit

    found = []
    for uri in uris:
        try:
            password = urlsplit(uri).password
        except ValueError:
            continue
        if password:
            found += [password, unquote(password)]
    return found


class StatusRegistry:
    """The status of every shovel of a process, by name (and vhost)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shovels: dict[tuple[str | None, str], ShovelStatus] = {}

    def register(self, config: ShovelConfig) -> ShovelStatus:
        """A fresh :class:`ShovelStatus` for ``config``, replacing any of the same name."""
        status = ShovelStatus(config)
        with self._lock:
            self._shovels[(config.vhost, config.name)] = status
        return status

    def get(self, name: str, vhost: str | None = None) -> ShovelStatus:
        """The status of shovel ``name``. Raises ``KeyError`` if there is none."""
        with self._lock:
            return self._shovels[(vhost, name)]

    def all(self) -> list[ShovelStatus]:
        """Every registered shovel, in registration order."""
        with self._lock:
            return list(self._shovels.values())

    def snapshot(self) -> list[dict[str, Any]]:
        """Every shovel as plain data (see :meth:`ShovelStatus.snapshot`)."""
        return [status.snapshot() for status in self.all()]

    @property
    def healthy(self) -> bool:
        """True unless some shovel is terminated by an error."""
        return all(status.healthy for status in self.all())

    def metrics(self) -> dict[str, Any]:
        """Counters and states in the form :func:`rtroute.ops_http.prometheus_text` renders."""
        shovels = self.all()
        out: dict[str, Any] = {}
        for counter, help_text in COUNTERS.items():
            out[f"rtroute_shovel_{counter}_total"] = {
                "help": help_text,
                "type": "counter",
                "samples": [(_labels(s), s.counters[counter]) for s in shovels],
            }
        out["rtroute_shovel_state"] = {
            "help": "1 for the state each shovel is in, 0 for the others.",
            "type": "gauge",
            "samples": [
                ({**_labels(s), "state": state.value}, int(s.state is state))
                for s in shovels for state in ShovelState
            ],
        }
        return out

    def status(self) -> dict[str, Any]:
        """``{"healthy", "shovels", "metrics"}``: the status callable of the ops endpoint."""
        return {"healthy": self.healthy, "shovels": self.snapshot(), "metrics": self.metrics()}


def _labels(status: ShovelStatus) -> dict[str, str]:
    labels = {"shovel": status.name}
    if status.vhost is not None:
        labels["vhost"] = status.vhost
    return labels
