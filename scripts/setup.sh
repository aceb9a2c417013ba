#!/usr/bin/env bash
# Creates .venv (if absent) and installs rtroute with its native core and the extras named,
# by default test, bench, spark and docs (pyspark needs Java 17, which this machine kind has):
#   scripts/setup.sh            everything the tests need
#   scripts/setup.sh ""         rtroute alone (what scripts/demo.sh needs: no pyspark)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
EXTRAS=${1-test,bench,spark,docs}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
RTROUTE_REQUIRE_NATIVE=1 .venv/bin/python -m pip install -q -e ".${EXTRAS:+[$EXTRAS]}"
.venv/bin/python -c "import rtroute.core as c; print('rtroute: core implementation =', c.IMPLEMENTATION)"
# the package's bytecode, as a non-editable install writes it: where PYTHONDONTWRITEBYTECODE is
# set (as on this machine kind), every `python -m rtroute.cli` the tests and benches start would
# otherwise compile rtroute's sources again (~0.1 s of CPU each; rtroute bench scale's start
# times are a user's, who has the bytecode). Stale files are ignored: Python checks the sources'
# times.
.venv/bin/python -m compileall -q -j 0 rtroute >/dev/null
