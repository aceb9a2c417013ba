"""The deployment examples work as shipped: the systemd unit passes systemd-analyze verify and
uses readiness notification, which rtroute sends (READY=1 once every exchange consumes); the
Kubernetes manifest probes endpoints that exist, and its config passes rtroute's own check. Both
install what scripts/build-dist.sh builds: the unit a venv with the wheel, the manifest the image
of the top-level Dockerfile; nothing under examples/ installs rtroute from PyPI, where it is not."""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rtroute.config.rtroute_toml import ConfigError, loads
from rtroute.ops import sd_notify

from ..processes import systemd_notifications

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "examples" / "deploy"
WHEEL_INSTALL = "/opt/rtroute/venv/bin/rtroute"


def dockerfile_image() -> str:
    """The image name the Dockerfile's header builds (docker build -t NAME .)."""
    (name,) = re.findall(r"docker build -t (\S+) \.", (ROOT / "Dockerfile").read_text())
    return name


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


def test_the_unit_runs_rtroute_from_a_venv_with_the_wheel_installed():
    unit = (DEPLOY / "rtroute.service").read_text()
    (exec_start,) = [x for x in unit.splitlines() if x.startswith("ExecStart=")]
    assert exec_start.startswith(f"ExecStart={WHEEL_INSTALL} run ")
    assert "python3 -m venv /opt/rtroute/venv" in unit
    assert re.search(r"/opt/rtroute/venv/bin/pip install rtroute-\S+\.whl", unit)


def test_the_kubernetes_manifest_runs_the_image_the_dockerfile_builds():
    yaml = pytest.importorskip("yaml")
    docs = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text())}
    container = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == dockerfile_image()
    assert container["command"][:2] == ["rtroute", "run"]  # the image's PATH has its venv


def test_no_example_installs_rtroute_from_pypi():
    """rtroute is not on PyPI: `pip install rtroute` (or a link to its page) cannot work."""
    files = [p for p in (ROOT / "examples").rglob("*") if p.is_file()]
    files.append(ROOT / "Dockerfile")
    assert len(files) > 5
    for path in files:
        text = path.read_text(errors="replace")
        assert not re.search(r"pip install (-\S+ )*[\"']?rtroute(?![-\w])", text), path
        assert "pypi.org/project/rtroute" not in text, path


@pytest.mark.broker
def test_rtroute_run_tells_systemd_it_is_ready(tmp_path, broker_uri, management_uri):
    env = dict(os.environ, RTROUTE_URI=broker_uri, RTROUTE_MANAGEMENT_URI=management_uri)
    ready, stopping, status = systemd_notifications(
        tmp_path, ["run", "--rtopic", "rtroute-test.notify", "--http", "127.0.0.1:0"], env)
    assert ready.startswith(b"READY=1")
    assert (stopping, status) == (b"STOPPING=1", 0)


@pytest.mark.parametrize("manifest", ["kubernetes.yaml", "kubernetes-proxy.yaml"])
def test_rtroute_config_check_passes_the_shipped_configmaps_and_notes_the_token(
        manifest, tmp_path, monkeypatch):
    """The operator's check of a ConfigMap happens where the Secret is not: the token beyond
    loopback is a note, not an error (before: exit 1 on both shipped manifests)."""
    from click.testing import CliRunner

    from rtroute.cli import main

    yaml = pytest.importorskip("yaml")
    docs = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / manifest).read_text())}
    config = tmp_path / "rtroute.toml"
    config.write_text(docs["ConfigMap"]["data"]["rtroute.toml"])
    monkeypatch.delenv("RTROUTE_HTTP_TOKEN", raising=False)
    monkeypatch.delenv("RTROUTE_HTTP_TOKEN_FILE", raising=False)
    result = CliRunner().invoke(main, ["config", "check", str(config)])
    assert result.exit_code == 0, result.output
    assert f"{config}: OK" in result.output
    assert "beyond loopback: the process needs a token at run time" in result.output
    with_token = CliRunner().invoke(main, ["config", "check", str(config)],
                                    env={"RTROUTE_HTTP_TOKEN": "from-the-secret"})
    assert with_token.exit_code == 0 and "note:" not in with_token.output
