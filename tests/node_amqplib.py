"""Node.js clients (amqplib from the npm registry) for the tests that talk to rtroute from
another language."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def amqplib_script(node_dir: Path, script: str) -> Path:
    """``node_dir/script`` with amqplib installed beside it (``npm install`` once); skips the
    test without node and npm, or fails it when ``RTROUTE_REQUIRE_BROKER=1``."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        if os.environ.get("RTROUTE_REQUIRE_BROKER") == "1":
            pytest.fail("node and npm are needed for the Node.js interop test")
        pytest.skip("no node/npm")
    if not (node_dir / "node_modules" / "amqplib").is_dir():
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--silent"], cwd=node_dir,
                       check=True, timeout=300)
    return node_dir / script
