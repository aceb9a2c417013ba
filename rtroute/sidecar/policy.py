"""What the broker's answer to a republish means for its ingress message (the relay's policy).

The sidecar acks an ingress message once the broker confirmed every republish made for it
(the original to ``NAME.bindings``, its diverted copies, a dead letter in their place):

- a nacked republish, or one whose publish channel closed before its answer, fails the message:
  it is requeued with ``basic.reject`` once its other republishes have their answers
  (at-least-once: the copies that were confirmed may come twice);
- a returned original (``mandatory``) is what the x-rtopic plugin does with a message nothing
  is bound for: counted (as unroutable when RabbitMQ routed it; as ``returned`` when the
  bindings changed between the watcher's view and the publish), then acked;
- a returned diverted copy (no queue took it; Artemis would let it go) is replaced by its dead
  letter to ``rtroute.dead``, and the message waits for that one: never dropped;
- a republish that cannot be written (its content header exceeds ``frame_max``, or pika cannot
  encode its properties) is replaced by a dead letter saying why
  (:func:`~rtroute.sidecar.dead_letters.undeliverable`).

:class:`SidecarPolicy` keeps the exchanges' and diverts' counters and the latency histogram
(ingress delivery to the ack) on the way.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from rtroute.relay.policy import OK, Hook, Policy, Replace, Verdict
from rtroute.sidecar.dead_letters import dead_letter_of_copy, undeliverable
from rtroute.sidecar.republish import COPY, ORIGINAL

if TYPE_CHECKING:
    from rtroute.relay.seams import PublishReport
    from rtroute.sidecar.republish import PendingMessage, Republish

__all__ = ["SidecarPolicy"]

LOG = logging.getLogger("rtroute.sidecar")


class SidecarPolicy(Policy):
    """The sidecar's outcome rules (see the module docstring).

    Args:
        frames_of: returns ``(publish_frames, frame_max)`` of the current publish channel (a
            :class:`~rtroute.amqp.frames.PublishFrames` and the connection's ``frame_max``),
            which a copy's dead letter is built for.
    """

    hooks = frozenset({Hook.ACKED, Hook.ITEM_ACKED})
    # its relay carries only Republish publishes of PendingMessage items: the hooks below
    # take those (narrower than Policy's, hence their ignore[override])

    def __init__(self, frames_of: Any) -> None:
        self._frames_of = frames_of

    def acked(self, out: Republish) -> None:  # type: ignore[override]
        role = out.role
        if role == ORIGINAL:
            ex = out.item.exchange
            counters = ex.counters
            counters.republished += 1
            if ex.broker_routed:
                counters.routed += 1
        elif role == COPY:
            out.divert.forwarded += 1  # type: ignore[union-attr]  # a copy has its divert

    def item_acked(self, item: PendingMessage) -> None:  # type: ignore[override]
        if item.received_at:
            item.exchange.latency.observe(time.monotonic() - item.received_at)

    def returned(self, out: Republish, future: PublishReport) -> Verdict:  # type: ignore[override]
        pending = out.pending
        ex = pending.exchange
        if out.role == ORIGINAL:
            if ex.broker_routed:
                ex.note_unroutable(out.routing_key)  # RabbitMQ routed it, no binding matched
            else:
                ex.counters.returned += 1  # the bindings changed under the watcher's view
            return OK
        if out.role != COPY:
            return OK  # a dead letter nothing took: rtroute.dead has no queue bound
        divert = out.divert
        assert divert is not None
        divert.unrouted += 1
        divert.dead_lettered += 1
        where = f"queue {out.routing_key!r}" if not out.exchange \
            else f"exchange {out.exchange!r} (routing key {out.routing_key!r})"
        reason = (f"divert {divert.name!r}: no queue took the copy sent to {where}"
                  f"{': no such queue' if not out.exchange else ''}")
        LOG.warning("exchange %s: dead-lettering a diverted copy: %s", ex.spec.name, reason)
        publish_frames, frame_max = self._frames_of()
        return Replace(dead_letter_of_copy(out, reason, publish_frames, frame_max))

    def rejected(self, out: Republish, reason: str) -> Verdict:  # type: ignore[override]
        return Replace(undeliverable(out, reason))
