#!/usr/bin/env bash
# The main job, on a fresh machine: rtroute set up, then the rtopic plugin's README example end
# to end through a real sidecar.
#
#   ./scripts/demo.sh                      the local RabbitMQ on 127.0.0.1:5672, installed,
#                                          started and given its plugins if needed
#   ./scripts/demo.sh --uri URI [--management-uri URL]
#   RTROUTE_URI=URI [RTROUTE_MANAGEMENT_URI=URL] ./scripts/demo.sh
#                                          any other broker, as it is (nothing installed or
#                                          enabled there): it needs the management and event
#                                          exchange plugins; e.g. RabbitMQ 4.3, where the
#                                          x-rtopic plugin cannot start:
#     sudo scripts/start-rabbitmq4.sh 4.3
#     ./scripts/demo.sh --uri amqp://guest:guest@127.0.0.1:5674/%2F \
#                       --management-uri http://127.0.0.1:15674/
set -euo pipefail
cd "$(dirname "$0")/.."
own_broker=${RTROUTE_URI:+1}
for arg in "$@"; do
    case $arg in --uri|--uri=*) own_broker=1 ;; esac
done
if [ -n "$own_broker" ]; then
    echo "rtroute: [1/3] the demo runs against the broker given (--uri or RTROUTE_URI), left as it is"
else
    echo "rtroute: [1/3] the local RabbitMQ on 127.0.0.1:5672: installed, started and given the" \
        "management, event exchange, shovel and consistent hash plugins if it lacks them"
    bash scripts/ensure-rabbitmq.sh
fi
echo "rtroute: [2/3] .venv with rtroute and its native core (no extras: the tests' setup adds them)"
SECONDS=0
bash scripts/setup.sh ""
echo "rtroute: [3/3] the demo (setup took ${SECONDS} s)"
exec .venv/bin/rtroute demo "$@"
