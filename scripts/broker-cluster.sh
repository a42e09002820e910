#!/usr/bin/env bash
# A throwaway 3-node RabbitMQ cluster on this machine, beside (never instead of) the node
# that the other tests use: own node names, AMQP and distribution ports, data and log
# directories, config file and (empty) plugin list, and the same Erlang cookie as the
# machine's node so that the usual `rabbitmqctl -n NODE` reaches these nodes too.
#
#   scripts/broker-cluster.sh start             # start the 3 nodes and cluster them; prints URLs
#   scripts/broker-cluster.sh urls              # amqp.url for the cluster (comma-separated)
#   scripts/broker-cluster.sh nodes             # one line per node: N NAME AMQP_PORT
#   scripts/broker-cluster.sh stop-node N       # stop node N (1..3): a node loss
#   scripts/broker-cluster.sh start-node N      # start node N again (it rejoins by itself)
#   scripts/broker-cluster.sh ctl N ARGS...     # rabbitmqctl -n <node N> ARGS...
#   scripts/broker-cluster.sh queues N ARGS...  # rabbitmq-queues -n <node N> ARGS...
#   scripts/broker-cluster.sh stop              # stop every node and delete the directory
#
# Environment (all optional): AGENTD_CLUSTER_DIR (default /tmp/agentd-broker-cluster),
# AGENTD_CLUSTER_PORTS (three AMQP ports, default "5673 5674 5675"; each node's
# distribution port is its AMQP port + 20000), AGENTD_CLUSTER_PREFIX (node names
# PREFIX1@localhost.., default agentd-cluster), RABBITMQ_BIN (the directory holding
# rabbitmq-server and rabbitmqctl themselves, not the Debian wrappers that switch user).
#
# Every command below names one of these nodes with -n: nothing here ever addresses the
# machine's own node (rabbit@localhost).
set -euo pipefail

DIR=${AGENTD_CLUSTER_DIR:-/tmp/agentd-broker-cluster}
read -r -a PORTS <<<"${AGENTD_CLUSTER_PORTS:-5673 5674 5675}"
PREFIX=${AGENTD_CLUSTER_PREFIX:-agentd-cluster}
HOST=localhost
BIN=${RABBITMQ_BIN:-/usr/lib/rabbitmq/bin}
[[ -x $BIN/rabbitmq-server ]] || BIN=$(dirname "$(command -v rabbitmq-server)")

die() { echo "broker-cluster: $*" >&2; exit 1; }
(( ${#PORTS[@]} == 3 )) || die "AGENTD_CLUSTER_PORTS needs three ports"

node() { echo "${PREFIX}$1@${HOST}"; }
port() { echo "${PORTS[$(( $1 - 1 ))]}"; }

# The environment of node N (or of a CLI talking to it): everything under $DIR, so the
# machine's /etc/rabbitmq (whose rabbitmq.conf listens on 5672) is never read.
node_env() {
  local n=$1 base="$DIR/n$1"
  export HOME="$DIR/home"
  export RABBITMQ_NODENAME; RABBITMQ_NODENAME=$(node "$n")
  export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
  export RABBITMQ_NODE_PORT; RABBITMQ_NODE_PORT=$(port "$n")
  export RABBITMQ_DIST_PORT=$(( $(port "$n") + 20000 ))
  export RABBITMQ_CONFIG_FILE="$base/rabbitmq.conf"
  export RABBITMQ_ADVANCED_CONFIG_FILE="$base/advanced.config"
  export RABBITMQ_CONF_ENV_FILE="$DIR/rabbitmq-env.conf"
  export RABBITMQ_ENABLED_PLUGINS_FILE="$DIR/enabled_plugins"
  export RABBITMQ_MNESIA_BASE="$base/mnesia"
  export RABBITMQ_LOG_BASE="$base/log"
  export RABBITMQ_PID_FILE="$base/rabbitmq.pid"
  export ERL_EPMD_ADDRESS=127.0.0.1
  export RABBITMQ_SERVER_START_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
}

# Copies the machine node's cookie so both this script's CLI and the system's reach the nodes.
# Everything the nodes read or write is under $DIR.
prepare() {
  local cookie=""
  for candidate in /var/lib/rabbitmq/.erlang.cookie "${HOME:-/root}/.erlang.cookie"; do
    [[ -r $candidate ]] && { cookie=$candidate; break; }
  done
  mkdir -p "$DIR/home"
  if [[ -n $cookie ]]; then
    install -m 400 "$cookie" "$DIR/home/.erlang.cookie"
  else
    # No machine node yet: a cookie of the cluster's own (only this script's CLI reaches it).
    (umask 377; head -c 30 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$DIR/home/.erlang.cookie")
  fi
  : >"$DIR/rabbitmq-env.conf"
  echo "[]." >"$DIR/enabled_plugins"
  for n in 1 2 3; do
    mkdir -p "$DIR/n$n/mnesia" "$DIR/n$n/log"
    # Small nodes: a low memory watermark would block publishers on a busy host.
    printf 'loopback_users = none\nvm_memory_high_watermark.absolute = 1GB\n' \
      >"$DIR/n$n/rabbitmq.conf"
  done
}

ctl() { local n=$1; shift; (node_env "$n"; "$BIN/rabbitmqctl" -n "$(node "$n")" "$@"); }
queues() { local n=$1; shift; (node_env "$n"; "$BIN/rabbitmq-queues" -n "$(node "$n")" "$@"); }

start_node() {
  local n=$1
  (node_env "$n"; "$BIN/rabbitmq-server" -detached >>"$DIR/n$n/log/startup.log" 2>&1)
  # -detached returns before the node registers with epmd; await_startup needs it there.
  local tries=0
  until ctl "$n" -q ping >/dev/null 2>&1; do
    (( ++tries < 120 )) || die "node $(node "$n") did not come up (see $DIR/n$n/log)"
    sleep 0.5
  done
  ctl "$n" -q -t 90 await_startup >/dev/null || die "node $(node "$n") did not start (see $DIR/n$n/log)"
}

stop_node() {
  local n=$1 pid
  ctl "$n" -q -t 60 stop >/dev/null 2>&1 || true
  # A node that ignored the stop (or was half started) is killed by its own pid file only.
  pid=$(cat "$DIR/n$n/rabbitmq.pid" 2>/dev/null || true)
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid" 2>/dev/null || true
  fi
}

urls() {
  local list=()
  for n in 1 2 3; do list+=("amqp://guest:guest@127.0.0.1:$(port "$n")/%2f"); done
  (IFS=,; echo "${list[*]}")
}

start() {
  [[ -e $DIR/n1 ]] && die "$DIR exists: run '$0 stop' first"
  for n in 1 2 3; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$(port "$n")") 2>/dev/null; then
      die "port $(port "$n") is taken"
    fi
  done
  prepare
  # Booting is mostly waiting on one core each: start the three at once.
  local pids=() failed=0
  for n in 1 2 3; do start_node "$n" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  (( failed == 0 )) || die "a node did not start"
  for n in 2 3; do
    ctl "$n" -q stop_app >/dev/null
    ctl "$n" -q join_cluster "$(node 1)" >/dev/null
    ctl "$n" -q start_app >/dev/null
  done
  ctl 1 -q await_online_nodes 3 >/dev/null 2>&1 || ctl 1 cluster_status >&2
  urls
}

stop() {
  if [[ -d $DIR ]]; then
    for n in 3 2 1; do [[ -d $DIR/n$n ]] && stop_node "$n"; done
    rm -rf "$DIR"
  fi
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  urls) urls ;;
  nodes) for n in 1 2 3; do echo "$n $(node "$n") $(port "$n")"; done ;;
  stop-node) stop_node "${2:?node number}" ;;
  start-node) start_node "${2:?node number}" ;;
  ctl) shift; ctl "${1:?node number}" "${@:2}" ;;
  queues) shift; queues "${1:?node number}" "${@:2}" ;;
  *) sed -n '2,22p' "$0" >&2; exit 2 ;;
esac
