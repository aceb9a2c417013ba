"""The proxy's deployment examples work as shipped: the systemd unit passes systemd-analyze
verify, keeps the broker's credentials out of argv and uses readiness notification, which
`rtroute proxy` sends; the Kubernetes manifest probes the endpoints the config opens, and its
command and config pass rtroute's own checks. The unit runs rtroute from a venv with the wheel
installed, the manifest the image of the top-level Dockerfile (as the sidecar's examples)."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rtroute.config.lines import ConfigError
from rtroute.ops.netaddr import free_port, split_listen
from rtroute.proxy.commands import proxy
from rtroute.proxy.config import loads_proxy_settings

from ..processes import systemd_notifications

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "examples" / "deploy"


def exec_start() -> list[str]:
    unit = (DEPLOY / "rtroute-proxy.service").read_text()
    line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def test_the_proxy_unit_verifies_and_keeps_credentials_out_of_argv(tmp_path):
    unit = (DEPLOY / "rtroute-proxy.service").read_text()
    assert "Type=notify" in unit and "EnvironmentFile=" in unit
    command = exec_start()
    assert command[1] == "proxy" and not any(a.startswith("--uri") for a in command)
    assert command[0] == "/opt/rtroute/venv/bin/rtroute"  # the wheel's install, as the comment says
    assert re.search(r"/opt/rtroute/venv/bin/pip install rtroute-\S+\.whl", unit)
    proxy.make_context("proxy", command[2:])  # every option exists and parses
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("no systemd-analyze")
    rtroute = Path(sys.executable).with_name("rtroute")
    (tmp_path / "rtroute-proxy.service").write_text(unit.replace(command[0], str(rtroute)))
    done = subprocess.run([analyze, "verify", str(tmp_path / "rtroute-proxy.service")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_kubernetes_manifest_probes_the_endpoint_its_config_opens(tmp_path, monkeypatch):
    yaml = pytest.importorskip("yaml")
    docs = {d["kind"]: d for d in yaml.safe_load_all(
        (DEPLOY / "kubernetes-proxy.yaml").read_text())}
    secret = docs["Secret"]["stringData"]
    assert {"RTROUTE_URI", "RTROUTE_HTTP_TOKEN"} <= set(secret)
    config = docs["ConfigMap"]["data"]["rtroute.toml"]
    settings = loads_proxy_settings(config, "rtroute.toml", token_given=True)
    monkeypatch.delenv("RTROUTE_HTTP_TOKEN", raising=False)
    monkeypatch.delenv("RTROUTE_HTTP_TOKEN_FILE", raising=False)
    with pytest.raises(ConfigError, match="a token is required"):
        loads_proxy_settings(config, "rtroute.toml")  # without the Secret, it says so

    pod = docs["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["envFrom"] == [{"secretRef": {"name": docs["Secret"]["metadata"]["name"]}}]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["ops"] == split_listen(settings.http)[1]
    assert ports["amqp"] == split_listen(settings.listen[0])[1]
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "ops"}
    service = docs["Service"]["spec"]
    assert service["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]
    assert [p["targetPort"] for p in service["ports"]] == ["amqp"]

    (image,) = re.findall(r"docker build -t (\S+) \.", (ROOT / "Dockerfile").read_text())
    assert container["image"] == image
    command = container["command"]
    assert command[:2] == ["rtroute", "proxy"] and "--uri" not in command
    config_path = tmp_path / "rtroute.toml"
    config_path.write_text(config)
    args = [str(config_path) if a == "/etc/rtroute/rtroute.toml" else a for a in command[2:]]
    proxy.make_context("proxy", args)


@pytest.mark.broker
def test_rtroute_proxy_tells_systemd_it_is_ready(tmp_path, broker_uri, management_uri):
    port = free_port()
    env = dict(os.environ, RTROUTE_URI=broker_uri, RTROUTE_MANAGEMENT_URI=management_uri)
    ready, stopping, status = systemd_notifications(
        tmp_path, ["proxy", "--listen", f"127.0.0.1:{port}"], env)
    assert ready == f"READY=1\nSTATUS=listening on 127.0.0.1:{port}".encode()
    assert (stopping, status) == (b"STOPPING=1", 0)
