#!/usr/bin/env bash
# Stops a RabbitMQ 4.x node of scripts/start-rabbitmq4.sh: series 4.0 (the default),
# rabbit4@localhost in $RABBITMQ4_ROOT (default /srv/trixie), or 4.3, rabbit43@localhost in
# $RABBITMQ43_ROOT (default /srv/sid); its state and the chroot stay for the next start.
# The host's own node is never touched. Idempotent. Others may be using that node: stop it
# only when you mean to.
#   stop-rabbitmq4.sh [4.0|4.3]            stop the node
#   stop-rabbitmq4.sh [4.0|4.3] --umount   and unmount /proc from the chroot
# Exit status: 0 stopped (or not running); 1 it still runs; 3 root is needed and neither root
# nor passwordless sudo is available.
set -euo pipefail

SERIES=${RABBITMQ4_SERIES:-4.0}
case ${1:-} in 4.*) SERIES=$1; shift ;; esac
case $SERIES in
    4.0) ROOT=${RABBITMQ4_ROOT:-/srv/trixie} NODE=rabbit4@localhost TAG=rabbitmq4 ;;
    4.3) ROOT=${RABBITMQ43_ROOT:-/srv/sid} NODE=rabbit43@localhost TAG=rabbitmq43 ;;
    *) echo "usage: $0 [4.0|4.3] [--umount]   (got series '$SERIES')" >&2; exit 2 ;;
esac
PIDFILE=$ROOT/var/lib/rabbitmq/mnesia/$NODE.pid
log() { echo "rtroute: [$TAG] $*"; }

if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        exec sudo -n RABBITMQ4_ROOT="${RABBITMQ4_ROOT:-}" RABBITMQ43_ROOT="${RABBITMQ43_ROOT:-}" \
            bash "$0" "$SERIES" "$@"
    fi
    echo "rtroute: [$TAG] ERROR: root is needed to enter the chroot at $ROOT, and sudo" \
        "is not available without a password: run this script as root" >&2
    exit 3
fi
if [ ! -x "$ROOT/usr/sbin/rabbitmqctl" ]; then
    log "no RabbitMQ chroot at $ROOT: nothing to stop"
    exit 0
fi

pid=$(cat "$PIDFILE" 2>/dev/null || true)
if chroot "$ROOT" /usr/sbin/rabbitmqctl -n "$NODE" -q ping >/dev/null 2>&1; then
    log "stopping $NODE"
    chroot "$ROOT" /usr/sbin/rabbitmqctl -n "$NODE" -q stop || true
else
    log "$NODE is not running"
fi
# wait for this node's own Erlang VM: the pid file's process, if its command line names the node
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null \
        && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$NODE"; then
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid still runs 60 s after the stop: SIGTERM"
        kill "$pid"
        sleep 5
        if kill -0 "$pid" 2>/dev/null; then
            echo "rtroute: [$TAG] ERROR: $NODE (pid $pid) still runs" >&2
            exit 1
        fi
    fi
fi
if [ "${1:-}" = "--umount" ] && mountpoint -q "$ROOT/proc"; then
    umount "$ROOT/proc" && log "unmounted $ROOT/proc"
fi
log "$NODE stopped"
