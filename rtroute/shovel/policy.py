"""What a destination's answer means for a shovel's source message (the relay's policy).

As the plugin does, an acked message is acknowledged at the source. Where the plugin loses or
loops messages, the shovel does not (:class:`~rtroute.relay.policy.RetryWithBackoff`):

- a nacked message is published again ``nack_retries`` times with exponential back-off from
  ``nack_retry_delay``; then it is *refused*: requeued at the source after a wait that doubles
  each round while the destination accepts nothing (``on_refused = "requeue"``), or
  dead-lettered there (``"dead_letter"``);
- a returned (unroutable) message is dead-lettered at the source (``on_unroutable = "nack"``),
  acknowledged (``"drop"``) or requeued after :data:`HOLD_DELAY` (``"requeue"``);
- a message whose content header exceeds the destination's ``frame_max`` (the shovel's own
  headers, or a source with a larger ``frame_max``) is never written, which would close the
  destination connection: it is refused at once;
- nothing is dropped by the shovel itself: dead-lettering happens only when the source queue has
  a dead-letter exchange (:meth:`~rtroute.shovel.source.Source.has_dlx`), and becomes a
  requeue otherwise.

:class:`ShovelPolicy` adds the shovel's counters and log lines to those rules.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from rtroute.relay.policy import Hook, RetryWithBackoff, Settlement, Verdict

if TYPE_CHECKING:
    from rtroute.relay.broker_upstream import BrokerUpstream
    from rtroute.relay.seams import PublishReport
    from rtroute.shovel.session import Session

__all__ = ["HOLD_DELAY", "REFUSED_LOG_INTERVAL", "RETRY_DELAY_MAX", "ShovelPolicy"]

LOGGER = logging.getLogger("rtroute.shovel")

#: Seconds a message the shovel gives back (filter ``leave``, ``on_unroutable = "requeue"``)
#: is held before it is requeued, so that a lone consumer does not spin on it; also the first
#: wait of a refused message.
HOLD_DELAY = 1.0
#: Longest wait between two republishes of a nacked message, and longest hold of a refused
#: message before it is requeued.
RETRY_DELAY_MAX = 30.0
#: Seconds between two warnings about refused messages (the counters keep the full count).
REFUSED_LOG_INTERVAL = 60.0

_UNROUTABLE = {"drop": Settlement.ACK, "requeue": Settlement.HOLD,
               "nack": Settlement.DEAD_LETTER}


class ShovelPolicy(RetryWithBackoff):
    """The shovel's outcome rules (see the module docstring), counted in the session's
    counters. ``upstream`` (set by the session) has its back-off reset by every ack."""

    hooks = frozenset({Hook.ACKED, Hook.PUBLISHED, Hook.WRITTEN})

    def __init__(self, session: Session) -> None:
        cfg = session.cfg
        dead_letter = cfg.on_refused == "dead_letter"
        super().__init__(cfg.nack_retries, cfg.nack_retry_delay, RETRY_DELAY_MAX,
                         refused=Settlement.DEAD_LETTER if dead_letter else Settlement.BACKOFF,
                         unroutable=_UNROUTABLE[cfg.on_unroutable])
        self.name = cfg.name
        self.dead_letter = dead_letter
        self.counters = session.counters
        self.worker = session.w
        self.upstream: BrokerUpstream | None = None

    def acked(self, out: Any) -> None:
        self.counters["moved"] += 1
        upstream = self.upstream
        # set by the session before the relay runs
        upstream.backoff_delay = upstream.hold_delay  # type: ignore[union-attr]
        # (BrokerUpstream.reset_backoff, inlined: this runs once per message)

    def published(self, out: Any) -> None:
        if not out.attempts:
            self.counters["forwarded"] += 1

    def written(self, count: int) -> None:
        counters = self.counters
        counters["moved"] += count
        counters["forwarded"] += count

    def returned(self, out: Any, future: PublishReport) -> Verdict:
        self.counters["returned"] += 1
        LOGGER.warning("shovel %r: the destination returned a message (%s %s)", self.name,
                       future.reply_code, future.reply_text)
        return super().returned(out, future)

    def returned_unconfirmed(self, reply_code: int, reply_text: str) -> None:
        self.counters["returned"] += 1
        LOGGER.warning("shovel %r: the destination returned a message (%s %s); without "
                       "confirms it is already acknowledged at the source", self.name,
                       reply_code, reply_text)

    def nacked(self, out: Any, future: PublishReport) -> Verdict:
        self.counters["nacked"] += 1
        return super().nacked(out, future)

    def retrying(self, out: Any) -> None:
        self.counters["retried"] += 1

    def refused(self, out: Any, why: str) -> None:
        counters = self.counters
        counters["refused"] += 1
        now = time.monotonic()
        worker = self.worker
        if now - worker.refused_logged_at < REFUSED_LOG_INTERVAL:
            return
        worker.refused_logged_at = now
        doing = "dead-lettering it" if self.dead_letter else "requeueing it"
        if why == "nacked":
            LOGGER.warning("shovel %r: the destination refused a message %d times; %s at the "
                           "source (%d refused so far; warned once a minute)", self.name,
                           out.attempts + 1, doing, counters["refused"])
        else:
            LOGGER.warning("shovel %r: a message cannot be published to the destination: %s; "
                           "%s at the source (%d refused so far; warned once a minute)",
                           self.name, why, doing, counters["refused"])
