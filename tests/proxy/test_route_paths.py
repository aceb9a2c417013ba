"""The proxy's two routes of a publish to an x-rtopic exchange give the same bytes: the common
one (CC, BCC and the alias read from the frame by rtroute.core.headers, the table rewritten
natively) and the general one (the whole table decoded and re-encoded in Python), on random
binding tables, routing keys and headers, with a frame_max small enough that some plans do not
fit; and the refusals are the same."""
from __future__ import annotations

import asyncio
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from rtroute.proxy import rewrite as rewrite_module
from rtroute.proxy.catalog import RTopic

from ..hypothesis_profiles import examples
from .test_session_pumps import _Catalog, message, new_session

WORDS = ["a", "b", "c"]
_word_keys = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(".".join)
_query_keys = st.lists(st.sampled_from([*WORDS, "*", "#"]), min_size=1, max_size=3).map(".".join)
_arrays = st.lists(_query_keys, max_size=3)
_other = st.one_of(st.integers(0, 9), st.text(max_size=3), st.none(), st.booleans())


@st.composite
def headers(draw):
    entries = {}
    for name in draw(st.lists(st.sampled_from(["CC", "BCC", "rtroute-bcc", "n", "x-seq"]),
                              max_size=4, unique=True)):
        entries[name] = draw(_arrays) if name in ("CC", "BCC", "rtroute-bcc") and \
            draw(st.integers(0, 5)) else draw(_other)
    return entries if entries or draw(st.booleans()) else None


def _through(bindings, publishes, frame_max):
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        logs = RTopic("logs")
        for queue, key in bindings:
            logs.bind(("queue", queue), key, True)
        logs.ready.set()
        session, client, broker = new_session()
        session.catalog = _Catalog(logs)
        session.frame_max = frame_max
        data = b"".join(message(1, b"logs", key.encode(), b"x", hdrs) for key, hdrs in publishes)
        session.client_data(data)
        while session._held:
            loop.run_until_complete(asyncio.sleep(0))
        return bytes(broker.data), bytes(client.data)
    finally:
        loop.close()


class _GeneralOnly:
    """rtroute.core.headers' reader leaving every frame to the general path."""

    @staticmethod
    def read(*_args):
        return None


@settings(max_examples=examples(300))
@given(st.lists(st.tuples(st.sampled_from(["q1", "q2", "q3"]), _word_keys), max_size=12),
       st.lists(st.tuples(_query_keys, headers()), min_size=1, max_size=4),
       st.sampled_from([4096, 160, 120]))
def test_the_common_and_the_general_route_send_the_same(bindings, publishes, frame_max):
    common = _through(bindings, publishes, frame_max)
    with mock.patch.object(rewrite_module, "HeaderKeys", _GeneralOnly):
        general = _through(bindings, publishes, frame_max)
    assert common == general
