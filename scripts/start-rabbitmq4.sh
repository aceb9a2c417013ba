#!/usr/bin/env bash
# RabbitMQ 4.x as extra nodes beside the 3.x one that scripts/ensure-rabbitmq.sh runs, for the
# 4.x legs of scripts/test.sh and for trying rtroute on 4.x by hand. One script, two series:
#
#   start-rabbitmq4.sh [4.0]  node rabbit4@localhost   AMQP 127.0.0.1:5673  management :15673
#                             stream protocol 127.0.0.1:5553
#                             Debian trixie's rabbitmq-server (4.0.x, Erlang/OTP 27, Mnesia),
#                             chroot /srv/trixie ($RABBITMQ4_ROOT), Erlang distribution :25673
#   start-rabbitmq4.sh 4.3    node rabbit43@localhost  AMQP 127.0.0.1:5674  management :15674
#                             stream protocol 127.0.0.1:5554
#                             Debian unstable's rabbitmq-server (4.3.x, Erlang/OTP 29, Khepri
#                             metadata store), chroot /srv/sid ($RABBITMQ43_ROOT), dist :25674
#   plugins (both): rabbitmq_management rabbitmq_event_exchange rabbitmq_shovel
#            rabbitmq_shovel_management rabbitmq_consistent_hash_exchange (sharded ingress)
#            rabbitmq_stream (the Spark stream source's reader; advertised as 127.0.0.1 and the
#            node's own stream port, since a stream client connects where the metadata says)
#   The series may also come from RABBITMQ4_SERIES. Each node registers with the host's epmd
#   on 127.0.0.1:4369.
#
# The host (Debian 12) packages RabbitMQ 3.10, so each node runs from a Debian package in a
# minbase chroot (state in its /var/lib/rabbitmq, logs in its /var/log/rabbitmq). The host's own
# node is never touched, nor the other 4.x node.
#
# Idempotent: a node that already answers is left exactly as it is (its config files are not
# rewritten, only missing plugins are enabled), so it is safe while others use it; otherwise
# the chroot is built and the package installed if needed, the config written, the node
# started and awaited. Ends with the version line when the node and its management API answer.
#
# RABBITMQ4_DENY_TRANSIENT_QUEUES=1 makes a node this script starts refuse transient
# non-exclusive queues, which 4.x deprecates but still permits (a later release is to refuse
# them): to check that nothing declares one. A node that already runs keeps its settings.
#
# Safe to run concurrently with itself (either series, or the same one twice) and with
# scripts/ensure-rabbitmq.sh: host apt work is serialized and waits for any other apt
# (scripts/apt-lib.sh), and one start per series runs at a time (flock on
# /var/lock/rtroute-TAG.lock; the second finds the node up and leaves it as it is).
#
# Exit status: 0 up; 1 it failed (see the message); 2 usage; 3 root is needed (to build or
# enter the chroot) and neither root nor passwordless sudo is available; 4 the chroot cannot be
# built here (no Debian mirror in the host's apt sources, the mirror unreachable on every try,
# debootstrap not installable, or too little disk); 5 a transient failure: apt's lock (or a
# start of the same series) was still held after the bounded wait, run it again.
# scripts/test.sh treats 3 and 4 as "4.x cannot run on this machine", 5 as a failure.
# Stop it with scripts/stop-rabbitmq4.sh [SERIES].
set -euo pipefail

SERIES=${1:-${RABBITMQ4_SERIES:-4.0}}
case $SERIES in
    4.0) ROOT=${RABBITMQ4_ROOT:-/srv/trixie} SUITE=trixie NODE=rabbit4@localhost
         PORT=5673 MGMT=15673 DIST=25673 STREAM=5553 TAG=rabbitmq4 ;;
    4.3) ROOT=${RABBITMQ43_ROOT:-/srv/sid} SUITE=sid NODE=rabbit43@localhost
         PORT=5674 MGMT=15674 DIST=25674 STREAM=5554 TAG=rabbitmq43 ;;
    *) echo "usage: $0 [4.0|4.3]   (the series: 4.0 from Debian trixie, 4.3 from Debian" \
            "unstable; got '$SERIES')" >&2
       exit 2 ;;
esac
PLUGINS="rabbitmq_management rabbitmq_event_exchange rabbitmq_shovel rabbitmq_shovel_management rabbitmq_consistent_hash_exchange rabbitmq_stream"
WAIT_S=${RABBITMQ4_WAIT_S:-180}
DENY_TRANSIENT=${RABBITMQ4_DENY_TRANSIENT_QUEUES:-0}

log() { echo "rtroute: [$TAG] $*"; }
die() {   # die [STATUS] MESSAGE...
    local status=1
    if [[ $1 =~ ^[0-9]+$ ]]; then status=$1; shift; fi
    echo "rtroute: [$TAG] ERROR: $*" >&2
    exit "$status"
}

# The management API answers with a 4.x version: the node is up, whoever started it.
management_version() {
    curl -fsS --max-time 3 -u guest:guest "http://127.0.0.1:$MGMT/api/overview" 2>/dev/null \
        | sed -n 's/.*"rabbitmq_version":"\([^"]*\)".*/\1/p'
}
up_message() {
    log "$NODE up: RabbitMQ $1, AMQP amqp://guest:guest@127.0.0.1:$PORT/%2F," \
        "management http://127.0.0.1:$MGMT/, stream protocol 127.0.0.1:$STREAM"
}

if [ "$(id -u)" != 0 ]; then
    running=$(management_version || true)
    case $running in
        4.*) up_message "$running"; exit 0 ;;
    esac
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        exec sudo -n RABBITMQ4_ROOT="${RABBITMQ4_ROOT:-}" RABBITMQ43_ROOT="${RABBITMQ43_ROOT:-}" \
            RABBITMQ4_WAIT_S="$WAIT_S" RABBITMQ4_DENY_TRANSIENT_QUEUES="$DENY_TRANSIENT" \
            bash "$0" "$SERIES"
    fi
    die 3 "root is needed to build and enter the chroot at $ROOT (debootstrap, chroot, mount)," \
        "and sudo is not available without a password: run this script as root"
fi

# shellcheck source=scripts/apt-lib.sh
source "$(dirname "$0")/apt-lib.sh"
# one start of this series at a time: a concurrent one waits, then finds the node up
exec 8>>"/var/lock/rtroute-$TAG.lock"
flock -w "${RTROUTE_APT_WAIT_S:-900}" 8 \
    || die 5 "another start of $NODE still holds /var/lock/rtroute-$TAG.lock after ${RTROUTE_APT_WAIT_S:-900} s"

# fd 8 (the lock above) is closed for everything run in the chroot: a daemon started there (the
# node, an epmd) must not hold the lock for as long as it lives
in_root() { chroot "$ROOT" "$@" 8>&-; }
ctl() { in_root /usr/sbin/rabbitmqctl -n "$NODE" "$@"; }

# The Debian mirror the host already uses (deb822 sources first, then sources.list).
mirror() {
    local m
    m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' \
        | grep -v -- '-security' | grep '/debian/\?$' | head -n1 || true)
    [ -n "$m" ] || m=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        2>/dev/null | awk '{print $2}' | grep -v -- '-security' | head -n1 || true)
    [ -n "$m" ] || die 4 "no Debian mirror in the host's apt sources: cannot debootstrap $SUITE"
    echo "$m"
}

wait_management() {
    local v t=0
    until v=$(management_version) && [ -n "$v" ]; do
        t=$((t + 1)); [ $t -lt 60 ] || die "the management API on 127.0.0.1:$MGMT does not answer"
        sleep 1
    done
    echo "$v"
}

# the stream plugin's lines of rabbitmq.conf (valid only while rabbitmq_stream is enabled)
stream_conf() {
    cat <<EOF
stream.listeners.tcp.local = 127.0.0.1:$STREAM
stream.advertised_host = 127.0.0.1
stream.advertised_port = $STREAM
EOF
}

# -- a node that answers is left as it is --------------------------------------------------------
if [ -x "$ROOT/usr/sbin/rabbitmqctl" ] && ctl -q ping >/dev/null 2>&1; then
    log "$NODE already running"
    # its Erlang VM answers but the rabbit application may be stopped (rabbitmqctl stop_app
    # by a test that was interrupted before its start_app): start it again
    if [ "$(ctl -q eval 'rabbit:is_running().' 2>/dev/null)" != true ]; then
        log "the rabbit application of $NODE is stopped (an interrupted stop_app?): start_app"
        ctl -q start_app >/dev/null
        ctl -q await_startup --timeout 120 >/dev/null
    fi
    [ "$DENY_TRANSIENT" != 1 ] \
        || log "note: RABBITMQ4_DENY_TRANSIENT_QUEUES applies when this script starts the node"
    enabled=$(in_root /usr/sbin/rabbitmq-plugins -n "$NODE" -q list -e -m 2>/dev/null || true)
    missing=""
    for p in $PLUGINS; do grep -qx "$p" <<<"$enabled" || missing="$missing $p"; done
    if [ -n "$missing" ]; then   # adds to the node's enabled set, disables nothing
        log "enabling$missing"
        # a node started before rabbitmq_stream was in PLUGINS: its listener and advertised
        # address as a node this script starts has them (set before the plugin starts: the
        # loaded application keeps them); rabbitmq.conf gets the same lines for its next start
        if grep -qw rabbitmq_stream <<<"$missing"; then
            ctl -q eval "application:load(rabbitmq_stream),
                application:set_env(rabbitmq_stream, tcp_listeners, [{\"127.0.0.1\", $STREAM}]),
                application:set_env(rabbitmq_stream, advertised_host, <<\"127.0.0.1\">>),
                application:set_env(rabbitmq_stream, advertised_port, $STREAM)." >/dev/null
        fi
        in_root /usr/sbin/rabbitmq-plugins -n "$NODE" -q enable $missing >/dev/null
    fi
    grep -qs '^stream\.' "$ROOT/etc/rabbitmq/rabbitmq.conf" \
        || stream_conf >>"$ROOT/etc/rabbitmq/rabbitmq.conf"
    version=$(wait_management)
    up_message "$version"
    exit 0
fi

# debootstrap into an empty $ROOT (a failed try leaves a partial one: apt_retry runs this again)
fresh_debootstrap() {
    rm -rf --one-file-system "$ROOT"
    debootstrap --variant=minbase "$SUITE" "$ROOT" "$1"
}

# -- 1. the chroot --------------------------------------------------------------------------------
if [ -d "$ROOT/debootstrap" ]; then   # what an interrupted debootstrap leaves behind
    log "removing the incomplete chroot at $ROOT (an interrupted debootstrap)"
    for m in dev/pts proc; do mountpoint -q "$ROOT/$m" && umount "$ROOT/$m"; done
    rm -rf --one-file-system "$ROOT"
fi
if [ ! -f "$ROOT/etc/debian_version" ]; then
    mkdir -p "$(dirname "$ROOT")"
    avail_kb=$(df -Pk "$(dirname "$ROOT")" | awk 'NR==2 {print $4}')
    [ "$avail_kb" -gt 1048576 ] || die 4 "less than 1 GiB free under $(dirname "$ROOT")"
    MIRROR=$(mirror)
    if ! command -v debootstrap >/dev/null 2>&1; then
        log "installing debootstrap"
        : >"/tmp/$TAG-host-apt.log"
        rc=0
        apt_install "/tmp/$TAG-host-apt.log" debootstrap || rc=$?
        case $rc in
            0) ;;
            5) die 5 "another apt held the lock too long while installing debootstrap (transient:" \
                   "run again), see /tmp/$TAG-host-apt.log" ;;
            *) die 4 "cannot install debootstrap, see /tmp/$TAG-host-apt.log" ;;
        esac
    fi
    log "debootstrap --variant=minbase $SUITE $ROOT $MIRROR (a few minutes)"
    : >"/tmp/$TAG-debootstrap.log"
    rc=0
    apt_retry "/tmp/$TAG-debootstrap.log" fresh_debootstrap "$MIRROR" || rc=$?
    [ $rc = 0 ] || die 4 "debootstrap failed, see /tmp/$TAG-debootstrap.log"
fi
mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
cp /etc/hosts "$ROOT/etc/hosts"   # "localhost" must resolve inside the chroot

# -- 2. rabbitmq-server from the suite ---------------------------------------------------------------
if [ ! -x "$ROOT/usr/lib/rabbitmq/bin/rabbitmq-server" ]; then
    MIRROR=$(mirror)
    SECURITY=$(sed 's#/debian/\?$#/debian-security#' <<<"$MIRROR")
    if [ "$SUITE" = sid ]; then   # unstable has no -updates or -security suite
        echo "deb $MIRROR $SUITE main" >"$ROOT/etc/apt/sources.list"
    else
        cat >"$ROOT/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY $SUITE-security main
EOF
    fi
    # a mirror's sid Release file may be past its Valid-Until: accept it (signatures are checked)
    printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\nAcquire::Check-Valid-Until "false";\n' \
        >"$ROOT/etc/apt/apt.conf.d/99small"
    printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"   # no service start at install
    chmod +x "$ROOT/usr/sbin/policy-rc.d"
    log "apt-get install rabbitmq-server (in the chroot)"
    : >"/tmp/$TAG-apt.log"
    rc=0
    apt_retry "/tmp/$TAG-apt.log" in_root apt-get update -qq \
        && apt_retry "/tmp/$TAG-apt.log" \
            in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server \
        || rc=$?
    [ $rc = 0 ] || die "$rc" "installing rabbitmq-server in the chroot failed, see /tmp/$TAG-apt.log"
    in_root apt-get clean
    rm -rf "$ROOT"/var/lib/apt/lists/*   # apt-get update brings them back when needed
fi

# -- 3. the node's configuration ------------------------------------------------------------------
cat >"$ROOT/etc/rabbitmq/rabbitmq-env.conf" <<EOF
# written by rtroute's scripts/start-rabbitmq4.sh $SERIES: a node beside the host's rabbit@localhost
NODENAME=$NODE
NODE_IP_ADDRESS=127.0.0.1
NODE_PORT=$PORT
DIST_PORT=$DIST
MNESIA_BASE=/var/lib/rabbitmq/mnesia
LOG_BASE=/var/log/rabbitmq
CONFIG_FILE=/etc/rabbitmq/rabbitmq.conf
ENABLED_PLUGINS_FILE=/etc/rabbitmq/enabled_plugins
ERL_EPMD_ADDRESS=127.0.0.1
export ERL_EPMD_ADDRESS
SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
EOF
cat >"$ROOT/etc/rabbitmq/rabbitmq.conf" <<EOF
# written by rtroute's scripts/start-rabbitmq4.sh $SERIES
listeners.tcp.local = 127.0.0.1:$PORT
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT
EOF
stream_conf >>"$ROOT/etc/rabbitmq/rabbitmq.conf"
if [ "$DENY_TRANSIENT" = 1 ]; then
    echo "deprecated_features.permit.transient_nonexcl_queues = false" \
        >>"$ROOT/etc/rabbitmq/rabbitmq.conf"
fi
echo "[$(tr ' ' ',' <<<"$PLUGINS")]." >"$ROOT/etc/rabbitmq/enabled_plugins"

# -- 4. start and wait ----------------------------------------------------------------------------
for p in $PORT $MGMT $DIST $STREAM; do
    if ss -ltnH "( sport = :$p )" 2>/dev/null | grep -q .; then
        die "port $p is taken, but not by a $NODE that answers"
    fi
done
log "starting $NODE"
setsid chroot "$ROOT" /usr/sbin/rabbitmq-server </dev/null >/tmp/$TAG-server.log 2>&1 8>&- &
t=0
# await_startup fails at once while the node has not registered yet: retry it
until ctl -q await_startup --timeout 5 >/dev/null 2>&1; do
    t=$((t + 1))
    [ $t -lt "$WAIT_S" ] || die "$NODE did not start within ${WAIT_S} s; see /tmp/$TAG-server.log and $ROOT/var/log/rabbitmq/"
    sleep 1
done
version=$(wait_management)
up_message "$version"
