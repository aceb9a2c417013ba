"""Dead letters: the republishes to ``rtroute.dead`` that take the place of a message (or of a
diverted copy) that cannot be routed or published, with the reason in a header. Nothing
vanishes: what cannot go where it was meant to goes here, and is counted.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pika

from rtroute.amqp import frames
from rtroute.amqp.content_header import dead_letter_frames
from rtroute.divert import Divert
from rtroute.routing.exchange_router import ERROR_HEADER
from rtroute.sidecar.layout import DEAD_LETTER_EXCHANGE
from rtroute.sidecar.republish import COPY, DEAD, ORIGINAL, PendingMessage, Republish

if TYPE_CHECKING:
    from rtroute.sidecar.exchange import ManagedExchange
    from rtroute.sidecar.ingress import IngressMessage

LOG = logging.getLogger("rtroute.sidecar")

SOURCE_HEADER = "x-rtroute-exchange"
DIVERT_HEADER = "x-rtroute-divert"


def reason_headers(ex: ManagedExchange, reason: str, divert: Divert | None = None
                   ) -> dict[str, str]:
    """The header entries a dead letter adds to the message's own."""
    reasons = {ERROR_HEADER: reason, SOURCE_HEADER: ex.spec.name}
    if divert is not None:
        reasons[DIVERT_HEADER] = divert.name
    return reasons


def dead_letter_of_ingress(m: IngressMessage, routing_key: str, reason: str,
                           pending: PendingMessage, publish_frames: frames.PublishFrames | None,
                           frame_max: int) -> Republish:
    """The dead letter of ingress message ``m``: every property and header entry as received
    (byte for byte), plus the reason entries."""
    assert publish_frames is not None  # deliveries come once the window is open
    data, count = m.dead_letter_frames(
        publish_frames.channel, publish_frames.get(DEAD_LETTER_EXCHANGE, routing_key),
        reason_headers(m.exchange, reason), frame_max)
    return Republish(DEAD_LETTER_EXCHANGE, routing_key, None, m.body, pending, DEAD,
                     frames=data, frame_count=count)


def dead_letter(ex: ManagedExchange, routing_key: str, props: Any, headers: dict, body: bytes,
                reason: str, pending: PendingMessage, divert: Divert | None = None
                ) -> Republish:
    """A republish to ``rtroute.dead`` carrying ``reason`` (``props``: pika or a dict)."""
    headers = dict(headers)
    for name in ("CC", "BCC"):  # RabbitMQ closes the channel on a CC/BCC that is no array
        value = headers.get(name)
        if value is not None and not isinstance(value, (list, tuple)):
            headers[f"x-rtroute-invalid-{name}"] = repr(value)
            del headers[name]
    headers[ERROR_HEADER] = reason
    headers[SOURCE_HEADER] = ex.spec.name
    if divert is not None:
        headers[DIVERT_HEADER] = divert.name
    if isinstance(props, dict):
        properties = pika.BasicProperties(headers=headers, **props)
    else:
        properties = _with_headers(props, headers)
    return Republish(DEAD_LETTER_EXCHANGE, routing_key, properties, body, pending, DEAD, divert)


def dead_letter_of_copy(out: Republish, reason: str,
                        publish_frames: frames.PublishFrames | None, frame_max: int
                        ) -> Republish:
    """The dead letter of diverted copy ``out``, which no queue took: as it was sent (frames
    or properties), plus the reason entries."""
    pending = out.pending
    if out.frames is not None:
        assert publish_frames is not None
        data, count = dead_letter_frames(
            out.frames, publish_frames.get(DEAD_LETTER_EXCHANGE, out.routing_key),
            reason_headers(pending.exchange, reason, out.divert), frame_max)
        return Republish(DEAD_LETTER_EXCHANGE, out.routing_key, None, out.body, pending, DEAD,
                         out.divert, frames=data, frame_count=count)
    headers = dict(out.properties.headers or {}) if out.properties else {}
    return dead_letter(pending.exchange, out.routing_key, out.properties, headers, out.body,
                       reason, pending, out.divert)


def undeliverable(out: Republish, reason: str) -> Republish:
    """The dead letter that replaces ``out``, which cannot be published (``reason``).
    A copy or an original becomes a dead letter with its properties and headers; a dead
    letter that cannot be published either becomes a minimal one (reason, source, id)."""
    ex = out.pending.exchange
    if out.role == DEAD or out.frames is not None or out.properties is None:
        return minimal_dead_letter(out, reason)
    if out.role == ORIGINAL:
        ex.counters.dead_lettered += 1
    elif out.divert is not None:
        out.divert.dead_lettered += 1
    what = "a diverted copy" if out.role == COPY else "a message"
    LOG.warning("exchange %s: dead-lettering %s: %s", ex.spec.name, what, reason)
    headers = dict(out.properties.headers or {})
    for name in ("CC", "BCC"):  # dead letters never fan out again
        headers.pop(name, None)
    return dead_letter(ex, out.routing_key, out.properties, headers, out.body, reason,
                       out.pending, out.divert)


def minimal_dead_letter(out: Republish, reason: str) -> Republish:
    """A dead letter with only the reason, the source and the message id (the message's own
    properties are what cannot be published)."""
    if out.role == DEAD and out.properties is not None:
        reason = f"{out.properties.headers.get(ERROR_HEADER)}; then {reason}"
    LOG.warning("exchange %s: dead-lettering: %s", out.pending.exchange.spec.name, reason)
    headers = {ERROR_HEADER: reason, SOURCE_HEADER: out.pending.exchange.spec.name}
    if out.role == ORIGINAL:
        out.pending.exchange.counters.dead_lettered += 1
    if out.divert is not None:
        headers[DIVERT_HEADER] = out.divert.name
        if out.role == COPY:
            out.divert.dead_lettered += 1
    message_id = out.properties.message_id if out.properties is not None else None
    # not a short string: it may be what could not be encoded, and this dead letter must be
    if not isinstance(message_id, str) or len(message_id.encode("utf-8", "replace")) > 255:
        message_id = None
    properties = pika.BasicProperties(headers=headers, message_id=message_id)
    return Republish(DEAD_LETTER_EXCHANGE, "", properties, out.body, out.pending, DEAD,
                     out.divert)


def _with_headers(props: Any, headers: dict) -> pika.BasicProperties:
    """A copy of the ingress message's properties with ``headers`` replaced."""
    return pika.BasicProperties(
        content_type=props.content_type, content_encoding=props.content_encoding,
        headers=headers or None, delivery_mode=props.delivery_mode, priority=props.priority,
        correlation_id=props.correlation_id, reply_to=props.reply_to,
        expiration=props.expiration, message_id=props.message_id, timestamp=props.timestamp,
        type=props.type, user_id=props.user_id, app_id=props.app_id,
        cluster_id=props.cluster_id)
