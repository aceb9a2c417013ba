"""Standard message fields: the JMS and Artemis identifiers, mapped to AMQP 0-9-1.

Artemis resolves `AMQ*` identifiers from the message itself (FilterImpl) and a JMS client
rewrites `JMSPriority` to `AMQPriority`, `JMSMessageID` to `AMQUserID`, `JMSDeliveryMode` to
`AMQDurable`, and so on (SelectorTranslator). Here both spellings resolve from the AMQP 0-9-1
basic properties and delivery facts carried by a `MessageFacts`:

==================================  ==========================================================
identifier                          value
==================================  ==========================================================
JMSMessageID, AMQUserID             `message_id` (as is; Artemis also uses a foreign
                                    protocol's native message id unchanged)
JMSCorrelationID                    `correlation_id`
JMSType                             `type`
JMSPriority, AMQPriority            `priority`, 4 (the JMS default) when absent
JMSTimestamp, AMQTimestamp          `timestamp` in milliseconds (AMQP carries seconds)
JMSDeliveryMode                     'PERSISTENT' if `delivery_mode` is 2, else 'NON_PERSISTENT'
AMQDurable                          'DURABLE' if `delivery_mode` is 2, else 'NON_DURABLE'
JMSExpiration, AMQExpiration        0 without `expiration` (never expires); else the absolute
                                    time in ms: `timestamp` + the `expiration` TTL, unknown
                                    when there is no timestamp
AMQSize                             the body size in bytes
AMQAddress                          the exchange the message was published to
AMQGroupID                          the `JMSXGroupID` header (how JMS clients send group ids)
JMSXUserID                          `user_id` (the user RabbitMQ validated)
==================================  ==========================================================

As in Artemis, a field that has no value falls back to the header of the same name. Without
a `MessageFacts` every identifier, these included, is just a header name.
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Callable

from rtroute.selector.values import JLong

DEFAULT_PRIORITY = 4


class MessageFacts:
    """What a selector may need to know about a message besides its headers.

    Args:
        properties: the AMQP basic properties: a `pika.BasicProperties` (or any object with
            the same attribute names) or a mapping with those keys (`priority`, `timestamp`,
            `delivery_mode`, `expiration`, `message_id`, `correlation_id`, `type`, `user_id`).
        body_size: the body length in bytes (for `AMQSize`).
        exchange: the exchange the message was published to (for `AMQAddress`).
    """

    __slots__ = ("body_size", "exchange", "properties")

    def __init__(self, properties: Any = None, body_size: int | None = None,
                 exchange: str | None = None) -> None:
        self.properties = properties
        self.body_size = body_size
        self.exchange = exchange

    def __repr__(self) -> str:
        return (f"MessageFacts(properties={self.properties!r}, body_size={self.body_size!r}, "
                f"exchange={self.exchange!r})")


def _prop(facts: MessageFacts, name: str) -> Any:
    props = facts.properties
    if props is None:
        return None
    if isinstance(props, Mapping):
        return props.get(name)
    return getattr(props, name, None)


def _int_prop(facts: MessageFacts, name: str) -> int | None:
    value = _prop(facts, name)
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return None


def _timestamp_ms(facts: MessageFacts) -> JLong | None:
    value = _prop(facts, "timestamp")
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return JLong(int(value.timestamp() * 1000))
    if isinstance(value, int) and not isinstance(value, bool):
        return JLong(value * 1000)
    return None


def _expiration_ms(facts: MessageFacts) -> JLong | None:
    ttl = _prop(facts, "expiration")
    if ttl is None:
        return JLong(0)
    try:
        ttl_ms = int(ttl)
    except (TypeError, ValueError):
        return None
    timestamp = _timestamp_ms(facts)
    if timestamp is None:
        return None
    return JLong(timestamp + ttl_ms)


def _durable(facts: MessageFacts) -> bool:
    return _prop(facts, "delivery_mode") == 2


def _priority(facts: MessageFacts) -> int:
    priority = _int_prop(facts, "priority")
    return DEFAULT_PRIORITY if priority is None else priority


def _string_prop(name: str) -> Callable[[MessageFacts, Mapping], Any]:
    def fact(facts: MessageFacts, headers: Mapping) -> Any:
        return _prop(facts, name)
    return fact


FIELD_FACTS: dict[str, Callable[[MessageFacts, Mapping], Any]] = {
    "JMSMessageID": _string_prop("message_id"),
    "AMQUserID": _string_prop("message_id"),
    "JMSCorrelationID": _string_prop("correlation_id"),
    "JMSType": _string_prop("type"),
    "JMSXUserID": _string_prop("user_id"),
    "JMSPriority": lambda facts, headers: _priority(facts),
    "AMQPriority": lambda facts, headers: _priority(facts),
    "JMSTimestamp": lambda facts, headers: _timestamp_ms(facts),
    "AMQTimestamp": lambda facts, headers: _timestamp_ms(facts),
    "JMSDeliveryMode": lambda facts, headers: "PERSISTENT" if _durable(facts) else "NON_PERSISTENT",
    "AMQDurable": lambda facts, headers: "DURABLE" if _durable(facts) else "NON_DURABLE",
    "JMSExpiration": lambda facts, headers: _expiration_ms(facts),
    "AMQExpiration": lambda facts, headers: _expiration_ms(facts),
    "AMQSize": lambda facts, headers: facts.body_size,
    "AMQAddress": lambda facts, headers: facts.exchange,
    "AMQGroupID": lambda facts, headers: headers.get("JMSXGroupID"),
}

STANDARD_FIELDS = frozenset(FIELD_FACTS)


def field_resolver(name: str) -> Callable[[Mapping, MessageFacts | None], Any]:
    """A function `(headers, message) -> value` for the standard field `name`.

    With `message` given, the field's value comes from it; when that is None (absent), or
    when `message` is None, the header of the same name is used.
    """
    fact = FIELD_FACTS[name]

    def resolve(headers: Mapping, message: MessageFacts | None) -> Any:
        if message is not None:
            value = fact(message, headers)
            if value is not None:
                return value
        return headers.get(name)

    resolve.__name__ = f"field_{name}"
    return resolve
