"""pytest-benchmark: planning one publish's delivery, native (one C call: match, then one
binding key per destination, src_c/reach.h) against the Python planner over every matched key
(rtroute.routing.delivery_plan.plan_delivery, what the proxy, the publisher and the sidecar ran
before), on the same table: 20,000 bindings over 100 queues, a header that changes per
message (so no cache answers).

Run: python -m pytest benchmarks/bench_plan.py --benchmark-only --benchmark-group-by=param:query
"""
import pytest

from rtroute.routing.delivery_plan import plan_delivery
from rtroute.routing.exchange_router import DEFAULT_FRAME_MAX, FRAME_OVERHEAD, ExchangeRouter

pytest.importorskip("rtroute.core._native")
BINDINGS = 20_000
QUEUES = 100
QUERIES = {"#": 20_000, "k.*.a3": 2_857, "k.17.*": 1}  # query -> bindings it matches


@pytest.fixture(scope="module")
def router():
    r = ExchangeRouter("bench", bindings_type="direct")
    for i in range(BINDINGS):
        r.bind(("queue", f"q{i % QUEUES}"), f"k.{i}.a{i % 7}")
    return r


@pytest.mark.parametrize("query", list(QUERIES))
def test_native_planner(benchmark, router, query):
    counter = iter(range(10**9))
    decision = benchmark(lambda: router.decide_many([(query, {"n": next(counter)})])[0])
    assert len(decision.publishes[0].bcc) <= QUEUES


@pytest.mark.parametrize("query", list(QUERIES))
def test_python_planner_over_every_matched_key(benchmark, router, query):
    budget = DEFAULT_FRAME_MAX - FRAME_OVERHEAD - 16

    def plan():
        keys = router._table.match_union([query])
        return plan_delivery(router.bindings_exchange, query, [], keys, router.destinations_of,
                             budget)

    publishes = benchmark(plan)
    assert publishes
