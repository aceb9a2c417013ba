"""Diverted copies: their headers, as Artemis sets them, and how each reaches RabbitMQ.

Artemis (``DivertImpl.route`` and ``Message.referenceOriginalMessage``) gives each copy a new
message id and the broker properties below, overwritten at every hop; it keeps the expiration and
sets the routing type by the divert's ``routing-type``:

==========================  ===========================================================
``_AMQ_ORIG_ADDRESS``       the address the divert fired on (for a wildcard divert the
                            concrete managed exchange, not the pattern)
``_AMQ_ORIG_QUEUE``         the divert's name
``_AMQ_ORIG_MESSAGE_ID``    the original's message id (here its ``message_id`` property;
                            absent when the original has none)
``_AMQ_ORIG_ROUTING_TYPE``  the original's routing type: 0 MULTICAST, 1 ANYCAST
                            (``RoutingType.getType()``); set only when the original has
                            one, i.e. an ``_AMQ_ROUTING_TYPE`` header of 0 or 1 (see
                            :func:`original_routing_type`)
``_AMQ_ROUTING_TYPE``       the copy's own routing type (``Message.HDR_ROUTING_TYPE``)
==========================  ===========================================================

rtroute adds ``x-rtroute-hops``: how many diverts the message went through. A copy that would
exceed its exchange's ``max_hops`` is dead-lettered instead (Artemis has no such guard).

The routing types, mapped onto RabbitMQ (an Artemis address is an exchange here, its anycast
queue a queue of the same name):

=============  =============================================================================
``ANYCAST``    the default exchange with the forwarding address as routing key: the queue of
               that name, and only it (``CC`` and the BCC alias, which route on exchanges,
               are dropped from the copy)
``MULTICAST``  the exchange of that name, with the routing key (the divert's ``routing_key``
               or the original's); ``CC`` kept, the BCC alias turned into a real ``BCC``
``PASS``       as the original: ANYCAST if it carries ``_AMQ_ROUTING_TYPE`` = 1, MULTICAST if
               0; without a routing type the copy has none either, and goes where a
               ``STRIP`` copy goes (Artemis routes a copy without a routing type to every
               queue of the address, whatever their type)
``STRIP``      the address decides: the exchange of that name if there is one, else the queue
               of that name; the copy carries no ``_AMQ_ROUTING_TYPE``
=============  =============================================================================

A copy whose forwarding address is a managed exchange goes to that exchange's ingress, keeps its
BCC alias (renamed to that exchange's alias header) and is routed and diverted again there.
"""
from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from rtroute.amqp.field_table import FieldTable
from rtroute.divert.message import PROPERTY_NAMES, Message, table_copy

HDR_ORIGINAL_ADDRESS = "_AMQ_ORIG_ADDRESS"
HDR_ORIGINAL_QUEUE = "_AMQ_ORIG_QUEUE"
HDR_ORIG_MESSAGE_ID = "_AMQ_ORIG_MESSAGE_ID"
HDR_ORIG_ROUTING_TYPE = "_AMQ_ORIG_ROUTING_TYPE"
HDR_ROUTING_TYPE = "_AMQ_ROUTING_TYPE"
HOPS_HEADER = "x-rtroute-hops"
MULTICAST = 0  # RoutingType.MULTICAST.getType()
ANYCAST = 1  # RoutingType.ANYCAST.getType()

# how a copy is delivered, from its routing type
TO_QUEUE = "queue"
TO_EXCHANGE = "exchange"
TO_ADDRESS = "address"  # STRIP: the exchange of that name if one exists, else the queue

# what a forwarding address is on the broker (see resolve_target)
MANAGED = "managed"
EXCHANGE = "exchange"
QUEUE = "queue"

# ids of copies of messages without an id: unique per process, and processes differ
_RANDOM_PREFIX = os.urandom(8).hex()
_COUNTER = itertools.count(1)


@dataclass(frozen=True)
class Copy:
    """One diverted copy, ready to publish (or to dead-letter when ``error`` is set).

    Attributes:
        divert: name of the divert that made it.
        message: the copy (``message.address`` is the forwarding address).
        delivery: ``queue``, ``exchange`` or ``address`` (see the module docstring).
        error: why it cannot be delivered (dead-lettered with this reason), or None.
    """

    divert: str
    message: Message
    delivery: str
    error: str | None = None


def routing_type_of(headers: Mapping[str, Any] | None) -> int:
    """A message's routing type: its ``_AMQ_ROUTING_TYPE`` if 0 or 1, else MULTICAST."""
    value = original_routing_type(headers)
    return MULTICAST if value is None else value


def original_routing_type(headers: Mapping[str, Any] | None) -> int | None:
    """The routing type a message carries, or None when it has none.

    Artemis reads it from the message (``Message.getRoutingType()``: the ``_AMQ_ROUTING_TYPE``
    byte, ``RoutingType.getType`` of 0 or 1, else null); a publisher chooses it, the address
    does not set it. An AMQP 0-9-1 message has one only when it carries that header as an
    integer (of any AMQP width: RabbitMQ clients rarely send a byte) of 0 or 1; a message
    published to an exchange without it has none, like a core message sent without one.
    """
    value = (headers or {}).get(HDR_ROUTING_TYPE)
    if isinstance(value, int) and not isinstance(value, bool) and value in (MULTICAST, ANYCAST):
        return value
    return None


def hops_of(headers: Mapping[str, Any] | None) -> int:
    """How many diverts a message went through (``x-rtroute-hops``; 0 if absent or bad)."""
    value = (headers or {}).get(HOPS_HEADER)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return 0


def copy_message_id(original_id: Any, divert: str, address: str) -> str:
    """A new message id for a copy (32 hex digits).

    Derived from the original's id, the divert and the address when the original has an id,
    so that a copy made again after a redelivery (at-least-once) has the same id as the first
    one and consumers can drop it; unique otherwise (a random per-process prefix and a count).
    """
    if original_id is None:
        return f"{_RANDOM_PREFIX}{next(_COUNTER):016x}"
    text = f"{original_id}\x00{divert}\x00{address}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(text, digest_size=16).hexdigest()


def make_copy(original: Message, divert: Any, address: str, source: str, max_hops: int,
              transformer: Callable[[Message], Message] | None = None) -> Copy:
    """The copy of ``original`` that ``divert`` forwards to ``address``.

    Args:
        original: the message as it arrived at ``source``.
        divert: has ``name``, ``routing_key`` (None: the original's) and ``routing_type``.
        address: one of the divert's forwarding addresses.
        source: the managed exchange the divert fired on (``_AMQ_ORIG_ADDRESS``).
        max_hops: the most diverts a message may go through (``source``'s ``max_hops``).
        transformer: applied last; an exception or a bad result sets ``error``.
    """
    headers = table_copy(original.headers)  # every entry kept as it came, values typed
    hops = hops_of(headers) + 1
    headers[HOPS_HEADER] = hops
    headers[HDR_ORIGINAL_QUEUE] = divert.name
    headers[HDR_ORIGINAL_ADDRESS] = source
    original_id = original.message_id
    if original_id is None:
        headers.pop(HDR_ORIG_MESSAGE_ID, None)
    else:
        headers[HDR_ORIG_MESSAGE_ID] = original_id
    original_type = original_routing_type(original.headers)
    if original_type is not None:
        # as Artemis's referenceOriginalMessage: set only then, and an earlier hop's value
        # (copied with the other headers) is left as it is otherwise
        headers[HDR_ORIG_ROUTING_TYPE] = original_type
    routing_type = divert.routing_type
    if routing_type == "ANYCAST":
        headers[HDR_ROUTING_TYPE] = ANYCAST
        delivery = TO_QUEUE
    elif routing_type == "MULTICAST":
        headers[HDR_ROUTING_TYPE] = MULTICAST
        delivery = TO_EXCHANGE
    elif routing_type == "PASS":
        delivery = {ANYCAST: TO_QUEUE, MULTICAST: TO_EXCHANGE}.get(original_type, TO_ADDRESS)
    else:  # STRIP
        headers.pop(HDR_ROUTING_TYPE, None)
        delivery = TO_ADDRESS
    properties = dict(original.properties)  # expiration included, as Artemis keeps it
    properties["message_id"] = copy_message_id(original_id, divert.name, address)
    routing_key = divert.routing_key if divert.routing_key is not None else original.routing_key
    copy = Message(original.body, routing_key, headers, properties, address)
    if hops > max_hops:
        return Copy(divert.name, copy, delivery,
                    f"divert {divert.name!r}: hop limit reached: the copy to {address!r} would "
                    f"be hop {hops}, and exchange {source!r} allows {max_hops} (max_hops); is "
                    "there a loop through broker bindings?")
    if transformer is not None:
        copy, error = _transform(copy, transformer, divert.name)
        if error is not None:
            return Copy(divert.name, copy, delivery, error)
    return Copy(divert.name, copy, delivery)


def _transform(copy: Message, transformer: Callable[[Message], Message],
               name: str) -> tuple[Message, str | None]:
    address = copy.address
    before = Message(copy.body, copy.routing_key, table_copy(copy.headers),
                     dict(copy.properties), address)
    try:
        result = transformer(copy)
    except Exception as exc:  # noqa: BLE001 - a user function: its failure is dead-lettered
        return before, f"divert {name!r}: transformer raised {type(exc).__name__}: {exc}"
    problem = _bad_result(result, address)
    if problem is not None:
        return before, f"divert {name!r}: transformer {problem}"
    if isinstance(result.body, str):
        result.body = result.body.encode("utf-8")
    elif isinstance(result.body, bytearray):
        result.body = bytes(result.body)
    return result, None


def _bad_result(result: Any, address: str) -> str | None:
    if not isinstance(result, Message):
        return f"returned {type(result).__name__}, not a Message"
    if not isinstance(result.body, (bytes, bytearray, str)):
        return f"set body to {type(result.body).__name__}, not bytes"
    if not isinstance(result.routing_key, str) or len(result.routing_key.encode()) > 255:
        return "set a routing key that is not a string of at most 255 bytes"
    if not isinstance(result.headers, dict) or not isinstance(result.properties, dict):
        return "set headers or properties to something other than a dict"
    unknown = set(result.properties) - set(PROPERTY_NAMES)
    if unknown:
        return f"set unknown properties {sorted(unknown)}"
    if result.address != address:
        return f"changed the address to {result.address!r}; the divert's forwarding address " \
               "decides where a copy goes"
    return None


def resolve_target(delivery: str, address: str, managed: bool, found: str | None) -> str:
    """Where a copy goes on the broker: ``managed``, ``exchange`` or ``queue``.

    Args:
        delivery: the copy's ``delivery``.
        address: its forwarding address.
        managed: whether ``address`` is a managed exchange of this sidecar.
        found: what the broker has under that name (``exchange``, ``queue`` or None), as the
            sidecar last looked; not needed for ``queue`` deliveries.

    Raises:
        LookupError: with the reason to dead-letter the copy (publishing to an exchange that
            does not exist would close the channel).
    """
    if delivery == TO_QUEUE:
        return QUEUE
    if managed:
        return MANAGED
    if found == EXCHANGE:
        return EXCHANGE
    if delivery == TO_EXCHANGE:
        raise LookupError(f"forwarding address {address!r}: no exchange of that name")
    if found == QUEUE:
        return QUEUE
    raise LookupError(f"forwarding address {address!r}: no exchange or queue of that name")


def publish_fields(message: Message, target: str, source_alias: str,
                   target_alias: str | None = None) -> tuple[str, str, FieldTable]:
    """``(exchange, routing_key, headers)`` that deliver ``message`` to ``target``.

    Args:
        message: the copy.
        target: ``managed``, ``exchange`` or ``queue`` (from :func:`resolve_target`).
        source_alias: the BCC alias header of the exchange the copy comes from.
        target_alias: the BCC alias header of the managed exchange it goes to.

    Raises:
        ValueError: ``CC`` or the BCC alias is not an array (RabbitMQ would close the channel
            on such a ``CC``/``BCC``): the copy is dead-lettered.
    """
    headers = table_copy(message.headers)
    alias = headers.pop(source_alias, None)
    headers.pop("BCC", None)
    cc = headers.get("CC")
    if cc is not None and not isinstance(cc, (list, tuple)):
        raise ValueError(f"header 'CC' must be an array of routing keys, got "
                         f"{type(cc).__name__}")
    if alias is not None and not isinstance(alias, (list, tuple)):
        raise ValueError(f"header {source_alias!r} must be an array of routing keys, got "
                         f"{type(alias).__name__}")
    if target == QUEUE:
        headers.pop("CC", None)
        return "", message.address, headers
    if target == MANAGED:
        if alias is not None:
            headers[target_alias or source_alias] = list(alias)
        return message.address, message.routing_key, headers
    if alias:
        headers["BCC"] = list(alias)
    return message.address, message.routing_key, headers
