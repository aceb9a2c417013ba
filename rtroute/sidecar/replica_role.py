"""Which replica of the sidecar routes an exchange: the ingress queue has a single active
consumer, and the broker's management API names it (``single_active_consumer_tag`` of the
queue, as ``rabbitmqctl list_queues single_active_consumer_tag`` shows). A replica whose
consumer tag is that one is ``active``; another that consumes is ``standby`` (it takes over
when the active one goes away).

The API's queue figures come from statistics the broker emits every ~5 s, so a change of role
shows within about that. ``/status`` never waits for the API: it shows the last answer, and a
background thread asks again once it is :data:`ROLE_TTL` seconds old (one question at a time).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

__all__ = ["ROLE_TTL", "ReplicaRoles"]

LOG = logging.getLogger(__name__)
ROLE_TTL = 5.0  # seconds an answer is shown before it is asked again


class ReplicaRoles:
    """The role of this replica's consumer on each ingress queue (``/status``, ``/metrics``).

    Args:
        management: the broker's management client (None: roles are ``unknown``).
        vhost: the vhost of the ingress queues.
    """

    def __init__(self, management: Any, vhost: str) -> None:
        self._management = management
        self._vhost = vhost
        self._lock = threading.Lock()
        # queue -> (monotonic time of the answer, the active consumer's tag, the API's error)
        self._answers: dict[str, tuple[float, str | None, str | None]] = {}
        self._asking = False
        self._stale: set[str] = set()

    def role(self, queue: str, consumer_tag: str | None) -> tuple[str, str | None]:
        """``(role, why)``: ``active``, ``standby``, ``not_consuming`` (no consumer of ours)
        or ``unknown`` (``why`` says what the API answered, or that there is no answer yet)."""
        if consumer_tag is None:
            return "not_consuming", None
        if self._management is None:
            return "unknown", "no management API"
        with self._lock:
            answer = self._answers.get(queue)
            if answer is None or time.monotonic() - answer[0] >= ROLE_TTL:
                self._stale.add(queue)
                if not self._asking:  # one thread asks for every stale queue in turn
                    self._asking = True
                    threading.Thread(target=self._ask_stale, daemon=True,
                                     name="rtroute-replica-role").start()
        if answer is None:
            return "unknown", "asking the management API"
        _at, active, error = answer
        if error is not None:
            return "unknown", error
        if active is None:
            return "unknown", "the broker has not named the queue's active consumer yet"
        return ("active", None) if active == consumer_tag else ("standby", None)

    def _ask_stale(self) -> None:
        while True:
            with self._lock:
                if not self._stale:
                    self._asking = False
                    return
                queue = self._stale.pop()
            answer = self._ask(queue)
            with self._lock:
                self._answers[queue] = (time.monotonic(), *answer)

    def _ask(self, queue: str) -> tuple[str | None, str | None]:
        """``(the active consumer's tag, None)`` or ``(None, the API's error)``."""
        from rtroute.amqp.management import ManagementError

        try:
            return self._management.queue(queue, self._vhost).get(
                "single_active_consumer_tag") or None, None
        except ManagementError as exc:
            return None, str(exc)
        except Exception as exc:  # shown in /status: the thread must not die
            LOG.exception("asking which replica is active on %s", queue)
            return None, f"{type(exc).__name__}: {exc}"
