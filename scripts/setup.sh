#!/usr/bin/env bash
# Creates .venv (if absent) and installs rtroute with its native core and the test, bench,
# spark and docs extras (pyspark needs Java 17, which this machine kind has).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
RTROUTE_REQUIRE_NATIVE=1 .venv/bin/python -m pip install -q -e ".[test,bench,spark,docs]"
.venv/bin/python -c "import rtroute.core as c; print('rtroute: core implementation =', c.IMPLEMENTATION)"
