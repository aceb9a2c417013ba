"""The benchmark harness's process CPU meter (Linux /proc)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from rtroute.bench.measure import CpuMeter, find_process, process_cpu_seconds

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_cpu_seconds_grow_with_work_done():
    before = process_cpu_seconds(os.getpid())
    total = 0
    for i in range(2_000_000):
        total += i * i
    after = process_cpu_seconds(os.getpid())
    assert before is not None and after is not None and after > before


def test_meter_reports_per_process_and_none_for_unknown():
    meter = CpuMeter(me=os.getpid(), absent=None, gone=2**22 + 12345)
    meter.start()
    sum(i * i for i in range(1_000_000))
    used = meter.stop()
    assert used["me"] > 0 and used["absent"] is None and used["gone"] is None


def test_find_process_by_command_name():
    name = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    assert find_process(name) is not None
    assert find_process("rtroute-no-such-command") is None
