"""Counters are declared once and reach /status and /metrics alike (no broker: the sidecar is
built, not run)."""
from __future__ import annotations

from rtroute.config.rtroute_toml import ExchangeConfig
from rtroute.divert.table import DIVERT_COUNTERS
from rtroute.sidecar.service import EXCHANGE_COUNTERS, ExchangeState, Sidecar


def test_every_exchange_counter_is_in_status_and_metrics_returned_included():
    sidecar = Sidecar("amqp://guest:guest@127.0.0.1:1/%2F",
                      [ExchangeConfig(name="rtroute-test.counters")], use_management=False)
    counters = sidecar.exchanges["rtroute-test.counters"].counters
    for i, name in enumerate(EXCHANGE_COUNTERS, start=1):
        setattr(counters, name, i)
    status = sidecar.status()
    (exchange,) = status["exchanges"]
    metrics = status["metrics"]
    assert "returned" in EXCHANGE_COUNTERS
    for i, name in enumerate(EXCHANGE_COUNTERS, start=1):
        assert exchange[name] == i
        (sample,) = metrics[f"rtroute_exchange_{name}_total"]["samples"]
        assert sample[1] == i
    assert "rtroute_exchange_bindings_disagreements_total" in metrics
    for name in DIVERT_COUNTERS:
        assert f"rtroute_divert_{name}_total" in metrics


def test_exchange_states_show_as_their_plain_names():
    sidecar = Sidecar("amqp://guest:guest@127.0.0.1:1/%2F",
                      [ExchangeConfig(name="rtroute-test.states")], use_management=False)
    exchange = sidecar.exchanges["rtroute-test.states"]
    assert sidecar.status()["exchanges"][0]["state"] == "starting"
    exchange.set_state(ExchangeState.RECONNECTING)
    assert sidecar.status()["exchanges"][0]["state"] == "reconnecting"


def test_the_counters_slots_are_typed_as_the_registry_says():
    """``Counters`` declares each slot's type for mypy (tests/test_typecheck.py): the same names
    as EXCHANGE_COUNTERS, in its order, so a counter added there is typed too."""
    from rtroute.sidecar.status import Counters

    assert list(Counters.__annotations__) == list(EXCHANGE_COUNTERS)
    assert Counters.__slots__ == tuple(EXCHANGE_COUNTERS)
