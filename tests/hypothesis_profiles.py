"""How many examples the property tests try: a profile per use, chosen by ``RTROUTE_HYPOTHESIS``.

- ``quick`` (the default of a bare ``pytest``): a fifth of each test's budget, at least 10
  examples: the property tests run in seconds while developing;
- ``ci`` (``scripts/test.sh``, so CI and the README's test command): each test's full budget,
  the number it names (``max_examples=examples(600)``), chosen for how much input space it
  covers; a new seed every run, so runs add up;
- ``thorough``: five times the budget, for a hunt after a change to the native core, the
  selector or the AMQP codecs (``RTROUTE_HYPOTHESIS=thorough pytest -m "not broker" tests/core``).

A test without its own budget gets Hypothesis' 100 examples scaled the same way. The profiles
also set no deadline (a loaded CI machine is no reason to fail a property) and print the
statistics of a failing run's seed, so a failure found in CI can be replayed locally with
``--hypothesis-seed``.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SCALES = {"quick": 0.2, "ci": 1.0, "thorough": 5.0}
PROFILE = os.environ.get("RTROUTE_HYPOTHESIS", "quick")
if PROFILE not in SCALES:
    raise RuntimeError(f"RTROUTE_HYPOTHESIS={PROFILE!r}: expected one of {', '.join(SCALES)}")
SCALE = SCALES[PROFILE]


def examples(budget: int) -> int:
    """The number of examples a test with this ``budget`` (its CI number) tries now."""
    return max(10, round(budget * SCALE))


for _name, _scale in SCALES.items():
    settings.register_profile(_name, max_examples=max(10, round(100 * _scale)),
                              deadline=None, print_blob=True,
                              suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(PROFILE)
