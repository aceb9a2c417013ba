"""Validation and encoding of routing keys, shared by the native wrapper and the pure twin."""
from __future__ import annotations

from typing import Union

MAX_BINDING_BYTES = 255  # AMQP shortstr: binding keys and routing keys
MAX_QUERY_BYTES = 65536  # CC/BCC entries are longstr; cap what one query may cost

Key = Union[str, bytes]


def encode_key(key: Key, limit: int, what: str) -> bytes:
    """Returns ``key`` as UTF-8 bytes, checked against ``limit`` bytes.

    Raises:
        TypeError: ``key`` is neither ``str`` nor ``bytes`` (``None`` included).
        ValueError: ``key`` is not valid UTF-8 (lone surrogates, undecodable bytes) or is
            longer than ``limit`` bytes once encoded.
    """
    if isinstance(key, str):
        try:
            raw = key.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{what} is not valid UTF-8: {exc.reason} at {exc.start}") from None
    elif isinstance(key, (bytes, bytearray)):
        raw = bytes(key)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{what} is not valid UTF-8: {exc.reason} at {exc.start}") from None
    else:
        raise TypeError(f"{what} must be str, not {type(key).__name__}")
    if len(raw) > limit:
        raise ValueError(f"{what} is {len(raw)} bytes long; the limit is {limit}")
    return raw


def decode_key(key: Key, limit: int, what: str) -> str:
    """Returns ``key`` as ``str`` after the checks of :func:`encode_key`."""
    if type(key) is str and len(key) <= limit and key.isascii():
        return key  # ASCII: valid UTF-8 of one byte per character
    raw = encode_key(key, limit, what)
    return key if isinstance(key, str) else raw.decode("utf-8")


def split_words(key: str) -> list[str]:
    """Splits a routing key into words as RabbitMQ does: ``""`` has none, ``"a..b"`` has three."""
    return key.split(".") if key else []
