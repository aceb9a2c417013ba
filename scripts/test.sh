#!/usr/bin/env bash
# The test command: brokers up (installed/started/plugins enabled), venv + native build, the
# native core under valgrind, the sdist check, then the suite in four legs (unit, 4.3, 4.0,
# 3.10), or the quick tier alone:
#
#   quick the pure tests for the edit-test loop (the paths in tests/quick.txt, -m "not broker",
#         Hypothesis profile "quick"): no broker, no Spark, under a minute; run only when
#         named (the unit leg holds its tests). Alone, it starts no broker and rebuilds the
#         venv only when it is missing or the native core's sources are newer than the
#         built extension.
#   unit  the tests that need no broker under test (pytest -m "not broker"): unit, property
#         (Hypothesis' "ci" profile, tests/hypothesis_profiles.py), CLI, Spark, the 3-node
#         cluster tests (nodes of their own) -- once, since no broker changes them. Those
#         marked island (a RabbitMQ or Spark cluster of their own, mostly waiting on it) run
#         in a second pytest beside the others (leg unit-islands);
#   4.3   the whole broker tier (pytest -m broker) against RabbitMQ 4.3.x, the newest broker
#         claimed and the one the x-rtopic plugin cannot run on: node rabbit43@localhost of
#         scripts/start-rabbitmq4.sh 4.3 (127.0.0.1:5674, management 15674); beside the
#         valgrind and sdist checks and the unit leg when they run (its output follows);
#   4.0   the broker tests marked every_broker (pytest -m "broker and every_broker": every
#         test of a loss or security property, every test whose rule differs by version, one
#         end-to-end test per component; see tests/conftest.py) against RabbitMQ 4.0.x, node
#         rabbit4@localhost of scripts/start-rabbitmq4.sh (127.0.0.1:5673, management 15673);
#   3.10  the same every_broker tests against the host's RabbitMQ 3.x (127.0.0.1:5672), at the
#         same time as the 4.0 leg when both run (the output of 4.0 follows that of 3.10),
#         with the real x-rtopic plugin's node (../shared/rtopic-plugin, or RTROUTE_SHARED,
#         where present) as the parity suites' live reference.
# Each broker leg reaches its broker through RTROUTE_TEST_URI, RTROUTE_TEST_MANAGEMENT_URI and
# RTROUTE_TEST_RABBITMQCTL (see tests/conftest.py).
#
# Usage: scripts/test.sh [--leg quick|unit|4.3|4.0|3.10]... [PYTEST ARGS]
#   --leg runs only the legs named (default: unit, 4.3, 4.0 and 3.10, in that order; the
#   broker legs skip the valgrind and sdist steps unless the unit leg runs too). Extra
#   arguments go to every leg's pytest; a -m EXPR among them narrows each leg to
#   "LEG'S MARKER and (EXPR)".
# Which to run when: --leg quick after every edit (under a minute); --leg unit before a commit
# that touches more than the pure layers (CLI, Spark, packaging, processes); --leg 4.3 (or
# 4.0, 3.10) for a broker-facing change; no --leg (all four, what CI runs) before you stop.
# A 4.x node that cannot run on this machine (no root, no Debian mirror for its chroot: status
# 3 or 4 of scripts/start-rabbitmq4.sh) skips its leg with the reason, or fails the run when
# RTROUTE_REQUIRE_BROKER4=1 (CI sets it). A transient failure (status 5: apt's lock held past
# the bounded wait) fails the run and says to run it again.
# The status is non-zero when any leg fails. Each leg's wall time is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

legs=()
pytest_args=()
expr=""
while [ $# -gt 0 ]; do
    case $1 in
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        --leg) legs+=("${2:?--leg needs quick, unit, 4.3, 4.0 or 3.10}"); shift 2 ;;
        --leg=*) legs+=("${1#--leg=}"); shift ;;
        -m) expr=${2:?-m needs an expression}; shift 2 ;;
        -m*) expr=${1#-m}; shift ;;
        *) pytest_args+=("$1"); shift ;;
    esac
done
[ ${#legs[@]} -gt 0 ] || legs=(unit 4.3 4.0 3.10)
for leg in "${legs[@]}"; do
    case $leg in quick|unit|4.3|4.0|3.10) ;; *)
        echo "usage: $0 [--leg quick|unit|4.3|4.0|3.10]... [PYTEST ARGS] (unknown leg '$leg')" >&2
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

# native_current: the venv imports rtroute and its extension is newer than every source of it
native_current() {
    local so
    so=$(ls rtroute/core/_native.*.so 2>/dev/null | head -n1)
    [ -n "$so" ] && .venv/bin/python -c "import rtroute" 2>/dev/null \
        && [ -z "$(find src_c rtroute/core/_native.pyx setup.py pyproject.toml -newer "$so" \
            \( -name '*.c' -o -name '*.h' -o -name '*.pyx' -o -name '*.py' -o -name '*.toml' \) \
            ! -name 'test_*' ! -name '_native.c' 2>/dev/null)" ]
}

SHARED=${RTROUTE_SHARED:-../shared}
plugin_pid=
SECONDS=0
if [ "${legs[*]}" = quick ]; then
    native_current || bash scripts/setup.sh
    times+=("setup (venv and native build, if stale): ${SECONDS} s")
else
    bash scripts/ensure-rabbitmq.sh
    # the real x-rtopic plugin (../shared, where present: CI has it) is the live reference of
    # the parity suites in the 3.10 leg and a source of the 4.3 leg's migration test: its node
    # starts beside the setup
    if { wants 3.10 || wants 4.3; } && [ -f "$SHARED/rtopic-plugin/node.sh" ]; then
        # node.sh start stops the node first; its old dist port can outlive the stop by a few
        # seconds ("port 25702 already in use, not starting"): one more try after a pause
        { sh "$SHARED/rtopic-plugin/node.sh" start || { sleep 10; echo "(trying again)"
            sh "$SHARED/rtopic-plugin/node.sh" start; }; } >.test-logs/rtopic-plugin.log 2>&1 &
        plugin_pid=$!
    fi
    bash scripts/setup.sh
    times+=("setup (3.x broker, venv, native build): ${SECONDS} s")
fi

export RTROUTE_EXPECT_NATIVE=1 RTROUTE_REQUIRE_BROKER=1 RTROUTE_REQUIRE_SPARK=1 RTROUTE_REQUIRE_DOCS=1
unset RTROUTE_TEST_URI RTROUTE_TEST_MANAGEMENT_URI RTROUTE_TEST_RABBITMQCTL
unset RTROUTE_TEST_DIST

marker_for() {   # marker_for BASE: BASE, narrowed by the -m EXPR given to this script
    if [ -n "$expr" ]; then echo "$1 and ($expr)"; else echo "$1"; fi
}

# run_leg NAME MARKER [ENV=VALUE...] [-- PATH...]: pytest with that marker and environment
# (Hypothesis profile "ci" unless RTROUTE_HYPOTHESIS or the ENV says otherwise), on the PATHs
# given or the whole suite; the slowest tests (3 s or more) are listed at its end
run_leg() {
    local name=$1 marker=$2 rc=0 env_args=() paths=()
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do env_args+=("$1"); shift; done
    [ $# = 0 ] || { shift; paths=("$@"); }
    say "leg $name: pytest -m \"$marker\"${paths[*]+ ${paths[*]}}"
    SECONDS=0
    env RTROUTE_HYPOTHESIS="${RTROUTE_HYPOTHESIS:-ci}" ${env_args[@]+"${env_args[@]}"} \
        .venv/bin/python -m pytest -m "$marker" --durations=20 --durations-min=3 \
        ${pytest_args[@]+"${pytest_args[@]}"} \
        ${paths[@]+"${paths[@]}"} || rc=$?
    times+=("leg $name: ${SECONDS} s (pytest status $rc)")
    case $rc in
        0) ;;
        5) say "leg $name: no test among the selected ones" ;;
        *) status=$rc ;;
    esac
}

# start_leg NAME MARKER [ENV=VALUE...]: run_leg's pytest, in the background (its output in
# .test-logs/leg-NAME.log), for a leg that runs beside another; finish_leg NAME waits for it
declare -A leg_pid=() leg_started=() leg_marker=()
start_leg() {
    local name=$1 marker=$2
    shift 2
    leg_started[$name]=$(date +%s) leg_marker[$name]=$marker
    # a process group of its own (setsid execs it: the leg's pid is the group's id), so that
    # cleanup can stop it with everything it started (proxies, sidecars, Spark)
    setsid env RTROUTE_HYPOTHESIS="${RTROUTE_HYPOTHESIS:-ci}" "$@" \
        .venv/bin/python -m pytest -m "$marker" --durations=20 --durations-min=3 \
        -p no:cacheprovider ${pytest_args[@]+"${pytest_args[@]}"} >".test-logs/leg-$name.log" 2>&1 &
    leg_pid[$name]=$!
}
finish_leg() {
    local name=$1 rc=0
    wait "${leg_pid[$name]}" || rc=$?
    unset "leg_pid[$name]"
    say "leg $name (it ran beside another, its output follows): pytest -m \"${leg_marker[$name]}\""
    cat ".test-logs/leg-$name.log"
    times+=("leg $name: $(($(date +%s) - leg_started[$name])) s, beside another (pytest status $rc)")
    case $rc in
        0) ;;
        5) say "leg $name: no test among the selected ones" ;;
        *) status=$rc ;;
    esac
}

# node_up SERIES: the status of scripts/start-rabbitmq4.sh SERIES (waits for it once)
declare -A node_status=()
node_up() {
    if [ -z "${node_status[$1]:-}" ]; then
        node_status[$1]=0
        wait "${node_pid[$1]}" || node_status[$1]=$?
    fi
    return "${node_status[$1]}"
}

# plugin_up: the x-rtopic plugin's 3.10.8 node (5702) answers (waits for its start once)
plugin_status=
plugin_up() {
    if [ -z "$plugin_status" ]; then
        plugin_status=1
        if [ -n "$plugin_pid" ] && wait "$plugin_pid"; then plugin_status=0
        elif [ -n "$plugin_pid" ]; then
            say "the x-rtopic plugin's node did not start (.test-logs/rtopic-plugin.log):" \
                "the live plugin checks skip" >&2
        else
            say "no $SHARED/rtopic-plugin: the live plugin checks skip"
        fi
    fi
    return "$plugin_status"
}

# rtopic4 enable|disable: the real x-rtopic plugin v4.0.9 ($SHARED/rtopic-plugin-4, built for
# 4.0.5) on the 4.0 node, at runtime: a source of the 4.3 leg's migration test while that leg
# runs, off again before the 4.0 leg (which tests rtroute without it)
rtopic4() {
    local root=${RABBITMQ4_ROOT:-/srv/trixie} app=rabbitmq_rtopic_exchange-4.0.5 lib
    lib=$(cd "$root/usr/lib/rabbitmq/lib" 2>/dev/null && ls -d rabbitmq_server-4.0.5 2>/dev/null) \
        || return 1
    if [ "$1" = enable ]; then
        [ "$(id -u)" = 0 ] && [ -d "$SHARED/rtopic-plugin-4/$app/ebin" ] || return 1
        mkdir -p "$root/usr/lib/rabbitmq/plugins/$app/ebin"
        cp "$SHARED/rtopic-plugin-4/$app/ebin/"* "$root/usr/lib/rabbitmq/plugins/$app/ebin/"
    fi
    chroot "$root" env RABBITMQ_PLUGINS_DIR="/usr/lib/rabbitmq/plugins:/usr/lib/rabbitmq/lib/$lib/plugins" \
        /usr/sbin/rabbitmq-plugins -n rabbit4@localhost -q "$1" rabbitmq_rtopic_exchange >/dev/null \
        || return 1
    # a disabled plugin leaves its exchange type registered (the node would still list and
    # accept x-rtopic): unregistered as a restart would
    [ "$1" = enable ] || [ "$(chroot "$root" /usr/sbin/rabbitmqctl -n rabbit4@localhost -q eval \
        'rabbit_registry:unregister(exchange, <<"x-rtopic">>).')" = ok ]
}

# broker_leg SERIES MARKER [beside] [ENV=VALUE...]: a leg against the 4.x node of that series,
# once it is up (beside: in the background, see start_leg)
broker_leg() {
    local series=$1 marker=$2 started=0 port mgmt ctl mode=run_leg
    shift 2
    if [ "${1:-}" = beside ]; then mode=start_leg; shift; fi
    node_up "$series" || started=$?
    sed 's/^/  /' ".test-logs/start-rabbitmq-$series.log"
    case $series in
        4.3) port=5674 mgmt=15674 ctl="chroot ${RABBITMQ43_ROOT:-/srv/sid} rabbitmqctl -n rabbit43@localhost" ;;
        4.0) port=5673 mgmt=15673 ctl="chroot ${RABBITMQ4_ROOT:-/srv/trixie} rabbitmqctl -n rabbit4@localhost" ;;
    esac
    [ "$(id -u)" = 0 ] || ctl="sudo -n $ctl"
    case $started in
        0)
            "$mode" "$series" "$marker" \
                RTROUTE_TEST_URI="amqp://guest:guest@127.0.0.1:$port/%2F" \
                RTROUTE_TEST_MANAGEMENT_URI="http://127.0.0.1:$mgmt/" \
                RTROUTE_TEST_RABBITMQCTL="$ctl" "$@"
            ;;
        5)
            say "FAILED: scripts/start-rabbitmq4.sh $series met a transient failure (apt's lock" \
                "held past its bounded wait, said above): run it again" >&2
            status=1
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

if wants quick; then
    mapfile -t quick_paths < <(grep -v -e '^#' -e '^[[:space:]]*$' tests/quick.txt)
    run_leg quick "$(marker_for "not broker")" RTROUTE_HYPOTHESIS="${RTROUTE_HYPOTHESIS:-quick}" \
        -- "${quick_paths[@]}"
fi
# The 4.3 leg (the whole broker tier) runs beside the valgrind and sdist checks and the unit
# leg: it uses only the 4.3 node and nodes of its own, the unit leg no broker but the 3.10 one
# Whatever ends this script (a failed step under set -e, ^C, SIGTERM), no leg goes on in the
# background (its process group gets SIGTERM) and the 4.0 node does not keep the plugin
sources=() rtopic4_on=0
cleanup() {
    local name
    for name in "${!leg_pid[@]}"; do
        if kill -0 "${leg_pid[$name]}" 2>/dev/null; then
            say "stopping leg $name, which was still running" >&2
            kill -TERM -- "-${leg_pid[$name]}" 2>/dev/null || true
            wait "${leg_pid[$name]}" 2>/dev/null || true
        fi
    done
    if [ "$rtopic4_on" = 1 ]; then rtopic4 disable || true; fi
}
trap cleanup EXIT
trap 'say "interrupted" >&2; exit 130' INT TERM
# The migration tests of the 4.3 leg export a plugin user's topology from the plugin's brokers
if wants 4.3; then
    if plugin_up; then
        sources+=(RTROUTE_TEST_SOURCE_PLUGIN_URI=amqp://guest:guest@127.0.0.1:5702/%2F
                  RTROUTE_TEST_SOURCE_PLUGIN_MANAGEMENT_URI=http://guest:guest@127.0.0.1:15702/)
    fi
    if wants 4.0 && node_up 4.0 && rtopic4 enable; then
        rtopic4_on=1
        sources+=(RTROUTE_TEST_SOURCE_PLUGIN4_URI=amqp://guest:guest@127.0.0.1:5673/%2F
                  RTROUTE_TEST_SOURCE_PLUGIN4_MANAGEMENT_URI=http://guest:guest@127.0.0.1:15673/)
    else
        say "the 4.0 node has no x-rtopic plugin: the migration test's 4.0.5 source skips"
    fi
    if wants unit; then broker_leg 4.3 "$(marker_for broker)" beside ${sources[@]+"${sources[@]}"}
    else broker_leg 4.3 "$(marker_for broker)" ${sources[@]+"${sources[@]}"}; fi
fi
if wants unit; then
    SECONDS=0
    make -C src_c test valgrind
    # the sdist builds and passes on the oldest and newest claimed Python (a Python this
    # machine lacks is skipped with a message rather than failing the whole run)
    RTROUTE_SDIST_ALLOW_MISSING=1 RTROUTE_SDIST_OUT="$PWD/.test-logs/dist" bash scripts/check-sdist.sh
    # tests/packaging checks that sdist and wheel rather than building them once more
    export RTROUTE_TEST_DIST="$PWD/.test-logs/dist"
    times+=("native core under valgrind, sdist check: ${SECONDS} s")
    start_leg unit-islands "$(marker_for "not broker and island")"
    run_leg unit "$(marker_for "not broker and not island")"
    finish_leg unit-islands
fi
if [ -n "${leg_started[4.3]:-}" ]; then finish_leg 4.3; fi
if [ "$rtopic4_on" = 1 ]; then
    rtopic4_on=0
    if ! rtopic4 disable; then
        say "FAILED: the x-rtopic plugin stays enabled on the 4.0 node, whose leg tests without it" >&2
        status=1
    fi
fi
# The 4.0 and 3.10 legs run at once (different brokers; each test's names, ports and nodes of
# its own). A test that needs another broker's management API is given the 4.3 node's, which
# neither leg restarts, when it answers; else they run one after the other.
together=()
if wants 4.0 && wants 3.10 && curl -fsS --max-time 3 -u guest:guest \
        http://127.0.0.1:15674/api/overview 2>/dev/null | grep -q '"rabbitmq_version":"4'; then
    together=(RTROUTE_TEST_OTHER_MANAGEMENT_URI=http://guest:guest@127.0.0.1:15674/)
fi
if wants 4.0; then
    broker_leg 4.0 "$(marker_for "broker and every_broker")" \
        ${together[@]+beside "${together[@]}"}
fi
if wants 3.10; then
    plugin=()
    if plugin_up; then
        plugin=(RTROUTE_TEST_PLUGIN_URI=amqp://guest:guest@127.0.0.1:5702/%2F
                RTROUTE_TEST_PLUGIN_MANAGEMENT_URI=http://guest:guest@127.0.0.1:15702/)
    fi
    run_leg 3.10 "$(marker_for "broker and every_broker")" ${together[@]+"${together[@]}"} \
        ${plugin[@]+"${plugin[@]}"}
fi
if [ -n "${leg_started[4.0]:-}" ]; then finish_leg 4.0; fi

say "wall time of each part:"
for line in "${times[@]}"; do say "  $line"; done
exit "$status"
