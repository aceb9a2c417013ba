#!/usr/bin/env bash
# Stops the RabbitMQ 4.x node rabbit4@localhost of scripts/start-rabbitmq4.sh (chroot
# $RABBITMQ4_ROOT, default /srv/trixie); its state and the chroot stay for the next start.
# The host's own node is never touched. Idempotent. Others may be using that node: stop it
# only when you mean to.
#   stop-rabbitmq4.sh            stop the node
#   stop-rabbitmq4.sh --umount   and unmount /proc from the chroot
# Exit status: 0 stopped (or not running); 1 it still runs; 3 root is needed and neither root
# nor passwordless sudo is available.
set -euo pipefail

ROOT=${RABBITMQ4_ROOT:-/srv/trixie}
NODE=rabbit4@localhost
PIDFILE=$ROOT/var/lib/rabbitmq/mnesia/$NODE.pid
log() { echo "rtroute: [rabbitmq4] $*"; }

if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        exec sudo -n RABBITMQ4_ROOT="$ROOT" bash "$0" "$@"
    fi
    echo "rtroute: [rabbitmq4] ERROR: root is needed to enter the chroot at $ROOT, and sudo" \
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
            echo "rtroute: [rabbitmq4] ERROR: $NODE (pid $pid) still runs" >&2
            exit 1
        fi
    fi
fi
if [ "${1:-}" = "--umount" ] && mountpoint -q "$ROOT/proc"; then
    umount "$ROOT/proc" && log "unmounted $ROOT/proc"
fi
log "$NODE stopped"
