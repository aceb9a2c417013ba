#!/usr/bin/env bash
# The test command: broker up (installed/started/plugins enabled), venv + native build, then
# the whole suite, including the tests against the real broker. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-rabbitmq.sh
bash scripts/setup.sh
make -C src_c test valgrind
RTROUTE_EXPECT_NATIVE=1 RTROUTE_REQUIRE_BROKER=1 RTROUTE_REQUIRE_SPARK=1 exec .venv/bin/python -m pytest "$@"
