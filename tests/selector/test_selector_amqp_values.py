"""Selectors over headers decoded without loss (rtroute.amqp.field_table): each AMQP type
compares and computes as the Java type a JMS client would have sent."""
from __future__ import annotations

import decimal
import struct

import pytest

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
    decode_table,
)
from rtroute.selector import compile


def table(*entries: tuple[str, bytes]) -> FieldTable:
    """Headers as the sidecar decodes them from the wire."""
    raw = b"".join(bytes((len(n),)) + n.encode() + v for n, v in entries)
    return decode_table(raw, 0, len(raw))


def double(v: float) -> bytes:
    return b"d" + struct.pack(">d", v)


def float32(v: float) -> bytes:
    return b"f" + struct.pack(">f", v)


@pytest.mark.parametrize("wire, matches", [
    (double(10.7), True), (double(10.2), False), (double(10.5), False),
    (float32(10.7), True), (float32(10.2), False),
    (b"D\x01" + struct.pack(">I", 107), True), (b"D\x02" + struct.pack(">I", 1020), False),
    (b"I" + struct.pack(">i", 11), True), (b"s" + struct.pack(">h", 10), False),
    (b"l" + struct.pack(">q", 11), True), (b"b\x0b", True), (b"u" + struct.pack(">H", 10), False),
])
def test_price_above_ten_and_a_half(wire, matches):
    assert compile("price > 10.5").matches(table(("price", wire))) is matches


def test_a_double_is_not_rounded_to_an_integer():
    headers = table(("price", double(10.7)))
    assert compile("price = 10.7").matches(headers)
    assert not compile("price = 10").matches(headers)
    assert compile("price BETWEEN 10.6 AND 10.8").matches(headers)
    assert compile("price * 10 = 107").matches(headers)


def test_a_float_is_promoted_to_double_as_java_does():
    headers = table(("f", float32(10.7)))
    assert not compile("f = 10.7").matches(headers)  # (double) 10.7f != 10.7
    assert compile("f > 10.69 AND f < 10.71").matches(headers)
    assert compile("f = 2.25").matches(table(("f", float32(2.25))))


def test_a_decimal_compares_as_a_number():
    headers = table(("d", b"D\x02" + struct.pack(">I", 12345)))
    assert compile("d = 123.45").matches(headers)
    assert compile("d > 123 AND d < 124").matches(headers)


def test_a_long_is_a_java_long_whatever_its_value():
    headers = {"n": Int64(2_147_483_647), "i": 2_147_483_647, "L": Int64L(2_147_483_647)}
    assert compile("n + 1 = 2147483648").matches(headers)  # Long arithmetic: no wrap
    assert compile("L + 1 = 2147483648").matches(headers)
    assert compile("i + 1 = -2147483648").matches(headers)  # Integer arithmetic wraps


def test_small_integers_compare_by_value():
    headers = {"b": Int8(-3), "B": UInt8(250), "s": Int16(-7), "u": UInt16(65000),
               "i": UInt32(4_000_000_000)}
    selector = "b = -3 AND B = 250 AND s < 0 AND u > 64999 AND i = 4000000000"
    assert compile(selector).matches(headers)
    assert compile("s IN ('x')").evaluate(headers) is None  # not a string


def test_a_timestamp_header_is_epoch_milliseconds():
    headers = table(("ts", b"T" + struct.pack(">Q", 1_700_000_000)))
    assert compile("ts = 1700000000000").matches(headers)
    node = table(("ts", b"T" + struct.pack(">Q", 1_700_000_000_123)))  # Date.now() as T
    assert compile("ts = 1700000000123000").matches(node)
    assert compile("ts > 0").matches({"ts": Timestamp(2**64 - 1)}) is False  # wraps like Java


def test_an_unusual_boolean_octet_is_true():
    headers = {"flag": BoolOctet(2)}  # only RabbitMQ 3.x delivers one (4.x writes 1)
    assert compile("flag").evaluate(headers) is True
    assert compile("flag <> FALSE").matches(headers)


def test_a_long_string_that_is_not_utf8_is_binary():
    headers = {"s": LongStrBytes(b"\xff"), "t": "text"}
    assert not compile("s = 'x'").matches(headers)
    assert compile("s IS NOT NULL AND t = 'text'").matches(headers)


@pytest.mark.parametrize("value", [Float32(1.5), 1.5, decimal.Decimal("1.5")])
def test_float_double_and_decimal_are_equal_numbers(value):
    assert compile("x = 1.5 AND x > 1 AND x < 2").matches({"x": value})
