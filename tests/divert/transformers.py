"""Transformers the divert tests name as ``tests.divert.transformers:FUNCTION``."""
from __future__ import annotations

import dataclasses

from rtroute.divert import Message


def tag(message: Message) -> Message:
    """Marks the copy, upper-cases the body and sends it with another routing key."""
    message.headers["x-transformed-by"] = "tag"
    message.headers["x-seen-orig-queue"] = message.headers.get("_AMQ_ORIG_QUEUE")
    message.properties["content_type"] = "text/plain"
    return dataclasses.replace(message, body=message.body.upper(),
                               routing_key=f"transformed.{message.routing_key}")


def explode(message: Message) -> Message:
    raise RuntimeError("no such luck")


def wrong_type(message: Message) -> str:
    return "not a message"


def reroute(message: Message) -> Message:
    message.address = "somewhere.else"
    return message


def bad_cc(message: Message) -> Message:
    message.headers["CC"] = "not-an-array"
    return message


def unencodable(message: Message) -> Message:
    message.headers["x-object"] = object()  # AMQP has no field type for this
    return message


def hang(message: Message) -> Message:
    """A transformer that never returns (a bug, a deadlock, a blocking call)."""
    import threading

    threading.Event().wait()
    return message
