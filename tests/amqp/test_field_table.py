"""The lossless field-table codec: every table RabbitMQ's parser accepts decodes, and encodes
back to the very same bytes; values keep their wire type."""
from __future__ import annotations

import datetime
import decimal
import math
import pickle
import struct

import pika
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pika import data as pika_data

from rtroute.amqp.field_table import (
    BoolOctet,
    FieldTable,
    FieldTableError,
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
    decode_table,
    decode_value,
    encode_entries,
    encode_table,
    encode_value,
    entry_spans,
    select_entries,
    selection,
    skip_value,
)

from ..hypothesis_profiles import examples


def u32(n: int) -> bytes:
    return struct.pack(">I", n)


def sized(tag: bytes, content: bytes) -> bytes:
    return tag + u32(len(content)) + content


def shortstr(name: bytes) -> bytes:
    return bytes((len(name),)) + name


def roundtrip(entries: bytes) -> FieldTable:
    """Decodes the table entries ``entries`` and checks they encode back to themselves."""
    table = decode_table(entries, 0, len(entries))
    assert encode_entries(table) == entries
    assert encode_table(table) == u32(len(entries)) + entries
    assert encode_table(decode_table(u32(len(entries)) + entries)) == u32(len(entries)) + entries
    return table


# -- wire-level generation: every value RabbitMQ's parser accepts, as bytes --------------------
def fixed(tag: str, size: int) -> st.SearchStrategy[bytes]:
    return st.binary(min_size=size, max_size=size).map(lambda raw: tag.encode() + raw)


SCALARS = st.one_of(
    fixed("t", 1), fixed("b", 1), fixed("B", 1), fixed("s", 2), fixed("u", 2),
    fixed("I", 4), fixed("i", 4), fixed("l", 8), fixed("L", 8), fixed("f", 4),
    fixed("d", 8), fixed("T", 8), fixed("D", 5), st.just(b"V"),
    # floats worth their own draws: NaNs (quiet, signalling, with payloads), infinities, zeros
    st.sampled_from([b"f\x7f\xc0\x00\x00", b"f\x7f\x80\x00\x01", b"f\xff\xbf\xff\xff",
                     b"f\x7f\x80\x00\x00", b"f\x80\x00\x00\x00", b"f\x00\x00\x00\x01",
                     b"d\x7f\xf8\x00\x00\x00\x00\x00\x01", b"d\x7f\xf0\x00\x00\x00\x00\x00\x01",
                     b"d\xff\xf0\x00\x00\x00\x00\x00\x00", b"d\x80" + b"\x00" * 7]),
    st.text(max_size=12).map(lambda t: sized(b"S", t.encode("utf-8"))),
    st.binary(max_size=12).map(lambda raw: sized(b"S", raw)),  # often not UTF-8
    st.binary(max_size=12).map(lambda raw: sized(b"x", raw)),
)
NAMES = st.one_of(
    st.text(max_size=10).map(lambda t: t.encode("utf-8")),
    st.binary(max_size=6),
    st.sampled_from([b"CC", b"BCC", b"x-rtroute-bcc", b"a" * 255]),
)


def _array(values: list[bytes]) -> bytes:
    return sized(b"A", b"".join(values))


def _table(entries: list[tuple[bytes, bytes]]) -> bytes:
    return sized(b"F", b"".join(shortstr(n) + v for n, v in entries))


VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=5).map(_array),
        st.lists(st.tuples(NAMES, children), max_size=5).map(_table),
    ),
    max_leaves=30,
)
# a table's entries; repeated names are likely (few names drawn often)
TABLE_ENTRIES = st.lists(st.tuples(st.one_of(NAMES, st.sampled_from([b"a", b"b"])), VALUES),
                         max_size=8).map(lambda es: b"".join(shortstr(n) + v for n, v in es))


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=TABLE_ENTRIES)
def test_every_table_decodes_and_encodes_back_byte_for_byte(entries):
    table = roundtrip(entries)
    assert [start for _, start, _ in entry_spans(entries, 0, len(entries))] == \
        _entry_starts(entries, len(table.entries()))


def _entry_starts(entries: bytes, count: int) -> list[int]:
    starts, pos = [], 0
    for _ in range(count):
        starts.append(pos)
        pos = skip_value(entries, pos + 1 + entries[pos], len(entries))
    assert pos == len(entries)
    return starts


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=VALUES)
def test_every_value_decodes_and_encodes_back_byte_for_byte(value):
    decoded, end = decode_value(value)
    assert end == len(value)
    assert encode_value(decoded) == value
    assert skip_value(value, 0, len(value)) == len(value)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=TABLE_ENTRIES, names=st.lists(NAMES, max_size=4))
def test_select_entries_gives_the_first_entry_of_each_name_as_a_full_decode_does(entries,
                                                                                 names):
    full = decode_table(entries, 0, len(entries))
    wanted = {n: f"key-{i}" for i, n in enumerate(names)}
    found = select_entries(entries, 0, len(entries), wanted)
    expected = {}
    for raw, key in wanted.items():
        name = _name(raw)
        if name in full:
            expected[key] = full[name]
    assert _encoded(found) == _encoded(expected)


def _name(raw: bytes):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _encoded(values: dict) -> dict:
    return {k: encode_value(v) for k, v in values.items()}


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=TABLE_ENTRIES, data=st.data())
def test_a_cut_or_corrupted_table_is_an_error_never_a_crash(entries, data):
    if not entries:
        return
    cut = data.draw(st.integers(0, len(entries) - 1))
    flip = data.draw(st.integers(0, len(entries) - 1))
    corrupted = entries[:flip] + bytes((entries[flip] ^ 0xFF,)) + entries[flip + 1:]
    for broken in (entries[:cut], entries[:cut] + b"\x01aU\x00\x00", corrupted):
        for read, args in ((decode_table, ()), (entry_spans, ()),
                           (select_entries, (selection(["a", "CC"]),))):
            try:
                read(broken, 0, len(broken), *args)
            except FieldTableError:
                pass  # the only exception allowed
        try:
            table = decode_table(broken, 0, len(broken))
        except FieldTableError:
            continue
        assert encode_entries(table) == broken  # what decodes is a valid table: exact again


# -- value-level generation: typed Python values --------------------------------------------
TYPED = st.one_of(
    st.booleans(), st.none(), st.text(max_size=10), st.binary(max_size=8),
    st.integers(-2**63, 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(width=32, allow_nan=False).map(Float32),
    st.integers(-128, 127).map(Int8), st.integers(0, 255).map(UInt8),
    st.integers(-2**15, 2**15 - 1).map(Int16), st.integers(0, 2**16 - 1).map(UInt16),
    st.integers(0, 2**32 - 1).map(UInt32), st.integers(-2**63, 2**63 - 1).map(Int64),
    st.integers(-2**63, 2**63 - 1).map(Int64L), st.integers(0, 2**64 - 1).map(Timestamp),
    st.integers(2, 255).map(BoolOctet),
    st.binary(min_size=1, max_size=6).filter(lambda b: not _utf8(b)).map(LongStrBytes),
    st.builds(lambda n, s: decimal.Decimal(f"{n}E-{s}"), st.integers(0, 2**32 - 1),
              st.integers(0, 255)),
)


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


TYPED_VALUES = st.recursive(
    TYPED,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(st.tuples(st.text(max_size=8), children), max_size=4).map(
            FieldTable.from_entries)),
    max_leaves=20,
)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=TYPED_VALUES)
def test_typed_values_survive_encode_decode_with_their_type(value):
    encoded = encode_value(value)
    decoded, end = decode_value(encoded)
    assert end == len(encoded)
    assert encode_value(decoded) == encoded
    assert _shape(decoded) == _shape(value)


def _shape(value):
    """Wire type and value, NaN-safe, for comparing decoded with original (a plain ``int``
    beyond 32 bits is an ``l``, as an ``Int64`` is)."""
    if isinstance(value, FieldTable):
        return ("F", [(n, _shape(v)) for n, v in value.entries()])
    if isinstance(value, list):
        return ("A", [_shape(v) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return (amqp_type(value), "nan")
    if isinstance(value, float):
        return (amqp_type(value), value.hex())
    return (amqp_type(value), value)


# pika before 1.4 (1.3 is our floor) writes an int below -2**31 as ``L``; from 1.4 on, as RabbitMQ
# names a signed 64-bit integer, ``l``, as we do (the test below pins ours on every pika)
PIKA_WRITES_L_FOR_NEGATIVE_LONGS = tuple(map(int, pika.__version__.split(".")[:2])) < (1, 4)

ENCODABLE_BY_PIKA = st.recursive(
    st.one_of(st.booleans(), st.none(), st.text(max_size=10), st.binary(max_size=8),
              st.integers(-2**31 if PIKA_WRITES_L_FOR_NEGATIVE_LONGS else -2**63, 2**63 - 1),
              st.datetimes(min_value=datetime.datetime(1970, 1, 1)).map(
                  lambda d: d.replace(microsecond=0))),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.text(max_size=8), children, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=st.dictionaries(st.text(max_size=8), ENCODABLE_BY_PIKA, max_size=6))
def test_plain_values_encode_as_pika_encodes_them(table):
    pieces: list[bytes] = []
    pika_data.encode_table(pieces, table)
    assert encode_table(table) == b"".join(pieces)


@pytest.mark.parametrize("value", [-2**31 - 1, -2**63, 2**31, 2**63 - 1])
def test_an_int_beyond_32_bits_is_a_signed_64_bit_l_on_every_pika(value):
    assert encode_value(value) == b"l" + struct.pack(">q", value)


# -- pinned values --------------------------------------------------------------------------
def entry(name: str, value: bytes) -> bytes:
    return shortstr(name.encode()) + value


@pytest.mark.parametrize("wire, expected, cls", [
    (b"d" + struct.pack(">d", 10.7), 10.7, float),
    (b"f" + struct.pack(">f", 10.7), struct.unpack(">f", struct.pack(">f", 10.7))[0], Float32),
    (b"s" + struct.pack(">h", -7), -7, Int16),
    (b"u" + struct.pack(">H", 65000), 65000, UInt16),
    (b"b\xfd", -3, Int8),
    (b"B\xfd", 253, UInt8),
    (b"I" + struct.pack(">i", -5), -5, int),
    (b"i" + struct.pack(">I", 4_000_000_000), 4_000_000_000, UInt32),
    (b"l" + struct.pack(">q", 5), 5, Int64),
    (b"L" + struct.pack(">q", -1), -1, Int64L),  # signed, as RabbitMQ reads it
    (b"T" + struct.pack(">Q", 0), 0, Timestamp),
    (b"T" + struct.pack(">Q", 2**63 - 1), 2**63 - 1, Timestamp),
    (b"T" + struct.pack(">Q", 2**64 - 1), 2**64 - 1, Timestamp),
    (b"T" + struct.pack(">Q", 1_700_000_000_123), 1_700_000_000_123, Timestamp),  # ms
    (b"D\x02" + struct.pack(">I", 12345), decimal.Decimal("123.45"), decimal.Decimal),
    (b"D\x00" + struct.pack(">I", 2**32 - 1), decimal.Decimal(2**32 - 1), decimal.Decimal),
    (b"D\x03" + struct.pack(">I", 0), decimal.Decimal("0.000"), decimal.Decimal),
    (b"t\x00", False, bool),
    (b"t\x01", True, bool),
    (b"t\x02", 2, BoolOctet),
    (sized(b"S", "hé".encode()), "hé", str),
    (sized(b"S", b"\xff\xfe"), b"\xff\xfe", LongStrBytes),
    (sized(b"x", b"\x00\x01"), b"\x00\x01", bytes),
    (b"V", None, type(None)),
])
def test_each_type_decodes_to_its_typed_value_and_back(wire, expected, cls):
    value, end = decode_value(wire)
    assert end == len(wire)
    assert type(value) is cls
    assert value == expected
    if isinstance(value, decimal.Decimal):
        assert value.as_tuple() == expected.as_tuple()  # the scale too
    assert encode_value(value) == wire
    assert amqp_type(value) == chr(wire[0])


def test_a_float32_nan_keeps_its_bits():
    for bits in (b"\x7f\x80\x00\x01", b"\xff\xc0\x12\x34", b"\x7f\xc0\x00\x00"):
        value = decode_value(b"f" + bits)[0]
        assert math.isnan(value)
        assert encode_value(value) == b"f" + bits


def test_floats_are_real_floats():
    table = roundtrip(entry("price", b"d" + struct.pack(">d", 10.7))
                      + entry("f", b"f" + struct.pack(">f", 10.7)))
    assert table["price"] == 10.7 and table["price"] > 10.5
    assert table["f"] > 10.5 and table["f"] != 10.7  # a 32-bit float is not 10.7 exactly


@pytest.mark.parametrize("depth", [1000, 26_000])
def test_deep_nesting_decodes_and_encodes_without_recursion(depth):
    arrays = b"A" + u32(0)
    tables = b"F" + u32(0)
    for i in range(depth):
        arrays = sized(b"A", arrays)
        tables = sized(b"F", entry(f"k{i % 10}", tables))
    for wire in (arrays, tables):
        value, end = decode_value(wire)
        assert end == len(wire)
        assert encode_value(value) == wire
        assert skip_value(wire, 0, len(wire)) == len(wire)
    entries = entry("deep", arrays) + entry("CC", sized(b"A", sized(b"S", b"k")))
    assert select_entries(entries, 0, len(entries), selection(["CC"])) == {"CC": ["k"]}
    assert roundtrip(entries)["CC"] == ["k"]


def test_unknown_types_and_truncations_are_errors():
    with pytest.raises(FieldTableError, match="unknown field type 'U'"):
        decode_value(b"U\x00\x01")
    with pytest.raises(FieldTableError, match="unknown field type"):
        decode_table(entry("a", b"Z"), 0, 3)
    with pytest.raises(FieldTableError):
        decode_value(b"I\x00\x00")
    with pytest.raises(FieldTableError):
        decode_value(sized(b"S", b"abc")[:-1])
    with pytest.raises(FieldTableError):
        decode_table(u32(10) + b"\x01a")
    nested_bad = entry("n", sized(b"A", b"I\x00"))
    with pytest.raises(FieldTableError):
        select_entries(nested_bad, 0, len(nested_bad), {})  # checked though not selected


@pytest.mark.parametrize("value", [
    Int8(128), UInt8(-1), Int16(2**15), UInt16(2**16), UInt32(2**32), Int64(2**63),
    Timestamp(-1), Timestamp(2**64), 2**64, -2**63 - 1, decimal.Decimal("-1.5"),
    decimal.Decimal("NaN"), decimal.Decimal(2**32), decimal.Decimal("1E-256"), object(),
    {1: "not a str name"}, {"x" * 256: 1}, "\udc80",
])
def test_values_without_an_encoding_are_errors(value):
    with pytest.raises(FieldTableError):
        encode_value(value)


def test_plain_values_encode_as_rabbitmq_would_generate_them():
    assert encode_value(5) == b"I" + struct.pack(">i", 5)
    assert encode_value(2**40) == b"l" + struct.pack(">q", 2**40)
    assert encode_value(1.5) == b"d" + struct.pack(">d", 1.5)
    assert encode_value(decimal.Decimal("1E+2")) == b"D\x00" + u32(100)
    assert encode_value(datetime.datetime(2024, 1, 1)) == \
        b"T" + struct.pack(">Q", 1_704_067_200)
    assert encode_value(("a",)) == sized(b"A", sized(b"S", b"a"))
    assert encode_value(bytearray(b"\x01")) == sized(b"x", b"\x01")


# -- repeated names ---------------------------------------------------------------------------
REPEATED = (entry("a", sized(b"S", b"1")) + entry("b", b"I" + u32(2))
            + entry("a", sized(b"S", b"2")))


def test_a_repeated_name_is_kept_and_looks_up_its_first_entry():
    table = roundtrip(REPEATED)
    assert table["a"] == "1" and len(table) == 2 and table.has_repeats
    assert table.entries() == [("a", "1"), ("b", 2), ("a", "2")]
    assert encode_entries(table.copy()) == REPEATED
    assert encode_entries(pickle.loads(pickle.dumps(table))) == REPEATED


def test_setting_a_repeated_name_replaces_its_first_entry_and_drops_the_others():
    table = decode_table(REPEATED, 0, len(REPEATED))
    table["a"] = "new"
    assert table.entries() == [("a", "new"), ("b", 2)] and not table.has_repeats
    table = decode_table(REPEATED, 0, len(REPEATED))
    table["c"] = 3
    assert table.entries() == [("a", "1"), ("b", 2), ("a", "2"), ("c", 3)]
    del table["a"]
    assert table.entries() == [("b", 2), ("c", 3)]
    table = decode_table(REPEATED, 0, len(REPEATED))
    assert table.pop("a") == "1" and table.entries() == [("b", 2)]
    table = decode_table(REPEATED, 0, len(REPEATED))
    table.update({"b": 5}, z=1)
    assert table.entries() == [("a", "1"), ("b", 5), ("a", "2"), ("z", 1)]
    table.clear()
    assert table.entries() == [] and encode_entries(table) == b""


def test_a_name_that_is_not_utf8_stays_bytes():
    raw = shortstr(b"\xff") + b"V" + entry("ok", b"V")
    table = roundtrip(raw)
    assert list(table) == [b"\xff", "ok"]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), [Float32("-inf")],
                                   {"t": {"x": float("nan")}}])
def test_finite_floats_refuses_what_rabbitmq_closes_the_connection_on(value):
    encode_value(value)  # the codec itself is lossless
    with pytest.raises(FieldTableError, match="541"):
        encode_value(value, finite_floats=True)
    with pytest.raises(FieldTableError, match="541"):
        encode_table({"v": value}, finite_floats=True)
