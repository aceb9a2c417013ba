"""Plain header tables encoded in one pass (rtroute.core.plain_table): the native encoder and
its pure-Python twin give the general encoder's bytes (rtroute.amqp.field_table) on random
tables, and both leave everything else (None) to the general encoder."""
from __future__ import annotations

import datetime
import decimal
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtroute.amqp import field_table
from rtroute.amqp.field_table import FieldTableError, encode_entries
from rtroute.core.plain_table import py_encode_plain_entries, py_plain_header_frame

from ..hypothesis_profiles import examples
from .conftest import NATIVE

ENCODERS = [pytest.param(py_encode_plain_entries, id="twin")]
ENCODERS.append(pytest.param(getattr(NATIVE, "encode_plain_entries", None), id="native",
                             marks=() if NATIVE else pytest.mark.skip("extension not built")))

names = st.text(max_size=12)
scalars = (st.text(max_size=20) | st.booleans() | st.none() | st.binary(max_size=20)
           | st.integers(-(1 << 64), 1 << 64) | st.floats(allow_nan=True)
           | st.sampled_from([-(1 << 31), (1 << 31) - 1, 1 << 31, -(1 << 31) - 1,
                              -(1 << 63), (1 << 63) - 1, 1 << 63, "\ud800", 0.0, -0.0]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.lists(inner, max_size=3).map(tuple)
                      | st.dictionaries(names, inner, max_size=4), max_leaves=20)
tables = st.dictionaries(names | st.text(min_size=250, max_size=260), values, max_size=6)


def general(table, finite: bool):
    """The general encoder's answer alone (no native short cut), or the error it raises."""
    try:
        return b"".join(field_table._encode(table, True, finite))
    except (FieldTableError, ValueError):
        return FieldTableError


@pytest.mark.parametrize("encode", ENCODERS)
@settings(max_examples=examples(400))
@given(table=tables, finite=st.booleans())
def test_a_plain_table_encodes_as_the_general_encoder_does(encode, table, finite):
    expected = general(table, finite)
    found = encode(table, finite)
    if found is None:  # left to the general encoder: it must be one that is not plain
        assert expected is FieldTableError or not _plain(table, finite)
    else:
        assert found == expected
    if NATIVE and encode is py_encode_plain_entries:
        native = NATIVE.encode_plain_entries(table, finite)
        if isinstance(native, bytes) and isinstance(found, bytes):
            assert native == found
        else:
            assert native is None and found is None


def _plain(value, finite: bool, depth: int = 0) -> bool:
    cls = type(value)
    if cls is dict:
        return depth < 65 and all(type(k) is str and len(k.encode("utf-8", "surrogatepass")) <= 255
                                  and _plain(v, finite, depth + 1) for k, v in value.items())
    if cls in (list, tuple):
        return depth < 65 and all(_plain(v, finite, depth + 1) for v in value)
    if cls is float:
        return not finite or math.isfinite(value)
    if cls is str:  # a lone surrogate is not UTF-8: the general encoder's to refuse
        return not any("\ud800" <= c <= "\udfff" for c in value)
    return cls in (bool, bytes, type(None)) or (cls is int and -(1 << 63) <= value < 1 << 63)


def _deep(levels: int) -> list:
    root = node = []
    for _ in range(levels):
        node.append([])
        node = node[-1]
    return root


@pytest.mark.parametrize("encode", ENCODERS)
@pytest.mark.parametrize("table", [
    {"d": decimal.Decimal("1.5")}, {"t": datetime.datetime(2026, 1, 1)}, {b"n": 1},
    {"big": 1 << 64}, {"nan": math.nan}, {"s": "\ud800"}, {"n" * 256: 1},
    {"sub": type("Sub", (str,), {})("x")}, {"deep": _deep(70)},  # deeper than the plain encoders go
])
def test_anything_else_is_left_to_the_general_encoder(encode, table):
    assert encode(table, True) is None
    assert encode(field_table.FieldTable.from_entries(list({"a": 1}.items())), False) is None


def test_the_general_encoder_takes_the_plain_short_cut_with_the_same_bytes():
    table = {"x-seq": 7, "CC": ["a.b"], "n": {"f": 1.5, "l": [True, None, b"\x00"]}}
    assert encode_entries(table, True) == general(table, True)
    with pytest.raises(FieldTableError):
        encode_entries({"nan": math.nan}, finite_floats=True)


@settings(max_examples=examples(200))
@given(table=tables, content_type=st.none() | st.text(max_size=10),
       priority=st.none() | st.integers(0, 9), app_id=st.none() | st.text(max_size=10))
def test_the_publishers_header_frame_is_the_one_of_its_properties(table, content_type,
                                                                   priority, app_id):
    """content_header_frame_with (one pass, the publisher's) gives content_header_frame's
    bytes, or fails as it does."""
    import pika

    from rtroute.amqp.content_header import content_header_frame, content_header_frame_with

    properties = pika.BasicProperties(content_type=content_type, priority=priority,
                                      app_id=app_id, headers={"ignored": 1})
    values = {name: getattr(properties, name) for name in (
        "content_type", "priority", "app_id")}
    values["headers"] = table or None
    try:
        expected = content_header_frame(3, 100, values)
    except ValueError:
        with pytest.raises(ValueError):
            content_header_frame_with(3, 100, properties, table or None)
        return
    assert content_header_frame_with(3, 100, properties, table or None) == expected
    if not content_type and priority is None and not app_id:
        assert content_header_frame_with(3, 100, None, table or None) == \
            content_header_frame(3, 100, {"headers": table or None})


FRAMERS = [pytest.param(py_plain_header_frame, id="twin")]
FRAMERS.append(pytest.param(getattr(NATIVE, "plain_header_frame", None), id="native",
                            marks=() if NATIVE else pytest.mark.skip("extension not built")))
short = st.none() | st.text(max_size=8) | st.binary(max_size=8) | st.text(min_size=256,
                                                                           max_size=260)
octet = st.none() | st.integers(-2, 300) | st.just(True)
stamp = st.none() | st.integers(-1, 1 << 65)


@pytest.mark.parametrize("frame", FRAMERS)
@settings(max_examples=examples(300))
@given(table=st.none() | tables, content_type=short, app_id=short, priority=octet,
       delivery_mode=octet, timestamp=stamp, channel=st.integers(0, 65535),
       body_size=st.integers(0, (1 << 64) - 1))
def test_a_plain_header_frame_is_the_general_encoders(frame, table, content_type, app_id,
                                                       priority, delivery_mode, timestamp,
                                                       channel, body_size):
    """plain_header_frame (the publisher's, native or twin) gives content_header_frame_with's
    bytes wherever it answers, and answers whenever every property set is plain."""
    import pika

    from rtroute.amqp.content_header import content_header_frame_with

    properties = pika.BasicProperties(content_type=content_type, app_id=app_id,
                                      priority=priority, delivery_mode=delivery_mode,
                                      timestamp=timestamp, headers={"own": 1})
    found = frame(channel, body_size, properties, table)
    try:
        expected = content_header_frame_with(channel, body_size, properties, table)
    except ValueError:
        expected = None
    plain = all(v is None or (type(v) in (str, bytes) and
                              len(v.encode("utf-8", "surrogatepass") if type(v) is str
                                  else v) <= 255 and
                              (type(v) is bytes or not any("\ud800" <= c <= "\udfff" for c in v)))
                for v in (content_type, app_id)) and \
        all(v is None or (type(v) is int and 0 <= v <= 255) for v in (priority, delivery_mode)) \
        and (timestamp is None or 0 <= timestamp < 1 << 64) \
        and (table is None or _plain(table, True))
    if found is None:
        assert not plain
    else:
        assert found == expected
        assert plain
