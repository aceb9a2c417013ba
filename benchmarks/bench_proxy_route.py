"""pytest-benchmark: the proxy's work per message published to an x-rtopic exchange, in
process (no sockets): a client's bytes fed to a session, what it sends the broker collected.
The varied traffic of `rtroute bench proxy` (rtroute/bench/traffic.py), 2,000 messages a
round, a header that changes per message where named; each through the common path (CC, BCC
and the alias read natively, rtroute.core.headers) and through the general path (the whole
headers table decoded and re-encoded in Python, what every message with headers took before).

Run: python -m pytest benchmarks/bench_proxy_route.py --benchmark-only
--benchmark-group-by=param:scenario (the time of a round / 2,000 = the proxy's CPU per message)
"""
import asyncio
import sys
from pathlib import Path
from unittest import mock

import pytest

from rtroute.bench import traffic
from rtroute.proxy import rewrite as rewrite_module
from rtroute.proxy.catalog import RTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.proxy.test_session_pumps import _Catalog, message, new_session

ROUND = 2_000
SCENARIOS = {
    "10,000 literal keys": (traffic.varied_literal, False),
    "1,000 w{i}.* keys, 10 bindings of 1 queue": (traffic.varied_star, False),
    "one key, a header per message": (lambda: traffic.varied_star(keys=1), True),
    "10,000 literal keys, a header per message": (traffic.varied_literal, True),
    "mixed, a header per message": (traffic.mixed, True),
}


class _GeneralOnly:
    @staticmethod
    def read(*_args):
        return None


def _feeder(scenario):
    make, vary = SCENARIOS[scenario]
    shape = make()
    exchange = RTopic("logs")
    for queue, key in shape.rtopic_bindings:
        exchange.bind(("queue", f"q{queue}"), key, True)
    exchange.ready.set()
    keys = shape.rtopic_keys
    rounds = iter(range(10**9))
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # where the session's holds wait
    session, _client, broker = new_session()
    session.catalog = _Catalog(exchange)
    # no broker confirms in process: the client's in-flight budget never fills
    session.meter.budget = 10**12

    def feed():
        base = next(rounds) * ROUND
        data = b"".join(message(1, b"logs", keys[(base + i) % len(keys)].encode(), b"x" * 100,
                                {"x-seq": base + i} if vary else None)
                        for i in range(ROUND))
        return (data,), {}

    def run(data):
        session.client_data(data)
        while session._held:
            loop.run_until_complete(asyncio.sleep(0))
        broker.data.clear()

    return feed, run


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_common_path(benchmark, scenario):
    feed, run = _feeder(scenario)
    benchmark.pedantic(run, setup=feed, rounds=20)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_general_path(benchmark, scenario):
    with mock.patch.object(rewrite_module, "HeaderKeys", _GeneralOnly):
        feed, run = _feeder(scenario)
        benchmark.pedantic(run, setup=feed, rounds=20)
