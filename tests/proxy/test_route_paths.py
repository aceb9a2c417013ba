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
from rtroute.proxy import wire
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


# binding keys with '*'/'#' words too: on a topic NAME.bindings RabbitMQ treats them as
# wildcards, so a literal key is planned there (ExchangeRouter.routes_as_published says no)
_binding_keys = st.lists(st.sampled_from([*WORDS, "*", "#"]), min_size=1,
                         max_size=3).map(".".join)


def _through_typed(bindings, publishes, frame_max, bindings_type):
    with mock.patch.object(RTopic, "__init__", _typed_init(bindings_type)):
        return _through(bindings, publishes, frame_max)


def _typed_init(bindings_type):
    original = RTopic.__init__

    def init(self, name):
        original(self, name)
        self.router.bindings_type = bindings_type
    return init


@settings(max_examples=examples(300))
@given(st.lists(st.tuples(st.sampled_from(["q1", "q2", "q3"]), _binding_keys), max_size=12),
       st.lists(st.tuples(st.one_of(_word_keys, _query_keys), headers()), min_size=1,
                max_size=4),
       st.sampled_from([4096, 160]), st.sampled_from(["topic", "direct"]))
def test_a_literal_key_sent_as_published_is_what_its_plan_sends(bindings, publishes, frame_max,
                                                                 bindings_type):
    """The literal keys' short cut (no planning) sends the bytes the planned path sends."""
    short = _through_typed(bindings, publishes, frame_max, bindings_type)
    with mock.patch("rtroute.routing.exchange_router.ExchangeRouter.routes_as_published",
                    lambda *_args: False):
        planned = _through_typed(bindings, publishes, frame_max, bindings_type)
    assert short == planned


def test_a_literal_key_is_not_planned():
    """10,000 literal keys in turn miss every cache of plans: a literal key without CC, BCC
    or alias (headers or none) is sent as published without asking the planner."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("planned")

    publishes = [("a.b", None), ("c.a", {"x-seq": 1}), ("a.b", {"CC": []}), ("x.y", None)]
    with mock.patch.multiple("rtroute.routing.exchange_router.ExchangeRouter",
                             plan_bcc=refuse, decide_keys=refuse, decide=refuse):
        sent, _ = _through_typed([("q1", "a.b"), ("q2", "c.a")], publishes, 4096, "direct")
    # the proxy's confirm.select (no-wait) first: it meters the client's publishes
    select = wire.method_frame(1, wire.CONFIRM_SELECT, b"\x01")
    expected = select + b"".join(message(1, b"logs.bindings", key.encode(), b"x", hdrs)
                        for key, hdrs in publishes)
    assert sent == expected


def test_a_run_of_literal_keys_is_renamed_at_once():
    """Literal keys without headers, each another (no cached rewrite serves them), go to
    NAME.bindings as published in one native pass over the run (FrameScanner.renames), not
    routed one by one; each is metered at cost 1, so the budget holds."""
    keys = [f"k{i}.t0" for i in range(50)]
    routed = []
    original = rewrite_module.Rewriter.route

    def route(self, *args):
        routed.append(args)
        return original(self, *args)

    with mock.patch.object(rewrite_module.Rewriter, "route", route):
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            logs = RTopic("logs")
            logs.bind(("queue", "q1"), "k1.t0", True)
            logs.ready.set()
            session, _client, broker = new_session()
            session.catalog = _Catalog(logs)
            session.client_data(b"".join(message(1, b"logs", k.encode(), b"x" * i)
                                         for i, k in enumerate(keys)))
            assert not session._held
        finally:
            loop.close()
    select = wire.method_frame(1, wire.CONFIRM_SELECT, b"\x01")
    assert bytes(broker.data) == select + b"".join(
        message(1, b"logs.bindings", k.encode(), b"x" * i) for i, k in enumerate(keys))
    assert routed == []
    assert session.rewritten == 50 and session.meter.in_flight == 50
