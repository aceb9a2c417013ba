"""AMQP headers as JSON text without loss: the ``headers`` column of a drained archive.

Plain JSON keeps what JSON has: a table is an object, an array an array, a long string a
string, a signed 32-bit integer an integer, a (finite) double a number with a fraction or an
exponent, a boolean ``true``/``false``, void ``null``. So ``CC``/``BCC`` read as JSON are the
arrays of strings RabbitMQ routes on, and a Spark job can read the column with any JSON
reader. Every other AMQP type is a one-key object named after RabbitMQ's type:

========================  ================================================================
``{"$byte": -3}``          ``b``; likewise ``$unsignedbyte`` (``B``), ``$short`` (``s``),
                           ``$unsignedshort`` (``u``), ``$unsignedint`` (``i``), ``$long``
                           (``l``) and ``$longL`` (``L``)
``{"$float": 10.5}``       ``f``: the float's exact value as a number
``{"$double": "NaN"}``     a ``d`` (or in ``$float``, an ``f``) that is ``"NaN"``,
                           ``"Infinity"``, ``"-Infinity"``, or a NaN's bits (``"0x7ff8..."``)
``{"$decimal": "1.50"}``   ``D``, its scale kept
``{"$timestamp": 1700000000}``  ``T``: seconds since the epoch, as sent (older archives: an
                           ISO 8601 text)
``{"$binary": "AAE="}``    ``x``: base64
``{"$longstr": "//4="}``   ``S`` that is not UTF-8: base64
``{"$bool": 2}``           ``t`` whose octet is neither 0 nor 1
``{"$table": [[k, v]]}``   a table JSON cannot hold as an object: a name repeated, not UTF-8
                           (``{"$binary": ...}``), or starting with ``$``
``{"$amqp": "RgAA..."}``   a table or array nested deeper than :data:`MAX_DEPTH`: the value
                           in AMQP encoding (type octet first), base64
========================  ================================================================

:func:`headers_json` then :func:`headers_from_json` gives back a table that encodes to the very
bytes it was decoded from.
"""
from __future__ import annotations

import base64
import calendar
import datetime
import decimal
import json
import math
import struct
from collections.abc import Mapping
from typing import Any

from rtroute.amqp.field_table import (
    BoolOctet,
    FieldTable,
    Float32,
    Int8,
    Int16,
    Int64,
    Int64L,
    LongStrBytes,
    Timestamp,
    UInt8,
    UInt16,
    UInt32,
    amqp_type,
    decode_value,
    encode_value,
)

__all__ = ["MAX_DEPTH", "HeaderJsonError", "from_json_value", "headers_from_json",
           "headers_json", "json_value", "value_json"]

MAX_DEPTH = 64
"""Tables and arrays nested deeper are written as ``{"$amqp": ...}`` (JSON readers limit
nesting: Python's at about 1,000 levels, Jackson's, under Spark, at 1,000)."""

_INT_TAGS = {"b": "$byte", "B": "$unsignedbyte", "s": "$short", "u": "$unsignedshort",
             "i": "$unsignedint", "l": "$long", "L": "$longL", "T": "$timestamp",
             "t": "$bool"}
_INT_TYPES = {"$byte": Int8, "$unsignedbyte": UInt8, "$short": Int16,
              "$unsignedshort": UInt16, "$unsignedint": UInt32, "$long": Int64,
              "$longL": Int64L, "$bool": BoolOctet}
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class HeaderJsonError(ValueError):
    """JSON text that is not a headers table in this format."""


def _float_text(value: float, bits: bytes) -> Any:
    """A JSON number for a finite float, else its name or, for a NaN with a payload, its
    bits."""
    if math.isfinite(value):
        return value
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    canonical = struct.pack(">d", math.nan) if len(bits) == 8 else struct.pack(">f", math.nan)
    return "NaN" if bits == canonical else "0x" + bits.hex()


def _name(name: Any) -> Any:
    return name if isinstance(name, str) else {"$binary": _b64(name)}


def _b64(raw: bytes) -> str:
    return base64.b64encode(bytes(raw)).decode("ascii")


def json_value(value: Any, depth: int = 0) -> Any:
    """``value`` (a header value, typed or plain) as a JSON-ready Python value."""
    if depth >= MAX_DEPTH and isinstance(value, (Mapping, list, tuple)):
        return {"$amqp": _b64(encode_value(value))}
    if isinstance(value, Mapping):
        entries = value.entries() if isinstance(value, FieldTable) else list(value.items())
        names = [n for n, _ in entries]
        if all(isinstance(n, str) and not n.startswith("$") for n in names) \
                and len(set(names)) == len(names):
            return {n: json_value(v, depth + 1) for n, v in entries}
        return {"$table": [[_name(n), json_value(v, depth + 1)] for n, v in entries]}
    if isinstance(value, (list, tuple)):
        return [json_value(v, depth + 1) for v in value]
    tag = amqp_type(value)
    if tag == "S":
        return value if isinstance(value, str) else {"$longstr": _b64(value)}
    if tag == "t" and not isinstance(value, BoolOctet):
        return bool(value)
    if tag == "I":
        return int(value)
    if tag in _INT_TAGS:
        if isinstance(value, datetime.datetime):
            return {"$timestamp": calendar.timegm(value.utctimetuple())}
        return {_INT_TAGS[tag]: int(value)}
    if tag == "d":
        number = _float_text(float(value), struct.pack(">d", value))
        return number if isinstance(number, float) else {"$double": number}
    if tag == "f":
        bits = getattr(value, "bits", None) or struct.pack(">f", value)
        return {"$float": _float_text(float(value), bits)}
    if tag == "D":
        return {"$decimal": str(value)}
    if tag == "x":
        return {"$binary": _b64(value)}
    return None  # V


def headers_json(headers: Mapping[str, Any] | None) -> str | None:
    """The headers table as JSON text (None when absent), see the module docstring."""
    if headers is None:
        return None
    return json.dumps(json_value(headers), ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False)


def value_json(value: Any) -> str:
    """One header value as compact JSON text."""
    return json.dumps(json_value(value), ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False)


def _float(text: Any, width: int) -> float:
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    if text in _SPECIAL:
        return _SPECIAL[text]
    if isinstance(text, str) and text.startswith("0x") and len(text) == 2 + 2 * width:
        raw = bytes.fromhex(text[2:])
        if width == 4:
            value = Float32(struct.unpack(">f", raw)[0])
            value.bits = raw
            return value
        return struct.unpack(">d", raw)[0]
    raise HeaderJsonError(f"not a float: {text!r}")


def _tagged(tag: str, inner: Any) -> Any:
    if tag in _INT_TYPES:
        if not isinstance(inner, int) or isinstance(inner, bool):
            raise HeaderJsonError(f"{tag} needs an integer, not {inner!r}")
        return _INT_TYPES[tag](inner)
    if tag == "$timestamp":
        if isinstance(inner, str):  # archives written before the typed format: ISO 8601
            moment = datetime.datetime.fromisoformat(inner)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=datetime.timezone.utc)
            return Timestamp(int(moment.timestamp()))
        if not isinstance(inner, int) or isinstance(inner, bool):
            raise HeaderJsonError(f"$timestamp needs an integer, not {inner!r}")
        return Timestamp(inner)
    if tag == "$float":
        value = _float(inner, 4)
        return value if isinstance(value, Float32) else Float32(value)
    if tag == "$double":
        return _float(inner, 8)
    if tag == "$decimal":
        return decimal.Decimal(inner)
    if tag in ("$binary", "$longstr", "$amqp"):
        raw = base64.b64decode(inner, validate=True)
        if tag == "$binary":
            return raw
        if tag == "$longstr":
            return LongStrBytes(raw)
        value, end = decode_value(raw)
        if end != len(raw):
            raise HeaderJsonError("$amqp holds more than one value")
        return value
    if tag == "$table":
        table = FieldTable()
        for name, value in inner:
            if isinstance(name, Mapping):
                name = base64.b64decode(name["$binary"], validate=True)
            table._append(name, from_json_value(value))
        return table
    raise KeyError(tag)


def from_json_value(value: Any) -> Any:
    """A JSON-decoded value (from :func:`json_value`) as a typed header value.

    Raises:
        HeaderJsonError: a tagged object that is malformed.
    """
    if isinstance(value, dict):
        if len(value) == 1:
            (tag, inner), = value.items()
            if tag.startswith("$"):
                try:
                    return _tagged(tag, inner)
                except KeyError:
                    pass  # not a tag of this format: an ordinary table
                except (TypeError, ValueError, struct.error) as exc:
                    raise HeaderJsonError(f"malformed {tag}: {exc}") from None
        return FieldTable((k, from_json_value(v)) for k, v in value.items())
    if isinstance(value, list):
        return [from_json_value(v) for v in value]
    return value


def headers_from_json(text: str | bytes) -> Any:
    """The value of JSON text from :func:`headers_json` (a :class:`FieldTable` for a table).

    Raises:
        HeaderJsonError: not valid JSON (nested too deeply included), or a malformed tag.
    """
    try:
        decoded = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise HeaderJsonError(f"headers are not valid JSON: {exc}") from None
    try:
        return from_json_value(decoded)
    except RecursionError:
        raise HeaderJsonError("headers nested too deeply") from None
