"""/metrics is the Prometheus text format as prometheus_client writes it: a Prometheus parser
reads it; process metrics, rtroute_build_info, vhost labels and the confirm latency histogram
are there."""
from __future__ import annotations

import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.broker


def test_a_prometheus_parser_reads_metrics_with_process_build_vhost_and_latency(
        sidecars, managed, channel):
    name = managed("metrics")
    sc = sidecars("--rtopic", name)
    sc.wait_running(name)
    channel.queue_declare(f"{name}.q", exclusive=True)
    channel.queue_bind(f"{name}.q", f"{name}.bindings", "a.b")
    sc.wait_running(name, bindings=1)
    for _ in range(5):
        channel.basic_publish(name, "a.*", b"m")
    deadline = time.monotonic() + 15
    while sc.exchange(name).get("republished", 0) < 5:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with urllib.request.urlopen(f"http://127.0.0.1:{sc.port}/metrics", timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {"process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds",
            "python_info", "rtroute_build_info"} <= set(families)
    build = families["rtroute_build_info"].samples[0]
    assert build.labels["core"] == "native" and build.value == 1
    received = [s for s in families["rtroute_exchange_received"].samples
                if s.labels.get("exchange") == name and s.name.endswith("_total")]
    assert received[0].labels["vhost"] == "/" and received[0].value == 5
    latency = families["rtroute_exchange_confirm_latency_seconds"]
    assert latency.type == "histogram"
    count = [s for s in latency.samples
             if s.name.endswith("_count") and s.labels["exchange"] == name]
    assert count[0].value == 5
    inf = [s for s in latency.samples if s.name.endswith("_bucket")
           and s.labels["exchange"] == name and s.labels["le"] == "+Inf"]
    assert inf[0].value == 5
