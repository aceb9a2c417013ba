"""One ops port per role wherever a user reads one (docs/operations.md, "Ops ports"): 8419 the
sidecar, 8420 shovels, 8421 the proxy. Before, the same role had 8419, 9420 or 9421 depending on
the file (the proxy's page said 9420, its systemd unit and manifest 9421, the sidecar's manifest
9420, shovels 9420 and 8419)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROLE_PORTS = {"sidecar": 8419, "shovel": 8420, "proxy": 8421}
# files that speak of one role only
FILES = {
    "examples/deploy/kubernetes.yaml": "sidecar",
    "examples/deploy/rtroute.service": "sidecar",
    "docs/sidecar.md": "sidecar",
    "examples/shovel.toml": "shovel",
    "docs/shovels.md": "shovel",
    "examples/deploy/kubernetes-proxy.yaml": "proxy",
    "examples/deploy/rtroute-proxy.service": "proxy",
    "docs/proxy.md": "proxy",
}
# an ops port: --http HOST:PORT, http/listen = "HOST:PORT" in TOML, a container port, a probe
_OPS_PORT = re.compile(r"(?:--http[ =]|\bhttp = \"|\blisten = \"|127\.0\.0\.1:|0\.0\.0\.0:|"
                       r"containerPort: )(?:[\w.\[\]:]*:)?(8\d{3}|9\d{3})\b")


def _ports(text: str) -> set[int]:
    return {int(p) for p in _OPS_PORT.findall(text)}


@pytest.mark.parametrize(("path", "role"), sorted(FILES.items()))
def test_a_roles_files_name_its_ops_port_only(path, role):
    ports = _ports((ROOT / path).read_text())
    assert ports <= {ROLE_PORTS[role]}, f"{path}: {sorted(ports)}, the {role}'s port is " \
        f"{ROLE_PORTS[role]}"


def test_the_image_exposes_each_roles_port_and_nothing_of_the_old_numbering():
    dockerfile = (ROOT / "Dockerfile").read_text()
    (exposed,) = re.findall(r"^EXPOSE (.*)$", dockerfile, re.MULTILINE)
    assert {int(p) for p in exposed.split()} == {5680, *ROLE_PORTS.values()}
    shipped = [ROOT / "Dockerfile", ROOT / "README.md", *ROOT.glob("docs/*.md"),
               *ROOT.glob("examples/**/*.*"), *ROOT.glob("rtroute/**/*.py")]
    for path in shipped:
        assert not {9420, 9421} & _ports(path.read_text()), path
