"""Sender-selected distribution: the ``CC`` and ``BCC`` headers, exactly as RabbitMQ reads them.

RabbitMQ (rabbit_basic:header_routes) takes each of ``CC`` and ``BCC`` when it is an AMQP array
and routes the *string* elements as extra routing keys; other element types are ignored. Any
other value type (a string, a number, void/``None``, a table...) makes the broker close the
publisher's channel with 406 PRECONDITION_FAILED, reported here as :class:`PreconditionFailed`.
``BCC`` is removed from the delivered headers; ``CC`` is kept.
"""
from __future__ import annotations

import datetime
import decimal
from collections.abc import Mapping
from typing import Any

ROUTING_HEADERS = ("CC", "BCC")


class PreconditionFailed(ValueError):
    """The broker would refuse this publish with 406 PRECONDITION_FAILED (channel closed)."""

    reply_code = 406


def amqp_type_name(value: Any) -> str:
    """The AMQP field-table type RabbitMQ sees for ``value`` as pika encodes it."""
    if value is None:
        return "void"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, str):
        return "longstr"
    if isinstance(value, (bytes, bytearray)):
        return "binary"
    if isinstance(value, float):
        return "double"
    if isinstance(value, decimal.Decimal):
        return "decimal"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, Mapping):
        return "table"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


def extra_routing_keys(headers: Mapping[str, Any] | None) -> tuple[list[str], list[str]]:
    """Returns the ``(cc, bcc)`` routing keys a publish adds, in header order.

    Raises:
        PreconditionFailed: ``CC`` or ``BCC`` is present but not an array.
    """
    if not headers:
        return [], []
    found = []
    for name in ROUTING_HEADERS:
        if name not in headers:
            found.append([])
            continue
        value = headers[name]
        if not isinstance(value, (list, tuple)):
            raise PreconditionFailed(
                "invalid message: {unacceptable_type_in_header,"
                f'"{name}",{amqp_type_name(value)}}}'
            )
        found.append([v for v in value if isinstance(v, str)])
    return found[0], found[1]


def delivered_headers(headers: Mapping[str, Any] | None) -> dict[str, Any]:
    """The headers as a consumer receives them: ``BCC`` removed, everything else as is."""
    if not headers:
        return {}
    return {k: v for k, v in headers.items() if k != "BCC"}
