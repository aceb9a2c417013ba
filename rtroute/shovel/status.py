"""The status registry: what each shovel is doing, as the plugin reports it, plus counters.

A shovel is ``starting``, ``running``, ``blocked`` (the destination sent
``connection.blocked``) or ``terminated`` with a reason; every change records the time. The
worker thread writes a :class:`ShovelStatus`; the HTTP thread reads :meth:`StatusRegistry.snapshot`
and :meth:`StatusRegistry.metrics`. Plain attribute writes and reads of ints and strings are
atomic under the GIL, and a state change (state, reason, time) is written under a lock so a
reader never sees half of one.

URIs appear as the plugin shows them, without credentials (``amqp://host:5672/vhost``, see
:func:`uri_without_credentials`); reasons are masked on the way in, so a password that slipped
into an exception text does not reach ``/status``.

The plugin's view of each shovel is there too (``rabbitmqctl shovel_status``): ``type``
(``static`` for ``rtroute.toml`` and Erlang-config shovels, ``dynamic`` for those imported from a
definitions export), ``last_changed`` as ``YYYY-MM-DD HH:MM:SS`` (local time, as the plugin's
``calendar:local_time()``), ``source_protocol``, ``termination_reason``, the source and
destination details, and 4.3's counters ``pending``, ``remaining``, ``remaining_unacked`` and
``forwarded`` (see :meth:`rtroute.shovel.worker.ShovelWorker.plugin_metrics`); ``/metrics``
counts shovels by type and state as ``rabbitmq_shovel_prometheus`` does
(``rabbitmq_shovel_dynamic{status}``, ``rabbitmq_shovel_static{status}``).
"""
from __future__ import annotations

import enum
import re
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

from rtroute.amqp.uri import mask_uri
from rtroute.config.shovel import RefusedShovel, ShovelConfig
from rtroute.ops.metrics import counter_metrics

__all__ = ["COUNTERS", "ShovelState", "ShovelStatus", "StatusRegistry", "scrub",
           "uri_without_credentials"]


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
    "forwarded": "Source messages published to the destination (a republish after a nack "
                 "counts in retried, not here); the 4.3 plugin's forwarded.",
    "reconnects": "Times the shovel connected both ends again after losing them.",
}


_USERINFO_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)[^@\s]*@")
# ``amqp://user:secret/`` (no ``@``): a "port" that is not a number is a password
_BARE_PASSWORD_RE = re.compile(
    r"([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s\[\]]*:)(?=[^/@\s]*[^0-9/@\s])[^/@\s]+(?=[/\s?]|$)")
# user info with a "/" or "?" in it (amqp://a/b:secret@host): masked whole, as mask_uri does
_ODD_USERINFO_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^@\s/?]*[/?][^@\s]*:[^@\s]*@")
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/*")


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with the password of every URI in it masked and each secret replaced by ``***``.

    Masks ``user:PASSWORD@`` and also a non-numeric "port" of a URI without ``@``
    (``amqp://user:PASSWORD/``), which is how a password looks when the ``@`` was forgotten.
    """
    text = _ODD_USERINFO_RE.sub(r"\1***@", text)
    text = _USERINFO_RE.sub(r"\1***@", text)
    text = _BARE_PASSWORD_RE.sub(r"\1***", text)
    for secret in secrets:
        if secret and len(secret) >= 3:
            text = text.replace(secret, "***")
    return text


def uri_without_credentials(uri: str) -> str:
    """``scheme://host[:port]/path`` as the plugin shows a URI (``amqp_uri:remove_credentials``):
    user info and query dropped, the port only if the URI gives one.

    Robust on URIs that do not parse: the user info is everything before the *last* ``@``, and
    without an ``@`` a non-numeric "port" (``amqp://user:secret/``) is
    dropped with what precedes it, so no password survives either way.
    """
    scheme = _SCHEME_RE.match(uri)
    if scheme is None:
        return mask_uri(uri)
    # the query (it may hold a TLS key password) and fragment are dropped
    rest = uri[scheme.end():].split("?", 1)[0].split("#", 1)[0]
    # the user info ends at the last "@", even past a "/" (amqp://a/b:secret@host): more
    # is hidden rather than less
    has_userinfo = "@" in rest
    rest = rest.rpartition("@")[2]
    authority, slash, path = rest.partition("/")
    path = slash + path
    if not has_userinfo and not authority.startswith("["):
        _host, has_port, port = authority.partition(":")
        if has_port and not port.isdigit():
            authority = ""   # user:password without "@": neither is a host
    if authority.startswith("[") and "]" in authority:
        host, _bracket, port_part = authority[1:].partition("]")
        authority = f"[{host}]" + (port_part if port_part[1:].isdigit() else "")
    else:
        host, has_port, port = authority.partition(":")
        authority = host + (f":{port}" if has_port and port.isdigit() else "")
    return f"{scheme.group(1)}://{authority}{path}"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds")


def _plugin_time(ts: float) -> str:
    """``YYYY-MM-DD HH:MM:SS`` in local time, as ``rabbitmqctl shovel_status`` shows it."""
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


class ShovelStatus:
    """One shovel's state and counters (written by its worker, read by anyone).

    Attributes:
        name, vhost: the shovel's name and (imported dynamic shovels) virtual host.
        type: ``static`` or ``dynamic`` (imported from a definitions export), the plugin's
            names.
        source, destination: the configured URIs, masked; ``current_source`` and
            ``current_destination`` the ones in use (masked), or None. ``/status`` shows them
            without credentials, as the plugin does.
        details: the plugin's ``source_queue``/``source_exchange``/``source_exchange_key`` and
            ``destination_queue``/``destination_exchange``/``destination_exchange_key``.
        state, reason, since: the current :class:`ShovelState`, the termination reason (or
            None) and the wall-clock time of the last change.
        completed: True once ``src-delete-after`` or ``src-delete-after-duration`` was
            reached (terminated on purpose).
        counters: see :data:`COUNTERS`.
        live: returns the 4.3 plugin's ``pending``, ``remaining``, ``remaining_unacked`` and
            ``forwarded`` (set by the worker), or None.
    """

    def __init__(self, config: ShovelConfig) -> None:
        self.name = config.name
        self.vhost = config.vhost
        self.type = "dynamic" if config.vhost is not None else "static"
        self.source = [mask_uri(u) for u in config.sources.brokers]
        self.destination = [mask_uri(u) for u in config.destinations.brokers]
        self._secrets = _passwords(config.sources.brokers + config.destinations.brokers)
        self.details = _details(config)
        self.current_source: str | None = None
        self.current_destination: str | None = None
        self.state = ShovelState.STARTING
        self.reason: str | None = None
        self.since = time.time()
        self.completed = False
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.live: Callable[[], dict[str, Any]] | None = None
        self.history: list[tuple[ShovelState, str | None, float]] = [
            (self.state, None, self.since)
        ]
        self._lock = threading.Lock()

    @classmethod
    def for_refused(cls, refused: RefusedShovel) -> ShovelStatus:
        """The status of a shovel that is not run (see :class:`RefusedShovel`): terminated,
        with the reason."""
        status = cls.__new__(cls)
        status.name, status.vhost = refused.name, refused.vhost
        status.type = "dynamic" if refused.vhost is not None else "static"
        status.source, status.destination = [], []
        status._secrets = []
        status.details = {}
        status.current_source = status.current_destination = None
        status.since = time.time()
        status.state = ShovelState.TERMINATED
        status.reason = scrub(refused.reason)
        status.completed = False
        status.counters = dict.fromkeys(COUNTERS, 0)
        status.live = None
        status.history = [(status.state, status.reason, status.since)]
        status._lock = threading.Lock()
        return status

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
        """This shovel as plain data (what ``/status`` shows).

        ``name``, ``state``, ``since`` (ISO 8601, UTC), ``source``, ``destination`` (URIs
        without credentials), ``vhost`` (dynamic shovels), ``reason`` (terminated),
        ``completed`` and ``counters``; and the columns of ``rabbitmqctl shovel_status``:
        ``type``, ``last_changed``, ``source_protocol``, ``destination_protocol``,
        ``source_uri``, ``destination_uri``, ``termination_reason`` (``""`` unless
        terminated), the source/destination details, and 4.3's ``pending``, ``remaining``,
        ``remaining_unacked`` (``"unlimited"`` without ``src-delete-after``) and
        ``forwarded``; ``internal`` and ``internal_owner`` when the shovel has them.
        """
        with self._lock:
            state, reason, since = self.state, self.reason, self.since
        source = _plain_uris([self.current_source] if self.current_source else self.source)
        destination = _plain_uris(
            [self.current_destination] if self.current_destination else self.destination)
        row: dict[str, Any] = {
            "name": self.name,
            "state": state.value,
            "since": _iso(since),
            "source": source,
            "destination": destination,
        }
        if self.vhost is not None:
            row["vhost"] = self.vhost
        if reason is not None:
            row["reason"] = reason
        if self.completed:
            row["completed"] = True
        row["counters"] = dict(self.counters)
        row.update({
            "type": self.type,
            "last_changed": _plugin_time(since),
            "source_protocol": "amqp091",
            "source_uri": source,
            "destination_protocol": "amqp091",
            "destination_uri": destination,
            "termination_reason": reason or "",
            **self.details,
        })
        if self.live is not None:
            row.update(self.live())
        else:
            row.update(pending=0, remaining=None, remaining_unacked=None,
                       forwarded=self.counters["forwarded"])
        return row

    @property
    def healthy(self) -> bool:
        """False while terminated by an error (a completed shovel is healthy)."""
        return self.state is not ShovelState.TERMINATED or self.completed


def _plain_uris(uris: list[str]) -> str:
    return ", ".join(uri_without_credentials(u) for u in uris)


def _details(config: ShovelConfig) -> dict[str, Any]:
    """The plugin's source and destination details (``details_to_map`` of its status
    command), and 4.3's ``internal``/``internal_owner`` when the shovel has them."""
    details: dict[str, Any] = {}
    if config.src_exchange is not None:
        details["source_exchange"] = config.src_exchange
        details["source_exchange_key"] = config.src_exchange_key
    elif config.queue:
        details["source_queue"] = config.queue
    for key, value in (("destination_exchange", config.dest_exchange),
                       ("destination_exchange_key", config.dest_exchange_key),
                       ("destination_queue", config.dest_queue)):
        if value is not None:
            details[key] = value
    if config.internal:
        details["internal"] = True
    if config.internal_owner is not None:
        details["internal_owner"] = dict(config.internal_owner)
    return details


def _passwords(uris: list[str]) -> list[str]:
    """The password of each URI (as written and percent-decoded), found even where
    ``urlsplit`` finds none: a URI without ``@`` (``amqp://user:secret/``) holds it as a
    non-numeric "port", and a ``password=`` query value is one too."""
    from urllib.parse import unquote

    found = []
    for uri in uris:
        scheme = _SCHEME_RE.match(uri)
        rest = uri[scheme.end():] if scheme else uri
        end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0),
                  default=len(rest))
        authority = rest[:end]
        candidates = []
        if "@" in rest:
            userinfo = rest.rpartition("@")[0]
            user, has_password, password = userinfo.partition(":")
            candidates.append(password if has_password else "")
            if any(c in user for c in "/?"):
                candidates.append(userinfo)   # ambiguous: mask the whole user info
        elif not authority.startswith("["):
            _host, has_port, port = authority.partition(":")
            if has_port and not port.isdigit():
                candidates.append(port)
        candidates += re.findall(r"(?i)[?&](?:password|pass|passwd)=([^&#]*)", uri)
        for password in candidates:
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

    def register_refused(self, refused: RefusedShovel) -> ShovelStatus:
        """Show a shovel that is not run (terminated, with the reason)."""
        status = ShovelStatus.for_refused(refused)
        with self._lock:
            self._shovels[(refused.vhost, refused.name)] = status
        return status

    def remove(self, name: str, vhost: str | None = None) -> ShovelStatus:
        """Forget shovel ``name`` (deleted). Raises ``KeyError`` if there is none."""
        with self._lock:
            return self._shovels.pop((vhost, name))

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
        """Counters and states in the form :func:`rtroute.ops.http.prometheus_text` renders."""
        shovels = self.all()
        out = counter_metrics("rtroute_shovel_", COUNTERS,
                              [(_labels(s), s.counters) for s in shovels])
        out["rtroute_shovel_state"] = {
            "help": "1 for the state each shovel is in, 0 for the others.",
            "type": "gauge",
            "samples": [
                ({**_labels(s), "state": state.value}, int(s.state is state))
                for s in shovels for state in ShovelState
            ],
        }
        # rabbitmq_shovel_prometheus: one gauge per type, a sample per state seen; the plugin
        # reports a blocked shovel as running (blocked is a detail of its running state)
        for kind in ("dynamic", "static"):
            counts: dict[str, int] = {}
            for s in shovels:
                if s.type == kind:
                    state = "running" if s.state is ShovelState.BLOCKED else s.state.value
                    counts[state] = counts.get(state, 0) + 1
            out[f"rabbitmq_shovel_{kind}"] = {
                "help": f"Number of {kind} shovels",
                "type": "gauge",
                "samples": [({"status": state}, count) for state, count in sorted(counts.items())],
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
