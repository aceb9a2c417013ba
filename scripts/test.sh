#!/usr/bin/env bash
# The test command: broker up (installed/started/plugins enabled), venv + native build, then
#   1. the whole suite against the local RabbitMQ 3.x (127.0.0.1:5672), the tests against the
#      real broker included;
#   2. the broker-facing tests (pytest -m broker) again against RabbitMQ 4.x, the node of
#      scripts/start-rabbitmq4.sh (127.0.0.1:5673, management 15673), through RTROUTE_TEST_URI,
#      RTROUTE_TEST_MANAGEMENT_URI and RTROUTE_TEST_RABBITMQCTL (see tests/conftest.py).
# Extra arguments go to both pytest runs; a -m EXPR among them narrows the 4.x run to
# "broker and (EXPR)". When the 4.x node cannot run on this machine (no root, no Debian mirror
# for its chroot) run 2 is skipped with the reason, or fails when RTROUTE_REQUIRE_BROKER4=1
# (CI sets it). The status is non-zero when either run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-rabbitmq.sh
bash scripts/setup.sh
make -C src_c test valgrind
# the sdist builds and passes on the oldest and newest claimed Python (a Python this machine
# lacks is skipped with a message rather than failing the whole run)
RTROUTE_SDIST_ALLOW_MISSING=1 bash scripts/check-sdist.sh
export RTROUTE_EXPECT_NATIVE=1 RTROUTE_REQUIRE_BROKER=1 RTROUTE_REQUIRE_SPARK=1
unset RTROUTE_TEST_URI RTROUTE_TEST_MANAGEMENT_URI RTROUTE_TEST_RABBITMQCTL

say() { echo "rtroute: $*"; }
status=0

# The 4.x node starts first: run 1 uses its management API as "another broker's" too.
start4=0
bash scripts/start-rabbitmq4.sh || start4=$?

say "run 1: the tests against RabbitMQ 3.x on 127.0.0.1:5672"
SECONDS=0
.venv/bin/python -m pytest "$@" || status=$?
say "run 1 took ${SECONDS} s (pytest status $status)"

broker_args=()
marker=broker
while [ $# -gt 0 ]; do
    case $1 in
        -m) marker="broker and (${2:?-m needs an expression})"; shift 2 ;;
        -m*) marker="broker and (${1#-m})"; shift ;;
        *) broker_args+=("$1"); shift ;;
    esac
done

case $start4 in
    0)
        ctl="chroot ${RABBITMQ4_ROOT:-/srv/trixie} rabbitmqctl -n rabbit4@localhost"
        [ "$(id -u)" = 0 ] || ctl="sudo -n $ctl"
        say "run 2: the broker tests ($marker) against RabbitMQ 4.x on 127.0.0.1:5673"
        SECONDS=0
        run2=0
        RTROUTE_TEST_URI="amqp://guest:guest@127.0.0.1:5673/%2F" \
            RTROUTE_TEST_MANAGEMENT_URI="http://127.0.0.1:15673/" \
            RTROUTE_TEST_RABBITMQCTL="$ctl" \
            .venv/bin/python -m pytest -m "$marker" ${broker_args[@]+"${broker_args[@]}"} \
            || run2=$?
        say "run 2 took ${SECONDS} s (pytest status $run2)"
        case $run2 in
            0) ;;
            5) say "run 2: no broker test among the selected ones" ;;
            *) status=$run2 ;;
        esac
        ;;
    3|4)
        if [ "${RTROUTE_REQUIRE_BROKER4:-0}" = 1 ]; then
            say "FAILED: RabbitMQ 4.x cannot run on this machine (scripts/start-rabbitmq4.sh" \
                "said why above) and RTROUTE_REQUIRE_BROKER4=1 requires its test run" >&2
            status=1
        else
            say "SKIPPED run 2 (the broker tests against RabbitMQ 4.x): it cannot run on this" \
                "machine, scripts/start-rabbitmq4.sh said why above" >&2
        fi
        ;;
    *)
        say "FAILED: scripts/start-rabbitmq4.sh could not start RabbitMQ 4.x (status $start4)" >&2
        status=1
        ;;
esac
exit "$status"
