"""pytest-benchmark: compiled selectors against the AST-walking baseline.

Run with `python -m pytest benchmarks/bench_selector.py --benchmark-only`; each round evaluates
one selector on 1,000 messages (header dicts), so ops/s x 1,000 is evaluations per second.
`rtroute bench selector` (rtroute.bench.selector.run) measures the same cases without pytest.
"""
from __future__ import annotations

import pytest

from rtroute.bench.selector import CASES, AstInterpreter
from rtroute.selector import compile

BATCH = 1000


def _batch(case):
    return [case.messages[i % len(case.messages)] for i in range(BATCH)]


def _evaluate_all(matches, messages):
    for headers in messages:
        matches(headers)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_compiled(benchmark, case):
    benchmark.group = case.name
    messages = _batch(case)
    benchmark(_evaluate_all, compile(case.selector).matches, messages)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_ast_interpreter(benchmark, case):
    benchmark.group = case.name
    messages = _batch(case)
    benchmark(_evaluate_all, AstInterpreter(case.selector).matches, messages)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_both_agree(case):
    compiled = compile(case.selector)
    interpreter = AstInterpreter(case.selector)
    for headers in case.messages:
        assert compiled.matches(headers) is interpreter.matches(headers)
