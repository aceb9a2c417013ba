"""``rtroute publish --header NAME=VALUE --property NAME=VALUE``: the message's headers and
properties from the command line, checked before anything connects.

A header value is JSON when it parses as JSON (``1``, ``true``, ``null``, ``["a","b"]``,
``{"k": 1}``, ``"1"`` for the string ``1``), else the text as given (``abc``, ``a b``, an empty
string). A number with a fraction (``2.5``) is sent as an AMQP decimal (pika cannot send a
double), which consumers read as a decimal; integers as signed 64-bit at most. Properties take the types of AMQP 0-9-1's basic properties: ``delivery_mode`` 1 or 2
(or ``transient``/``persistent``), ``priority`` 0-255, ``timestamp`` seconds since the epoch
or an ISO 8601 time (UTC unless it says otherwise), ``expiration`` milliseconds; the others are
strings of 255 bytes at most.
"""
from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["PROPERTY_NAMES", "parse_header", "parse_headers", "parse_properties",
           "parse_property"]

#: the basic properties ``--property`` sets (``headers`` are given with ``--header``)
PROPERTY_NAMES = ("content_type", "content_encoding", "delivery_mode", "priority",
                  "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
                  "user_id", "app_id")
SHORTSTR = 255  # bytes of an AMQP short string
_INT64 = (-(2 ** 63), 2 ** 63 - 1)  # the widest integer a field table holds (signed 64 bits)
_INT32 = (-(2 ** 31), 2 ** 31 - 1)  # the unscaled value of an AMQP decimal


def _split(text: str, option: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    name = name.strip()
    if not equals or not name:
        raise ValueError(f"{option} takes NAME=VALUE, got {text!r}")
    if len(name.encode("utf-8")) > SHORTSTR:
        raise ValueError(f"{option} {name[:20]}...: a name is {SHORTSTR} bytes at most")
    return name, value


def _check_numbers(value: Any, name: str) -> None:
    """Every number in ``value`` fits a field table: integers in signed 64 bits, fractions
    in an AMQP decimal (a scale 0-255 and a signed 32-bit integer).

    Raises:
        ValueError: one does not (the message suggests a string).
    """
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise ValueError(f"--header {name}: {value} does not fit a signed 64-bit integer "
                             "(quote it for a string)")
    elif isinstance(value, decimal.Decimal):
        exponent = value.normalize().as_tuple().exponent
        scale = -exponent if isinstance(exponent, int) and exponent < 0 else 0
        if not value.is_finite() or scale > 255 or \
                not _INT32[0] <= int(value.scaleb(scale)) <= _INT32[1]:
            raise ValueError(f"--header {name}: {value} does not fit an AMQP decimal "
                             "(quote it for a string)")
    elif isinstance(value, list):
        for item in value:
            _check_numbers(item, name)
    elif isinstance(value, dict):
        for item in value.values():
            _check_numbers(item, name)


def parse_header(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` of ``--header``: the value as JSON when it parses, else the text.

    Raises:
        ValueError: no ``=``, an empty or too long name, an integer wider than 64 bits.
    """
    name, raw = _split(text, "--header")
    try:
        value = json.loads(raw, parse_float=decimal.Decimal, parse_constant=_not_json)
    except ValueError:
        return name, raw
    _check_numbers(value, name)
    return name, value


def _not_json(constant: str) -> Any:
    """NaN and Infinity are JSON to Python's parser, not to anyone else: the text stays."""
    raise ValueError(constant)


def parse_headers(texts: Iterable[str]) -> dict[str, Any]:
    """The headers of every ``--header``, in order.

    Raises:
        ValueError: a malformed one (see :func:`parse_header`), or a name given twice.
    """
    return _each_once(texts, parse_header, "--header")


def _integer(name: str, value: str, low: int, high: int) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise ValueError(f"--property {name} takes an integer, got {value!r}") from None
    if not low <= number <= high:
        raise ValueError(f"--property {name} is {low}-{high}, got {number}")
    return number


def _timestamp(value: str) -> int:
    text = value.strip()
    if text.lstrip("-").isdigit():
        return _integer("timestamp", text, 0, _INT64[1])
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("--property timestamp takes seconds since the epoch or an ISO 8601 "
                         f"time (2024-05-01T12:00:00Z), got {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp())


def parse_property(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` of ``--property``: the name (one of :data:`PROPERTY_NAMES`) and the
    value in the property's type.

    Raises:
        ValueError: an unknown name (with the closest one), a value of the wrong type or range.
    """
    from rtroute.config.lines import suggest

    name, value = _split(text, "--property")
    if name not in PROPERTY_NAMES:
        hint = " (give headers with --header NAME=VALUE)" if name == "headers" else \
            suggest(name, PROPERTY_NAMES)
        raise ValueError(f"--property {name}: no such property{hint}; the properties are "
                         f"{', '.join(PROPERTY_NAMES)}")
    if name == "delivery_mode":
        modes = {"transient": 1, "persistent": 2}
        if value.strip().lower() in modes:
            return name, modes[value.strip().lower()]
        return name, _integer(name, value, 1, 2)
    if name == "priority":
        return name, _integer(name, value, 0, 255)
    if name == "timestamp":
        return name, _timestamp(value)
    if name == "expiration" and not value.isdigit():
        raise ValueError(f"--property expiration takes milliseconds (digits), got {value!r}")
    if len(value.encode("utf-8")) > SHORTSTR:
        raise ValueError(f"--property {name}: {SHORTSTR} bytes at most, got "
                         f"{len(value.encode('utf-8'))}")
    return name, value


def parse_properties(texts: Iterable[str]) -> dict[str, Any]:
    """The properties of every ``--property`` (keyword arguments of
    ``pika.BasicProperties``).

    Raises:
        ValueError: a malformed one (see :func:`parse_property`), or a name given twice.
    """
    return _each_once(texts, parse_property, "--property")


def _each_once(texts: Iterable[str], parse: Callable[[str], tuple[str, Any]],
               option: str) -> dict[str, Any]:
    r"""``NAME -> value`` of every ``option`` in order, each ``parse``\ d; a name given twice
    is a ValueError."""
    found: dict[str, Any] = {}
    for text in texts:
        name, value = parse(text)
        if name in found:
            raise ValueError(f"{option} {name} is given twice")
        found[name] = value
    return found
