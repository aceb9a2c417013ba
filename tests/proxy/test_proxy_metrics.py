"""The proxy's ``/metrics`` from a snapshot (no broker): every refusal kind has its series from
the start, so a rate or an alert on ``rtroute_proxy_refusals_total`` has data before the first
refusal (before, the family had no sample until one happened)."""
from __future__ import annotations

from types import SimpleNamespace

from rtroute.ops.metrics import render
from rtroute.proxy.ops import proxy_metrics
from rtroute.proxy.server import REFUSAL_KINDS, ProxyStats


def test_every_refusal_kind_is_a_series_at_zero_from_the_start():
    server = SimpleNamespace(stats=ProxyStats(), sessions=[], catalog=SimpleNamespace(vhosts={}))
    text = render(proxy_metrics(server, ready=True), process=False)
    for kind in REFUSAL_KINDS:
        assert f'rtroute_proxy_refusals_total{{kind="{kind}"}} 0.0' in text
    server.stats.refused("handshake_timeout")
    text = render(proxy_metrics(server, ready=True), process=False)
    assert 'rtroute_proxy_refusals_total{kind="handshake_timeout"} 1.0' in text
