"""pytest-benchmark: the Spark job's executor side on one Arrow batch, without Spark.

Run with `python -m pytest benchmarks/bench_spark.py --benchmark-only`. Each round routes one
10,000-row batch of the `rtroute bench spark` archive over 10,000 bindings: with the native core,
with the no-op matcher (everything but the matching), and row by row through
`RTopicExchange.route` (on the first 1,000 rows). `rtroute bench spark` measures the whole job.
"""
from __future__ import annotations

import json

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

from rtroute import RTopicExchange
from rtroute.bench.spark import benchmark_bindings, generate_archive
from rtroute.spark.batches import BatchRouter

ROWS = 10_000


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    import pyarrow.parquet as pq

    pairs = benchmark_bindings(10_000)
    directory = tmp_path_factory.mktemp("archive")
    generate_archive(directory, ROWS, pairs, files=1)
    batch = pq.read_table(directory).to_batches(max_chunksize=ROWS)[0]
    return pairs, batch


@pytest.mark.parametrize("noop", [False, True], ids=["native", "noop"])
def test_route_batch(benchmark, data, noop):
    pairs, batch = data
    benchmark.group = "one 10k-row batch"
    router = BatchRouter("rtopic", pairs, noop=noop)
    benchmark(router.route_batch, batch)


def test_exchange_route_row_by_row(benchmark, data):
    pairs, batch = data
    benchmark.group = "1k rows through RTopicExchange.route"
    exchange = RTopicExchange()
    for destination, key in pairs:
        exchange.bind(destination, key)
    rows = [(r["routing_key"], json.loads(r["headers"]) if r["headers"] else None)
            for r in batch.slice(0, 1000).to_pylist()]
    benchmark(lambda: [exchange.route(key, headers) for key, headers in rows])
