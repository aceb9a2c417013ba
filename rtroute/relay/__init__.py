"""The relay engine: the one confirm/settle loop under the shovel, the sidecar and the
publisher (each keeps only its :class:`Policy` and what it publishes for an item).

- :class:`Relay` -- composes the parts below for one publish channel: attach, drain, detach.
- :class:`Outbox`, :class:`PauseReason` -- publishes in order, paused by the window, the broker
  (``connection.blocked``), the write buffer or a drain; one write per ioloop turn; no wire
  protocol of its own (it writes to a :class:`Sink`).
- :class:`Upstream`, :class:`BulkUpstream`, :class:`ItemSettler`, :class:`PublishReport`, :class:`Sink`,
  :class:`Unpublishable` -- the seams, as :class:`typing.Protocol` s (:mod:`rtroute.relay.seams`).
- :class:`AmqpSink` -- the AMQP 0-9-1 sink: a pika channel and its confirm window; the frame_max
  guard.
- :class:`Item`, :class:`Outgoing` -- what is settled upstream, and each publish made for it.
- :class:`FanIn` -- each confirm back to its item; the item settled once all are answered.
- :class:`Policy`, :class:`RetryWithBackoff`, :class:`Settlement`, :class:`Verdict`,
  :class:`VerdictKind`, :class:`Hook` -- what an outcome means (ack, requeue, retry with
  back-off, hold, dead-letter); the per-message hooks a policy registers.
- :class:`BrokerUpstream` -- items from consume channels, one settler per channel.
- :class:`FutureUpstream` -- items that are callers' futures (the publisher's messages).
- :class:`BulkFanIn`, :class:`PublishOutcome` -- outcomes of publishes handed over in bulk
  (:meth:`Outbox.put_bulk`: no future per publish).
- :class:`FlowControl` -- ``connection.blocked``, the write buffer, the source's reading.
- :class:`Timers` -- timers that a drain or a lost connection cancels for good.

Imports point down to :mod:`rtroute.amqp` only; names load lazily, as there.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rtroute.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from rtroute.relay.amqp_sink import AmqpSink
    from rtroute.relay.broker_upstream import BrokerUpstream
    from rtroute.relay.bulk import BulkFanIn, PublishOutcome
    from rtroute.relay.engine import Relay
    from rtroute.relay.fanin import FanIn
    from rtroute.relay.flow import FlowControl
    from rtroute.relay.future_upstream import FutureUpstream
    from rtroute.relay.outbox import Outbox, PauseReason
    from rtroute.relay.outgoing import Item, Outgoing
    from rtroute.relay.policy import (
        Hook,
        Policy,
        RetryWithBackoff,
        Settlement,
        Verdict,
        VerdictKind,
    )
    from rtroute.relay.seams import (
        BulkUpstream,
        ItemSettler,
        PublishReport,
        Sink,
        Unpublishable,
        Upstream,
    )
    from rtroute.relay.timers import Timers

_SUBMODULE = {
    "AmqpSink": "amqp_sink",
    "BrokerUpstream": "broker_upstream",
    "BulkFanIn": "bulk",
    "BulkUpstream": "seams",
    "FanIn": "fanin",
    "FlowControl": "flow",
    "FutureUpstream": "future_upstream",
    "Hook": "policy",
    "Item": "outgoing",
    "ItemSettler": "seams",
    "Outbox": "outbox",
    "Outgoing": "outgoing",
    "PauseReason": "outbox",
    "Policy": "policy",
    "PublishOutcome": "bulk",
    "PublishReport": "seams",
    "Relay": "engine",
    "RetryWithBackoff": "policy",
    "Settlement": "policy",
    "Sink": "seams",
    "Timers": "timers",
    "Unpublishable": "seams",
    "Upstream": "seams",
    "Verdict": "policy",
    "VerdictKind": "policy",
}


__getattr__, __dir__ = lazy_exports(__name__, globals(), _SUBMODULE)


__all__ = [
    "AmqpSink",
    "BrokerUpstream",
    "BulkFanIn",
    "BulkUpstream",
    "FanIn",
    "FlowControl",
    "FutureUpstream",
    "Hook",
    "Item",
    "ItemSettler",
    "Outbox",
    "Outgoing",
    "PauseReason",
    "Policy",
    "PublishOutcome",
    "PublishReport",
    "Relay",
    "RetryWithBackoff",
    "Settlement",
    "Sink",
    "Timers",
    "Unpublishable",
    "Upstream",
    "Verdict",
    "VerdictKind",
]
