#!/usr/bin/env bash
# The test command: brokers up (installed/started/plugins enabled), venv + native build, the
# native core under valgrind, the sdist check, then the suite in four legs:
#
#   unit  the tests that need no broker under test (pytest -m "not broker"): unit, property
#         (Hypothesis' "ci" profile, tests/hypothesis_profiles.py), CLI, Spark, the 3-node
#         cluster tests (nodes of their own) -- once, since no broker changes them;
#   4.3   the whole broker tier (pytest -m broker) against RabbitMQ 4.3.x, the newest broker
#         claimed and the one the x-rtopic plugin cannot run on: node rabbit43@localhost of
#         scripts/start-rabbitmq4.sh 4.3 (127.0.0.1:5674, management 15674);
#   4.0   the broker tests marked every_broker (pytest -m "broker and every_broker": every
#         test of a loss or security property, every test whose rule differs by version, one
#         end-to-end test per component; see tests/conftest.py) against RabbitMQ 4.0.x, node
#         rabbit4@localhost of scripts/start-rabbitmq4.sh (127.0.0.1:5673, management 15673);
#   3.10  the same every_broker tests against the host's RabbitMQ 3.x (127.0.0.1:5672).
# Each broker leg reaches its broker through RTROUTE_TEST_URI, RTROUTE_TEST_MANAGEMENT_URI and
# RTROUTE_TEST_RABBITMQCTL (see tests/conftest.py).
#
# Usage: scripts/test.sh [--leg unit|4.3|4.0|3.10]... [PYTEST ARGS]
#   --leg runs only the legs named (default: all four, in the order above; the broker legs
#   skip the valgrind and sdist steps unless the unit leg runs too). Extra arguments go to
#   every leg's pytest; a -m EXPR among them narrows each leg to "LEG'S MARKER and (EXPR)".
# A 4.x node that cannot run on this machine (no root, no Debian mirror for its chroot) skips
# its leg with the reason, or fails the run when RTROUTE_REQUIRE_BROKER4=1 (CI sets it).
# The status is non-zero when any leg fails. Each leg's wall time is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

legs=()
pytest_args=()
expr=""
while [ $# -gt 0 ]; do
    case $1 in
        --leg) legs+=("${2:?--leg needs unit, 4.3, 4.0 or 3.10}"); shift 2 ;;
        --leg=*) legs+=("${1#--leg=}"); shift ;;
        -m) expr=${2:?-m needs an expression}; shift 2 ;;
        -m*) expr=${1#-m}; shift ;;
        *) pytest_args+=("$1"); shift ;;
    esac
done
[ ${#legs[@]} -gt 0 ] || legs=(unit 4.3 4.0 3.10)
for leg in "${legs[@]}"; do
    case $leg in unit|4.3|4.0|3.10) ;; *)
        echo "usage: $0 [--leg unit|4.3|4.0|3.10]... [PYTEST ARGS] (unknown leg '$leg')" >&2
        exit 2 ;;
    esac
done
wants() { local l; for l in "${legs[@]}"; do [ "$l" = "$1" ] && return 0; done; return 1; }

say() { echo "rtroute: $*"; }
status=0
times=()
mkdir -p .test-logs

# The 4.x nodes start in the background while the venv and the native core are built (each
# writes its own log; a node that already answers is left as it is).
declare -A node_pid=()
for series in 4.3 4.0; do
    if wants "$series"; then
        bash scripts/start-rabbitmq4.sh "$series" >".test-logs/start-rabbitmq-$series.log" 2>&1 &
        node_pid[$series]=$!
    fi
done

SECONDS=0
bash scripts/ensure-rabbitmq.sh
bash scripts/setup.sh
times+=("setup (3.x broker, venv, native build): ${SECONDS} s")
if wants unit; then
    SECONDS=0
    make -C src_c test valgrind
    # the sdist builds and passes on the oldest and newest claimed Python (a Python this
    # machine lacks is skipped with a message rather than failing the whole run)
    RTROUTE_SDIST_ALLOW_MISSING=1 bash scripts/check-sdist.sh
    times+=("native core under valgrind, sdist check: ${SECONDS} s")
fi

export RTROUTE_EXPECT_NATIVE=1 RTROUTE_REQUIRE_BROKER=1 RTROUTE_REQUIRE_SPARK=1 RTROUTE_REQUIRE_DOCS=1
export RTROUTE_HYPOTHESIS=${RTROUTE_HYPOTHESIS:-ci}
unset RTROUTE_TEST_URI RTROUTE_TEST_MANAGEMENT_URI RTROUTE_TEST_RABBITMQCTL

marker_for() {   # marker_for BASE: BASE, narrowed by the -m EXPR given to this script
    if [ -n "$expr" ]; then echo "$1 and ($expr)"; else echo "$1"; fi
}

# run_leg NAME MARKER [ENV=VALUE...]: pytest with that marker and environment
run_leg() {
    local name=$1 marker=$2 rc=0
    shift 2
    say "leg $name: pytest -m \"$marker\""
    SECONDS=0
    env "$@" .venv/bin/python -m pytest -m "$marker" ${pytest_args[@]+"${pytest_args[@]}"} \
        || rc=$?
    times+=("leg $name: ${SECONDS} s (pytest status $rc)")
    case $rc in
        0) ;;
        5) say "leg $name: no test among the selected ones" ;;
        *) status=$rc ;;
    esac
}

# broker_leg SERIES MARKER: a leg against the 4.x node of that series, once it is up
broker_leg() {
    local series=$1 marker=$2 started=0 port mgmt ctl
    wait "${node_pid[$series]}" || started=$?
    sed 's/^/  /' ".test-logs/start-rabbitmq-$series.log"
    case $series in
        4.3) port=5674 mgmt=15674 ctl="chroot ${RABBITMQ43_ROOT:-/srv/sid} rabbitmqctl -n rabbit43@localhost" ;;
        4.0) port=5673 mgmt=15673 ctl="chroot ${RABBITMQ4_ROOT:-/srv/trixie} rabbitmqctl -n rabbit4@localhost" ;;
    esac
    [ "$(id -u)" = 0 ] || ctl="sudo -n $ctl"
    case $started in
        0)
            run_leg "$series" "$marker" \
                RTROUTE_TEST_URI="amqp://guest:guest@127.0.0.1:$port/%2F" \
                RTROUTE_TEST_MANAGEMENT_URI="http://127.0.0.1:$mgmt/" \
                RTROUTE_TEST_RABBITMQCTL="$ctl"
            ;;
        3|4)
            if [ "${RTROUTE_REQUIRE_BROKER4:-0}" = 1 ]; then
                say "FAILED: RabbitMQ $series cannot run on this machine (scripts/start-rabbitmq4.sh" \
                    "$series said why above) and RTROUTE_REQUIRE_BROKER4=1 requires its leg" >&2
                status=1
            else
                say "SKIPPED leg $series: RabbitMQ $series cannot run on this machine" \
                    "(scripts/start-rabbitmq4.sh $series said why above)" >&2
            fi
            ;;
        *)
            say "FAILED: scripts/start-rabbitmq4.sh $series could not start its node (status $started)" >&2
            status=1
            ;;
    esac
}

if wants unit; then run_leg unit "$(marker_for "not broker")"; fi
if wants 4.3; then broker_leg 4.3 "$(marker_for broker)"; fi
if wants 4.0; then broker_leg 4.0 "$(marker_for "broker and every_broker")"; fi
if wants 3.10; then run_leg 3.10 "$(marker_for "broker and every_broker")"; fi

say "wall time of each part:"
for line in "${times[@]}"; do say "  $line"; done
exit "$status"
