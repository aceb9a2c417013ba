"""What a user installs without this checkout: scripts/build-dist.sh's wheels, the Dockerfile
that installs one, and its .dockerignore.

The slow test runs the script in its fast mode (one Python, no demo: about 50 s): the sdist from
a clean copy, the wheel from the sdist, auditwheel's manylinux tag, twine check, and the wheel
pip-installed into a fresh venv with no compiler on PATH, native core and CLI working there.
The Dockerfile cannot be built here (no container engine): its tests read it.
"""
from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """The Dockerfile's (INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    lines = [x.strip() for x in text.splitlines() if x.strip() and not x.lstrip().startswith("#")]
    return [(x.split(None, 1)[0].upper(), x.split(None, 1)[1]) for x in lines]


def _runtime_stage() -> list[tuple[str, str]]:
    instructions = _instructions()
    last_from = max(i for i, (name, _) in enumerate(instructions) if name == "FROM")
    return instructions[last_from:]


@pytest.mark.slow
def test_the_fast_mode_builds_a_manylinux_wheel_that_installs_without_a_compiler(
        tmp_path, project):
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    claimed = [c.rsplit(":: ", 1)[1] for c in project["project"]["classifiers"]
               if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    if version not in claimed:
        pytest.skip(f"Python {version} is not claimed ({claimed})")
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    # this interpreter's python3.X first on PATH: the script builds with the Python under test
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               TMPDIR=str(tmp_path))
    env.pop("RTROUTE_DIST_KEEP", None)
    out = tmp_path / "dist"
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-dist.sh"), "--python", version, "--no-demo",
         "--outdir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    tag = "cp" + version.replace(".", "")
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    assert sdist.name == f"rtroute-{project['project']['version']}.tar.gz"
    assert re.fullmatch(
        rf"rtroute-{re.escape(project['project']['version'])}-{tag}-{tag}-"
        rf"(\w+\.)*manylinux_2_\d+_{platform.machine()}(\.\w+)*\.whl", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as whl:
        assert [n for n in whl.namelist() if re.fullmatch(r"rtroute/core/_native\..*\.so", n)]
    assert f"Python {version}: wheel installs with no compiler, native core, --version, route" \
        in done.stdout, done.stdout
    assert "twine check --strict: 2 files passed" in done.stdout


def test_the_script_refuses_a_python_not_claimed(tmp_path):
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-dist.sh"), "--python", "2.7", "--outdir",
         str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert done.returncode != 0
    assert "--python 2.7: pyproject.toml claims" in done.stderr


def test_the_demo_runs_only_against_the_broker_named_with_demo(tmp_path):
    """``rtroute demo`` declares and deletes objects on a broker: the script runs it only with
    ``--demo URI`` (before: by default, against whatever answered on 127.0.0.1:5672)."""
    script = (ROOT / "scripts" / "build-dist.sh").read_text()
    assert "/dev/tcp/127.0.0.1/5672" not in script
    done = subprocess.run(["bash", str(ROOT / "scripts" / "build-dist.sh"), "--demo"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "--demo needs the AMQP URI of a broker to run it against" in done.stderr


def test_the_image_is_built_from_the_wheel_and_runs_rtroute_as_a_non_root_user(project):
    instructions = _instructions()
    stages = [args for name, args in instructions if name == "FROM"]
    assert len(stages) == 2 and stages[0].endswith(" AS build"), stages
    runtime = dict(_runtime_stage())
    assert re.fullmatch(r"python:\$\{PYTHON\}-slim|python:3\.\d+-slim", runtime["FROM"])
    copies = [args for name, args in _runtime_stage() if name == "COPY"]
    assert copies == ["--from=build /dist/*.whl /tmp/"]  # the wheel, nothing of the checkout
    assert "pip install --no-cache-dir /tmp/rtroute-*.whl" in runtime["RUN"]
    assert "IMPLEMENTATION == 'native'" in runtime["RUN"]  # the image refuses the fallback
    user = runtime["USER"].split(":")[0]
    assert user not in ("root", "0")
    assert f"--uid {user} " in runtime["RUN"]  # the numeric user exists (runAsNonRoot checks it)
    assert runtime["ENTRYPOINT"] == '["rtroute"]' and runtime["CMD"] == '["--help"]'
    build = dict(instructions[:instructions.index(("FROM", stages[1]))])
    assert "RTROUTE_REQUIRE_NATIVE=1 python -m build" in build["RUN"]
    version = project["project"]["version"]
    assert f"org.opencontainers.image.version=\"{version}\"" in runtime["LABEL"]
    assert f"docker build -t rtroute:{version} ." in DOCKERFILE.read_text()


def test_the_image_exposes_the_ports_the_kubernetes_examples_use():
    yaml = pytest.importorskip("yaml")
    exposed = {int(p) for p in dict(_runtime_stage())["EXPOSE"].split()}
    for manifest in ("kubernetes.yaml", "kubernetes-proxy.yaml"):
        docs = yaml.safe_load_all((ROOT / "examples" / "deploy" / manifest).read_text())
        (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert {p["containerPort"] for p in container["ports"]} <= exposed, manifest


def test_the_dockerfile_says_what_was_verified_and_what_was_not():
    header = DOCKERFILE.read_text().split("\nARG ", 1)[0]
    assert "What was verified, and what was not" in header
    assert "NEVER been built" in header and "scripts/build-dist.sh" in header


def test_the_docker_context_leaves_out_venvs_and_build_products():
    ignored = {x.strip() for x in (ROOT / ".dockerignore").read_text().splitlines()
               if x.strip() and not x.startswith("#")}
    assert {".git", ".venv", "**/*.so", "rtroute/core/_native.c", "*.egg-info", "build",
            "dist"} <= ignored
    # and nothing the sdist needs
    assert not ignored & {"src_c", "rtroute", "setup.py", "pyproject.toml", "MANIFEST.in",
                          "README.md", "LICENSE", "examples"}
