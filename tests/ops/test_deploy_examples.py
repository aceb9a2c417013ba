"""The deployment examples work as shipped: the systemd unit passes systemd-analyze verify and
uses readiness notification, which rtroute sends (READY=1 once every exchange consumes); the
Kubernetes manifest probes endpoints that exist, and its config passes rtroute's own check."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rtroute import sd_notify
from rtroute.config import ConfigError, loads

from ..processes import systemd_notifications

DEPLOY = Path(__file__).resolve().parents[2] / "examples" / "deploy"


def test_the_systemd_unit_verifies(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("no systemd-analyze")
    rtroute = Path(sys.executable).with_name("rtroute")
    unit = (DEPLOY / "rtroute.service").read_text()
    assert "Type=notify" in unit and "EnvironmentFile=" in unit
    (tmp_path / "rtroute.service").write_text(
        unit.replace("/opt/rtroute/venv/bin/rtroute", str(rtroute)))
    done = subprocess.run([analyze, "verify", str(tmp_path / "rtroute.service")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_sd_notify_reaches_the_socket_systemd_names(tmp_path, monkeypatch):
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(path))
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        assert sd_notify.notify("READY=1")
        assert server.recv(100) == b"READY=1"
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert not sd_notify.notify("READY=1")  # not under systemd: nothing, no error


def test_the_kubernetes_manifest_probes_livez_and_readyz_with_two_replicas(monkeypatch):
    yaml = pytest.importorskip("yaml")
    docs = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text())}
    spec = docs["Deployment"]["spec"]
    assert spec["replicas"] == 2
    container = spec["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    config = docs["ConfigMap"]["data"]["rtroute.toml"]
    assert "RTROUTE_HTTP_TOKEN" in docs["Secret"]["stringData"]
    loads(config, "rtroute.toml", token_given=True)  # the Secret gives the token
    monkeypatch.delenv("RTROUTE_HTTP_TOKEN", raising=False)
    monkeypatch.delenv("RTROUTE_HTTP_TOKEN_FILE", raising=False)
    with pytest.raises(ConfigError, match="a token is required"):
        loads(config, "rtroute.toml")  # and without one, it says so at check time
    monkeypatch.setenv("RTROUTE_HTTP_TOKEN", "from-the-secret")
    loads(config, "rtroute.toml")


@pytest.mark.broker
def test_rtroute_run_tells_systemd_it_is_ready(tmp_path, broker_uri, management_uri):
    env = dict(os.environ, RTROUTE_URI=broker_uri, RTROUTE_MANAGEMENT_URI=management_uri)
    ready, stopping, status = systemd_notifications(
        tmp_path, ["run", "--rtopic", "rtroute-test.notify", "--http", "127.0.0.1:0"], env)
    assert ready.startswith(b"READY=1")
    assert (stopping, status) == (b"STOPPING=1", 0)
