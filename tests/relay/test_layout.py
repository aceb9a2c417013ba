"""The relay package's shape: imports point down to amqp/ only, the package loads lazily (no
pika until a name is used), and modules and classes stay small."""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import rtroute.relay

RELAY = pathlib.Path(rtroute.relay.__file__).parent


def test_importing_the_package_imports_no_pika_and_each_name_loads_its_module():
    code = ("import sys, rtroute.relay as relay\n"
            "assert not [m for m in sys.modules if m.split('.')[0] == 'pika']\n"
            "from rtroute.relay import Relay\n"
            "from rtroute.relay.engine import Relay as defined\n"
            "assert Relay is defined and all(getattr(relay, n) for n in relay.__all__)\n"
            "print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.stdout.strip() == "ok", done.stderr


def test_the_relay_imports_only_amqp_and_itself_from_rtroute():
    """From rtroute: amqp/, the relay itself, and lazy_exports (what lazy packages share)."""
    for path in RELAY.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and \
                    node.module.startswith("rtroute"):
                assert node.module.split(".")[1] in ("amqp", "relay", "lazy_exports"), \
                    (path.name, node.module)


def test_no_module_over_600_lines_and_no_class_over_25_methods():
    for path in RELAY.glob("*.py"):
        text = path.read_text()
        assert text.count("\n") <= 600, path.name
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                methods = [n for n in node.body
                           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
                assert len(methods) <= 25, (path.name, node.name, len(methods))
