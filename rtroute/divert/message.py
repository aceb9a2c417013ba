"""The message a divert copies and a transformer rewrites. Pure data, no I/O.

A transformer is the Python counterpart of Artemis's ``transformer-class-name``: a function
named ``module:function`` that takes a :class:`Message` (the copy, already carrying its
``_AMQ_ORIG_*`` headers) and returns a :class:`Message` (the same one changed, or a new one, e.g.
``dataclasses.replace(message, body=...)``). It may change the body, the routing key, the headers
and the properties; the address is the forwarding address, fixed by the divert.

Headers are a :class:`~rtroute.amqp.field_table.FieldTable` whose values keep their AMQP types
(a ``float`` stays a float, a ``Float32`` a 32-bit float, a timestamp a number of seconds):
what a copy carries of its original is encoded again byte for byte
(:meth:`Message.publish_frames`).
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

from rtroute.amqp.content_header import content_header_frame, dead_letter_header
from rtroute.amqp.field_table import FieldTable
from rtroute.amqp.frame_codec import content_after, frame_fits

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
        headers: the AMQP headers table: a :class:`~rtroute.amqp.field_table.FieldTable` (a
            ``dict``; values keep their AMQP types, see :mod:`rtroute.amqp.field_table`). A
            transformer may set a plain dict: plain values encode as pika would.
        properties: the other basic properties present, by pika name (see
            :data:`PROPERTY_NAMES`), e.g. ``{"message_id": "m-1", "delivery_mode": 2}``.
        address: where the message is going (for a diverted copy: the forwarding address).
    """

    body: bytes
    routing_key: str
    headers: dict[str, Any] = field(default_factory=FieldTable)
    properties: dict[str, Any] = field(default_factory=dict)
    address: str = ""

    @classmethod
    def from_amqp(cls, address: str, routing_key: str, properties: Any, body: bytes) -> Message:
        """From a delivery: ``properties`` is a
        :class:`rtroute.amqp.content_header.BasicProperties` (decoded without loss) or alike."""
        props = {}
        for name in PROPERTY_NAMES:
            value = getattr(properties, name, None)
            if value is not None:
                props[name] = value
        return cls(body, routing_key, table_copy(getattr(properties, "headers", None)), props,
                   address)

    @property
    def message_id(self) -> str | None:
        """The ``message_id`` property, or None."""
        return self.properties.get("message_id")

    def publish_frames(self, channel: int, method_frame: bytes, frame_max: int,
                       headers: Mapping[str, Any] | None = None) -> tuple[bytes, int]:
        """The frames that publish this message on ``channel``, and how many there are.

        Args:
            channel: the publishing channel's number.
            method_frame: the ``basic.publish`` frame to send first.
            frame_max: the connection's frame size (the body is cut to fit).
            headers: the table to send instead of :attr:`headers` (e.g. what
                :func:`rtroute.divert.copies.publish_fields` returned); empty: none.

        Raises:
            ValueError: a property or header value has no AMQP encoding (NaN and infinite
                floats included: RabbitMQ refuses them), or the header frame outgrows
                ``frame_max``.
        """
        try:
            header = content_header_frame(channel, len(self.body), self._properties(headers))
        except ValueError as exc:
            raise ValueError(f"cannot encode the message's properties: {exc}") from None
        if not frame_fits(len(header), frame_max):
            raise ValueError(f"the message's properties need a header frame of {len(header)} "
                             f"bytes, more than frame_max ({frame_max}) takes")
        return content_after(method_frame + header, channel, self.body, frame_max)

    def dead_letter_frames(self, channel: int, method_frame: bytes,
                           reasons: Mapping[str, Any] | Sequence[tuple[str, Any]],
                           frame_max: int) -> tuple[bytes, int]:
        """The frames that dead-letter this message on ``channel``: its properties and
        headers (see :func:`rtroute.amqp.content_header.dead_letter_header`) plus the
        ``reasons`` entries. Properties that cannot be encoded are left out (the reasons say
        why the message was dead-lettered, not why they are missing)."""
        try:
            header = content_header_frame(channel, len(self.body), self._properties(None))
        except ValueError:
            header = content_header_frame(channel, len(self.body), {})
        header = dead_letter_header(header, channel, reasons, frame_max)
        return content_after(method_frame + header, channel, self.body, frame_max)

    def _properties(self, headers: Mapping[str, Any] | None) -> dict[str, Any]:
        table = self.headers if headers is None else headers
        return {**self.properties, "headers": table or None}



def table_copy(headers: Mapping[str, Any] | None) -> FieldTable:
    """A :class:`FieldTable` holding ``headers`` (a copy; repeated names kept)."""
    if isinstance(headers, FieldTable):
        return headers.copy()
    return FieldTable(headers or {})


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
