"""The message a divert copies and a transformer rewrites. Pure data, no I/O.

A transformer is the Python counterpart of Artemis's ``transformer-class-name``: a function
named ``module:function`` that takes a :class:`Message` (the copy, already carrying its
``_AMQ_ORIG_*`` headers) and returns a :class:`Message` (the same one changed, or a new one, e.g.
``dataclasses.replace(message, body=...)``). It may change the body, the routing key, the headers
and the properties; the address is the forwarding address, fixed by the divert.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

PROPERTY_NAMES = (
    "content_type", "content_encoding", "delivery_mode", "priority", "correlation_id",
    "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id",
    "cluster_id",
)
"""The AMQP 0-9-1 basic properties besides ``headers``, by their pika names."""

Transformer = Callable[["Message"], "Message"]


@dataclass
class Message:
    """One message: body, routing key, headers and the other AMQP basic properties.

    Attributes:
        body: the payload.
        routing_key: the routing key it is (re)published with.
        headers: the AMQP headers table (a plain dict; values as pika decodes them).
        properties: the other basic properties present, by pika name (see
            :data:`PROPERTY_NAMES`), e.g. ``{"message_id": "m-1", "delivery_mode": 2}``.
        address: where the message is going (for a diverted copy: the forwarding address).
    """

    body: bytes
    routing_key: str
    headers: dict[str, Any] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)
    address: str = ""

    @classmethod
    def from_amqp(cls, address: str, routing_key: str, properties: Any, body: bytes) -> Message:
        """From a delivery: ``properties`` is a ``pika.BasicProperties`` or alike."""
        props = {}
        for name in PROPERTY_NAMES:
            value = getattr(properties, name, None)
            if value is not None:
                props[name] = value
        headers = getattr(properties, "headers", None)
        return cls(body, routing_key, dict(headers or {}), props, address)

    @property
    def message_id(self) -> str | None:
        """The ``message_id`` property, or None."""
        return self.properties.get("message_id")


class TransformerError(ValueError):
    """A transformer that cannot be loaded (bad name, import error, not callable)."""


def load_transformer(name: str) -> Transformer:
    """Imports ``module:function``.

    Raises:
        TransformerError: the name is malformed, the module does not import, the function is
            absent or not callable.
    """
    module_name, sep, function_name = name.partition(":")
    if not sep or not module_name or not function_name:
        raise TransformerError(f"transformer must be 'module:function', got {name!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see
        raise TransformerError(f"transformer {name!r}: cannot import {module_name!r}: "
                               f"{type(exc).__name__}: {exc}") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise TransformerError(f"transformer {name!r}: {module_name!r} has no function "
                               f"{function_name!r}")
    return function
