#!/usr/bin/env bash
# Makes sure a RabbitMQ broker runs on 127.0.0.1:5672 with the plugins rtroute uses:
# installs it from the OS packages if absent, starts it if stopped, enables the plugins.
# rabbitmq_stream listens on 127.0.0.1:5552 and advertises that address (a stream client connects
# where the stream's metadata says), set in the running node and in /etc/rabbitmq/rabbitmq.conf.
set -euo pipefail

PLUGINS="rabbitmq_management rabbitmq_event_exchange rabbitmq_shovel rabbitmq_shovel_management rabbitmq_consistent_hash_exchange rabbitmq_stream"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if ! command -v rabbitmq-server >/dev/null 2>&1; then
    echo "rtroute: RabbitMQ not found; installing it from the OS packages"
    # serialized with the 4.x node scripts that scripts/test.sh runs at the same time, and
    # waiting for any other apt (scripts/apt-lib.sh)
    [ -z "$SUDO" ] || exec sudo -n bash "$0" "$@"
    source "$(dirname "$0")/apt-lib.sh"
    apt_install /tmp/rtroute-rabbitmq-apt.log rabbitmq-server || {
        rc=$?
        echo "rtroute: installing rabbitmq-server failed (status $rc), see /tmp/rtroute-rabbitmq-apt.log" >&2
        exit "$rc"
    }
fi

broker_up() { rabbitmqctl -q status >/dev/null 2>&1; }

if ! broker_up; then
    if rabbitmqctl -q ping >/dev/null 2>&1; then
        # the node answers but its rabbit application is stopped (rabbitmqctl stop_app by a
        # test that was interrupted before its start_app)
        echo "rtroute: the RabbitMQ node runs with its application stopped: start_app"
        rabbitmqctl -q start_app >/dev/null 2>&1 || true
    else
        echo "rtroute: starting RabbitMQ"
        $SUDO rabbitmq-server -detached >/dev/null 2>&1 || true
    fi
fi
# await_startup fails at once while the node has not registered yet: retry it.
for _ in $(seq 1 60); do
    if rabbitmqctl -q await_startup --timeout 5 >/dev/null 2>&1; then
        break
    fi
    sleep 1
done
broker_up || { echo "rtroute: RabbitMQ did not start" >&2; exit 1; }

enabled=$(rabbitmq-plugins -q list -e -m 2>/dev/null || true)
missing=""
for p in $PLUGINS; do
    grep -qx "$p" <<<"$enabled" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "rtroute: enabling RabbitMQ plugins:$missing"
    if grep -qw rabbitmq_stream <<<"$missing"; then
        # set before the plugin starts (the loaded application keeps them)
        rabbitmqctl -q eval 'application:load(rabbitmq_stream),
            application:set_env(rabbitmq_stream, tcp_listeners, [{"127.0.0.1", 5552}]),
            application:set_env(rabbitmq_stream, advertised_host, <<"127.0.0.1">>),
            application:set_env(rabbitmq_stream, advertised_port, 5552).' >/dev/null
    fi
    rabbitmq-plugins -q enable $missing >/dev/null
fi
# the same for the node's next start (these keys are valid only while rabbitmq_stream is enabled)
if ! grep -qs '^stream\.' /etc/rabbitmq/rabbitmq.conf; then
    printf '%s\n' "stream.listeners.tcp.local = 127.0.0.1:5552" "stream.advertised_host = 127.0.0.1" \
        "stream.advertised_port = 5552" | $SUDO tee -a /etc/rabbitmq/rabbitmq.conf >/dev/null
fi
# The management API answers a little after the plugin starts.
for _ in $(seq 1 30); do
    if overview=$(curl -fsS -u guest:guest http://127.0.0.1:15672/api/overview 2>/dev/null); then
        version=$(sed -n 's/.*"rabbitmq_version":"\([^"]*\)".*/\1/p' <<<"$overview")
        node=$(sed -n 's/.*"node":"\([^"]*\)".*/\1/p' <<<"$overview")
        echo "rtroute: using RabbitMQ ${version:-?} (node ${node:-?}) on 127.0.0.1:5672;" \
            "plugins enabled there: $(tr ' ' ',' <<<"$PLUGINS")" \
            "${missing:+(this run enabled${missing})}"
        exit 0
    fi
    sleep 1
done
echo "rtroute: the management API on 127.0.0.1:15672 did not answer" >&2
exit 1
