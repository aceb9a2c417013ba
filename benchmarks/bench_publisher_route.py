"""pytest-benchmark: RTopicPublisher's work per message in its engine thread, in process (no
broker): a batch of queued messages decided (ExchangeRouter.decide_many) and turned into
frames (PublisherEngine._route), what the relay then writes. The varied traffic of
`rtroute bench publish` (rtroute/bench/traffic.py), 2,000 messages a round in batches of
rtroute.publisher.engine.BATCH, a header that changes per message where named (a new
``pika.BasicProperties`` per message, as an application makes them).

Run: python -m pytest benchmarks/bench_publisher_route.py --benchmark-only
--benchmark-group-by=param:scenario (the time of a round / 2,000 = the engine's CPU per
message; the cyclic collector paused as PublisherEngine.drain pauses it)
"""
import collections
import gc
import threading

import pika
import pytest

from rtroute.amqp import frames
from rtroute.bench import traffic
from rtroute.publisher.engine import BATCH, PublisherEngine
from rtroute.publisher.policy import PublisherPolicy
from rtroute.routing.exchange_router import ExchangeRouter

ROUND = 2_000
SCENARIOS = {
    "10,000 literal keys": (traffic.varied_literal, False),
    "1,000 w{i}.* keys, 10 bindings of 1 queue": (traffic.varied_star, False),
    "100 keys, 10 queues each": (traffic.fanout, False),
    "one key, a header per message": (lambda: traffic.varied_star(keys=1), True),
    "mixed, a header per message": (traffic.mixed, True),
}


class _Relay:
    """The relay as _route uses it: always room; what is handed over is dropped."""

    room = 10**9

    def put_bulk(self, *_args):
        pass

    def submit(self, *_args, **_kwargs):
        pass


class _Future:
    __slots__ = ("awaiting", "decision")


def _engine(shape):
    router = ExchangeRouter("logs", bindings_type="direct")
    for queue, key in shape.rtopic_bindings:
        router.bind(("queue", f"q{queue}"), key)
    engine = PublisherEngine.__new__(PublisherEngine)  # no connection: _route's state only
    engine._router, engine.relay, engine._policy = router, _Relay(), PublisherPolicy("logs")
    engine.bindings_exchange, engine.unroutable, engine.published_key_header = \
        "logs.bindings", 0, None
    engine._fast = {flag: frames.PublishFrames(1, 4096, flag) for flag in (False, True)}
    engine._head_cache, engine._last_head, engine._frame_max = {}, (None, -1, None, b""), 131072
    engine.archive, engine._archived_parts = None, {}
    engine._bulk_messages, engine._bulk_items, engine._bulk_frames = [], [], 0
    engine.lock, engine.queue = threading.RLock(), collections.deque()
    return engine


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_engine_route(benchmark, scenario):
    make, vary = SCENARIOS[scenario]
    shape = make()
    engine = _engine(shape)
    keys = shape.rtopic_keys
    rounds = iter(range(10**9))
    body = b"x" * 100

    def feed():
        base = next(rounds) * ROUND
        items = []
        for n in range(base, base + ROUND):
            properties = pika.BasicProperties(headers={"x-seq": n}) if vary else None
            items.append((_Future(), keys[n % len(keys)], body, properties,
                          dict(properties.headers) if vary else None, False))
        return (items,), {}

    def run(items):
        gc.disable()
        try:
            for start in range(0, ROUND, BATCH):
                engine._route(items[start:start + BATCH], 10**9)
                engine._bulk_messages, engine._bulk_items, engine._bulk_frames = [], [], 0
        finally:
            gc.enable()

    benchmark.pedantic(run, setup=feed, rounds=20)
