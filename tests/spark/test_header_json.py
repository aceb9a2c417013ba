"""The archive's headers column: JSON text from which every table comes back byte for byte."""
from __future__ import annotations

import decimal
import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings

from rtroute.amqp.field_table import (
    BoolOctet,
    FieldTable,
    Float32,
    Int16,
    Int64,
    LongStrBytes,
    Timestamp,
    decode_table,
    encode_entries,
)
from rtroute.spark.header_json import (
    MAX_DEPTH,
    HeaderJsonError,
    headers_from_json,
    headers_json,
)

from ..amqp.test_field_table import TABLE_ENTRIES, entry, sized
from ..hypothesis_profiles import examples


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=TABLE_ENTRIES)
def test_every_table_survives_json_byte_for_byte(entries):
    table = decode_table(entries, 0, len(entries))
    text = headers_json(table)
    assert encode_entries(headers_from_json(text)) == entries
    json.loads(text)  # plain JSON: any reader takes it (no NaN, no Infinity)


def test_json_s_own_types_stay_plain_json():
    table = FieldTable({"CC": ["a.b"], "n": 5, "price": 10.7, "ok": True, "none": None,
                        "nested": {"k": "v"}})
    assert json.loads(headers_json(table)) == {"CC": ["a.b"], "n": 5, "price": 10.7,
                                               "ok": True, "none": None, "nested": {"k": "v"}}


@pytest.mark.parametrize("value, expected", [
    (Float32(1.5), {"$float": 1.5}),
    (float("nan"), {"$double": "NaN"}),
    (float("-inf"), {"$double": "-Infinity"}),
    (Int16(-7), {"$short": -7}),
    (Int64(5), {"$long": 5}),
    (2**40, {"$long": 2**40}),
    (Timestamp(1_700_000_000_123), {"$timestamp": 1_700_000_000_123}),
    (decimal.Decimal("1.50"), {"$decimal": "1.50"}),
    (b"\x00\x01", {"$binary": "AAE="}),
    (LongStrBytes(b"\xff"), {"$longstr": "/w=="}),
    (BoolOctet(2), {"$bool": 2}),
])
def test_other_types_are_tagged_with_rabbitmq_s_type_names(value, expected):
    assert json.loads(headers_json({"v": value})) == {"v": expected}
    back = headers_from_json(headers_json({"v": value}))["v"]
    assert type(back) is type(value) or (type(value) is int and type(back) is Int64)


def test_tables_json_cannot_hold_as_objects_are_entry_lists():
    raw = (entry("a", sized(b"S", b"1")) + entry("a", sized(b"S", b"2"))
           + entry("$binary", b"V") + bytes((1,)) + b"\xff" + b"V")
    table = decode_table(raw, 0, len(raw))
    assert json.loads(headers_json(table)) == {"$table": [
        ["a", "1"], ["a", "2"], ["$binary", None], [{"$binary": "/w=="}, None]]}
    assert encode_entries(headers_from_json(headers_json(table))) == raw


def test_deep_nesting_is_kept_in_amqp_encoding_below_the_json_depth_limit():
    value = sized(b"A", b"")
    for _ in range(5000):
        value = sized(b"A", value)
    raw = entry("deep", value) + entry("price", b"d" + struct.pack(">d", 10.7))
    text = headers_json(decode_table(raw, 0, len(raw)))
    assert text.count("[") <= MAX_DEPTH + 1 and '"$amqp"' in text
    assert encode_entries(headers_from_json(text)) == raw


def test_older_archives_still_read():
    old = '{"raw":{"$binary":"AAE="},"d":{"$decimal":"1.5"},"t":{"$timestamp":' \
          '"2023-11-14T22:13:20+00:00"}}'
    assert headers_from_json(old) == {"raw": b"\x00\x01", "d": decimal.Decimal("1.5"),
                                      "t": 1_700_000_000}


@pytest.mark.parametrize("text", ['{"a":', '{"x": {"$short": "no"}}', "[" * 5000 + "]" * 5000])
def test_malformed_text_is_an_error(text):
    with pytest.raises(HeaderJsonError):
        headers_from_json(text)
