#!/usr/bin/env bash
# The main job, on a fresh machine: RabbitMQ up (installed/started if needed), rtroute set up,
# then the rtopic plugin's README example end to end through a real sidecar.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-rabbitmq.sh
bash scripts/setup.sh
exec .venv/bin/rtroute demo "$@"
