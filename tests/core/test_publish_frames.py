"""The publisher's frames of a run of publishes in one call (rtroute.core.plain_table's
publish_frames): the native framer and its pure-Python twin give, byte for byte, the frames the
engine's general path builds one publish at a time (PublisherEngine._head_of: the method frame,
the content header frame with the BCC or the key as published, then content_after's body
frames), on random publishes, headers, properties, bodies and frame sizes; and they leave to
that path exactly the publishes that are not plain (or that it refuses)."""
from __future__ import annotations

import pika
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtroute.amqp import frames
from rtroute.amqp.content_header import content_header_frame, content_header_frame_with
from rtroute.core.plain_table import py_plain_header_frame, py_publish_frames
from rtroute.routing.delivery_plan import Publish

from ..hypothesis_profiles import examples
from .conftest import NATIVE
from .test_plain_table import tables

FRAMERS = [pytest.param(py_publish_frames, id="twin")]
FRAMERS.append(pytest.param(getattr(NATIVE, "publish_frames", None), id="native",
                            marks=() if NATIVE else pytest.mark.skip("extension not built")))
KEY_HEADER = "x-rtroute-routing-key"

names = st.text(max_size=10) | st.sampled_from(["\ud800", "k" * 256, "logs.bindings"])
parts = st.builds(
    Publish, exchange=st.sampled_from(["logs.bindings", "", "x" * 256]), routing_key=names,
    bcc=st.none() | st.just(()) | st.lists(names, max_size=4).map(tuple),
    published_key=st.none() | names)
headers = st.none() | tables | st.sampled_from([{}, {"BCC": ["a"]}, {KEY_HEADER: "k"},
                                                 {"CC": ["c.d"], "x-seq": 7}])
short = st.none() | st.text(max_size=8) | st.binary(max_size=8) | st.just("\ud800")
properties = st.none() | st.builds(
    pika.BasicProperties, content_type=short, app_id=short,
    priority=st.none() | st.integers(-1, 300), timestamp=st.none() | st.integers(-1, 1 << 65),
    headers=st.just({"own": 1}))  # never read: the publish's headers replace them
bodies = st.binary(max_size=40) | st.sampled_from([b"", b"x" * 4088, b"y" * 4089, b"z" * 9000])
publishes = st.lists(st.tuples(parts, headers, properties, bodies), max_size=6)


def general(channel, publish, frame_max, key_header):
    """The engine's general path for one publish: its bytes and frame count, or None where
    it raises (the engine fails that message)."""
    part, table, props, body = publish
    if part.bcc:
        table = {**(table or {}), "BCC": list(part.bcc)}
    elif part.published_key is not None and key_header is not None:
        table = {**(table or {}), key_header: part.published_key}
    try:
        if props is None and not table:
            header = content_header_frame(channel, len(body), None)
        else:
            header = content_header_frame_with(channel, len(body), props, table or None)
        if not frames.frame_fits(len(header), frame_max):
            return None
        method = frames.PublishFrames(channel, 16, False).get(part.exchange, part.routing_key)
    except ValueError:
        return None
    return frames.content_after(method + header, channel, body, frame_max)


def plain(channel, publish, key_header) -> bool:
    """Whether the framers write this publish (when the general path does)."""
    part, table, props, body = publish
    extra = "BCC" if part.bcc else \
        key_header if key_header is not None and part.published_key is not None else None
    if extra is not None and table is not None and extra in table:
        return False  # the general path replaces that entry in place
    if extra is not None:
        table = {**(table or {}), extra: part.bcc if part.bcc else part.published_key}
    return py_plain_header_frame(channel, len(body), props, table or None) is not None


@pytest.mark.parametrize("framer", FRAMERS)
@settings(max_examples=examples(400))
@given(run=publishes, channel=st.integers(0, 65535), key_header=st.none() | st.just(KEY_HEADER),
       frame_max=st.sampled_from([4096, 4097, 131072, 4095]))
def test_a_run_of_publishes_is_framed_as_the_general_path_frames_each(framer, run, channel,
                                                                        key_header, frame_max):
    written, count, start = [], 0, 0
    expected, expected_count = [], 0
    while start < len(run):
        data, frames_in, end = framer(channel, run, start, frame_max, key_header)
        assert start <= end <= len(run)
        written.append(data)
        count += frames_in
        for publish in run[start:end]:
            answer = general(channel, publish, frame_max, key_header)
            assert answer is not None
            expected.append(answer[0])
            expected_count += answer[1]
        if frame_max < 4096:  # nothing written: the general path for all
            assert (data, frames_in, end) == (b"", 0, start)
            return
        if end < len(run):  # left to the general path: not plain, or refused there
            left = run[end]
            assert general(channel, left, frame_max, key_header) is None or \
                not plain(channel, left, key_header)
        start = end + 1
    assert b"".join(written) == b"".join(expected)
    assert count == expected_count


@settings(max_examples=examples(200))
@given(run=publishes, channel=st.integers(0, 65535), key_header=st.none() | st.just(KEY_HEADER),
       frame_max=st.sampled_from([4096, 131072]), start=st.integers(0, 6))
def test_the_native_framer_answers_as_its_twin(run, channel, key_header, frame_max, start):
    if NATIVE is None:
        pytest.skip("extension not built")
    start = min(start, len(run))
    assert NATIVE.publish_frames(channel, run, start, frame_max, key_header) == \
        py_publish_frames(channel, run, start, frame_max, key_header)


@pytest.mark.parametrize("framer", FRAMERS)
def test_a_publish_that_is_not_a_tuple_of_four_is_refused(framer):
    with pytest.raises((TypeError, ValueError)):
        framer(1, [(Publish("x", "k", None), None, None)], 0, 131072, None)
