#!/usr/bin/env bash
# Do the 4.x nodes come up on a machine that has never run them, started the way
# scripts/test.sh starts them (both series at once, beside scripts/ensure-rabbitmq.sh), while
# another apt holds the machine's apt lock?
#
# 1. Puts the machine in a new machine's state for the 4.x nodes: stops the 4.x nodes (in the
#    default chroots /srv/sid and /srv/trixie and in the roots named by RABBITMQ43_ROOT and
#    RABBITMQ4_ROOT), deletes the chroots at RABBITMQ43_ROOT and RABBITMQ4_ROOT (default: the
#    scratch roots /srv/rtroute-fresh/sid and /srv/rtroute-fresh/trixie; the default chroots
#    are never deleted), and removes the host's debootstrap package.
# 2. Takes apt's own locks (the lists lock and the dpkg frontend lock, as apt takes them) for
#    20 s, as another apt would (a new machine's start-up upgrade), and meanwhile starts, at the
#    same moment: scripts/start-rabbitmq4.sh 4.3, scripts/start-rabbitmq4.sh 4.0 and
#    scripts/ensure-rabbitmq.sh.
# 3. Fails unless both node scripts exit 0, at least one of them waited for apt's lock (the
#    race was run), and each node's management API answers with its series' version (4.3.x on
#    15674, 4.0.x on 15673), and the stream protocol listens on 5554, 5553 and 5552.
#
# The nodes are left running in those roots: `.ci/run` runs this, then scripts/test.sh with the
# same RABBITMQ43_ROOT and RABBITMQ4_ROOT, whose legs use them. Root (or passwordless sudo)
# and a Debian mirror are needed; about 2 minutes on 2 cores. Usage: scripts/check-fresh-nodes.sh
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# = 0 ] || { echo "usage: $0   (no arguments; RABBITMQ43_ROOT, RABBITMQ4_ROOT: the roots to build)" >&2; exit 2; }
if [ "$(id -u)" != 0 ]; then
    exec sudo -n RABBITMQ43_ROOT="${RABBITMQ43_ROOT:-}" RABBITMQ4_ROOT="${RABBITMQ4_ROOT:-}" bash "$0"
fi
export RABBITMQ43_ROOT=${RABBITMQ43_ROOT:-/srv/rtroute-fresh/sid}
export RABBITMQ4_ROOT=${RABBITMQ4_ROOT:-/srv/rtroute-fresh/trixie}
say() { echo "check-fresh-nodes: $*"; }
source scripts/apt-lib.sh
# one check at a time: a second one would delete the roots the first is building (fd 7 is
# closed for what it starts: a node must not hold it)
exec 7>>/var/lock/rtroute-check-fresh-nodes.lock
flock -n 7 || { say "FAILED: another check-fresh-nodes runs (/var/lock/rtroute-check-fresh-nodes.lock)" >&2; exit 1; }
logs=.test-logs/fresh-nodes
mkdir -p "$logs"
rm -f "$logs"/*.log
SECONDS=0

# -- 1. a new machine's state -----------------------------------------------------------------------
for root in /srv/sid:/srv/trixie "$RABBITMQ43_ROOT:$RABBITMQ4_ROOT"; do
    RABBITMQ43_ROOT=${root%%:*} bash scripts/stop-rabbitmq4.sh 4.3 --umount >>"$logs/stop.log" 2>&1
    RABBITMQ4_ROOT=${root##*:} bash scripts/stop-rabbitmq4.sh 4.0 --umount >>"$logs/stop.log" 2>&1
done
for root in "$RABBITMQ43_ROOT" "$RABBITMQ4_ROOT"; do
    case $root in
        /srv/sid|/srv/trixie|/|"")
            say "FAILED: $root is not a scratch root (the default chroots are never deleted here):" \
                "set RABBITMQ43_ROOT and RABBITMQ4_ROOT elsewhere" >&2
            exit 2 ;;
    esac
    if [ -e "$root" ]; then
        for m in dev/pts proc; do ! mountpoint -q "$root/$m" || umount "$root/$m"; done
        rm -rf --one-file-system "$root"
    fi
done
if apt_installed debootstrap; then
    ( flock -w "$APT_WAIT_S" 9 && apt_retry "$logs/remove-debootstrap.log" \
        env DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq debootstrap ) 9>>"$APT_LOCK" \
        || { say "FAILED: could not remove debootstrap, see $logs/remove-debootstrap.log" >&2; exit 1; }
fi
! command -v debootstrap >/dev/null 2>&1 || { say "FAILED: debootstrap is still on PATH" >&2; exit 1; }
say "new machine's state in ${SECONDS} s: no 4.x node running, no chroot at $RABBITMQ43_ROOT" \
    "or $RABBITMQ4_ROOT, no debootstrap"

# -- 2. everything at once ----------------------------------------------------------------------
SECONDS=0
# apt locks with fcntl (F_SETLK on the whole file): so does this stand-in for another apt
python3 -c '
import fcntl, sys, time
held = [open(path, "a") for path in sys.argv[1:]]
for f in held:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("holding", *sys.argv[1:], flush=True)
time.sleep(20)
' /var/lib/apt/lists/lock /var/lib/dpkg/lock-frontend >"$logs/other-apt.log" 2>&1 &
holder=$!
trap 'kill $holder 2>/dev/null || true' EXIT
until grep -q holding "$logs/other-apt.log" 2>/dev/null; do
    kill -0 $holder 2>/dev/null || { say "FAILED: could not take apt's locks:" \
        "$(cat "$logs/other-apt.log")" >&2; exit 1; }
    sleep 0.1
done
declare -A pid=()
bash scripts/start-rabbitmq4.sh 4.3 >"$logs/start-4.3.log" 2>&1 7>&- & pid[4.3]=$!
bash scripts/start-rabbitmq4.sh 4.0 >"$logs/start-4.0.log" 2>&1 7>&- & pid[4.0]=$!
bash scripts/ensure-rabbitmq.sh >"$logs/ensure-rabbitmq.log" 2>&1 7>&- & pid[3.x]=$!

# -- 3. both nodes up, each with its series --------------------------------------------------------
status=0
for what in 4.3 4.0 3.x; do
    rc=0
    wait "${pid[$what]}" || rc=$?
    [ ! -f "$logs/start-$what.log" ] || sed 's/^/  /' "$logs/start-$what.log"
    if [ "$rc" != 0 ]; then
        say "FAILED: $what exited with status $rc (logs in $logs/)" >&2
        status=1
    fi
done
wait $holder || true
if ! grep -qs "apt's lock is held by another apt" /tmp/rabbitmq43-host-apt.log /tmp/rabbitmq4-host-apt.log; then
    say "FAILED: neither node script waited for apt's lock (/tmp/rabbitmq4*-host-apt.log): the race" \
        "this check is for did not happen" >&2
    status=1
fi
for pair in 4.3:15674 4.0:15673; do
    series=${pair%%:*} port=${pair##*:}
    version=$(curl -fsS --max-time 5 -u guest:guest "http://127.0.0.1:$port/api/overview" 2>/dev/null \
        | sed -n 's/.*"rabbitmq_version":"\([^"]*\)".*/\1/p' || true)
    case $version in
        "$series".*) say "RabbitMQ $version answers on 127.0.0.1:$port" ;;
        *) say "FAILED: the $series node's management API on 127.0.0.1:$port answers" \
               "'${version:-nothing}'" >&2
           status=1 ;;
    esac
done
for port in 5554 5553 5552; do   # rabbitmq_stream's listeners (start-rabbitmq4.sh, ensure-rabbitmq.sh)
    if ss -ltnH "( sport = :$port )" | grep -q 127.0.0.1; then
        say "the stream protocol listens on 127.0.0.1:$port"
    else
        say "FAILED: nothing listens on 127.0.0.1:$port (rabbitmq_stream)" >&2
        status=1
    fi
done
[ $status = 0 ] && say "both nodes up from nothing in ${SECONDS} s (roots $RABBITMQ43_ROOT, $RABBITMQ4_ROOT)"
exit $status
