"""pytest-benchmark: the native core against the pure-Python dict trie and marisa-trie.

Run: python -m pytest benchmarks/bench_match.py --benchmark-only [--benchmark-group-by=param:shape]
(`rtroute bench match` runs the full comparison at 1k, 100k and 1M bindings with a table.)
"""
import pytest

from rtroute.bench.match import SHAPES, MarisaPrefix, generate_bindings, queries_for
from rtroute.bench.pytrie import DictTrie

native_module = pytest.importorskip("rtroute.core._native")
N = 100_000


@pytest.fixture(scope="module")
def keys():
    return generate_bindings(N)


@pytest.fixture(scope="module")
def matchers(keys):
    native = native_module.ReverseMatcher()
    trie = DictTrie()
    for k in keys:
        native.add(k)
        trie.add(k)
    native.compact()
    impls = {"native": native.match, "python dict trie": trie.match}
    try:
        impls["marisa-trie"] = MarisaPrefix(keys).match
    except ImportError:
        pass
    return impls


@pytest.mark.parametrize("impl", ["native", "python dict trie", "marisa-trie"])
@pytest.mark.parametrize("shape", [s for s in SHAPES if s != "#"])
def test_query_shape(benchmark, matchers, keys, impl, shape):
    if impl not in matchers:
        pytest.skip("marisa-trie not installed")
    queries = queries_for(shape, keys, 50)
    match = matchers[impl]
    benchmark.group = shape
    benchmark(lambda: [match(q) for q in queries])


def test_exact_batch_native(benchmark, matchers, keys):
    native = matchers["native"].__self__
    queries = queries_for("exact", keys, 10_000)
    benchmark.group = "exact batch of 10k"
    benchmark(native.match_many, queries)


def test_bind_unbind_native(benchmark, keys):
    m = native_module.ReverseMatcher()
    sample = keys[:10_000]

    def churn():
        for k in sample:
            m.add(k)
        for k in sample:
            m.remove(k)

    benchmark.group = "bind+unbind 10k"
    benchmark(churn)
