"""`rtroute bench proxy` reports the proxy's CPU per message from /proc."""
from __future__ import annotations

import os
import sys

import pytest

from rtroute.bench.proxy import SHAPES, cpu_seconds


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_cpu_seconds_grow_with_the_work_a_process_does():
    before = cpu_seconds(os.getpid())
    total = 0
    while cpu_seconds(os.getpid()) - before < 0.05:
        total += sum(range(10_000))
    assert total > 0


def test_a_process_that_is_gone_has_used_nothing():
    assert cpu_seconds(2 ** 22 + 1) == 0.0  # above Linux's largest pid


def test_the_shapes_are_the_four_one_queue_keys_and_ten_queues():
    assert [(s.rtopic_key, s.matched) for s in SHAPES] == [
        ("hit.app1.mod1.t0", 1), ("*.app1.mod1.t0", 1), ("hit.#", 1), ("#.t0", 1),
        ("hit.app1.mod1.*", 10)]
