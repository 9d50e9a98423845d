#!/usr/bin/env bash
# Runs a program as a two-"node" job: rank 0 in namespace node0 (10.77.0.1), rank 1 in
# node1 (10.77.0.2), joined by a veth pair (see two_nodes.sh). Each rank gets
# MASTER_ADDR=10.77.0.1, MASTER_PORT, RANK, WORLD_SIZE=2, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1,
# GROUP_RANK and CHORUS_SOCKET_IFNAME=chorus0. Output lines are prefixed [node0]/[node1].
# Each rank is its own host for chorus: CHORUS_HOSTID=chorus-node<K>-<TAG> (two_nodes.sh
# exec sets it; on loopback this script does), unless the caller set CHORUS_HOSTID.
#
#   run_two_nodes.sh [--require-netns | --loopback] [--timeout S] [--grace S] [--port P]
#                    -- program [args...]
#
#   --require-netns  fail (exit 3) when namespaces cannot be made, instead of falling back
#                    to running both ranks on loopback (MASTER_ADDR=127.0.0.1, ifname lo)
#   --loopback       skip namespaces, run both ranks on loopback
#   --timeout S      stop both ranks after S seconds (default 300); exit 124
#   --grace S        once a rank fails, how long the other may run on (default 5)
#   --port P         MASTER_PORT (default 29500 in namespaces, a free port on loopback)
#
# Exit: 0 if both ranks succeed, else the first failing rank's code (it is named on
# stderr). The namespaces (tag $CHORUS_NETNS_TAG, default unique per run) are always
# torn down.
set -euo pipefail

readonly PROG=run_two_nodes.sh
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly TWO_NODES="$HERE/two_nodes.sh"
export CHORUS_NETNS_TAG="${CHORUS_NETNS_TAG:-run$$}"

die() {
  echo "$PROG: $*" >&2
  exit 2
}

mode=auto timeout_s=300 grace_s=5 port=""
while (($#)); do
  case "$1" in
    --require-netns) mode=require; shift ;;
    --loopback) mode=loopback; shift ;;
    --timeout | --grace | --port)
      (($# >= 2)) || die "$1: missing value"
      [[ "$2" =~ ^[0-9]+$ && "$2" -gt 0 ]] || die "$1: '$2' is not a positive integer"
      case "$1" in --timeout) timeout_s=$2 ;; --grace) grace_s=$2 ;; --port) port=$2 ;; esac
      shift 2 ;;
    --) shift; break ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) die "unknown flag '$1' (usage: $PROG [flags] -- program [args...])" ;;
  esac
done
(($# >= 1)) || die "no program given (usage: $PROG [flags] -- program [args...])"
((port <= 65535)) || die "--port: '$port' is above 65535"

use_netns=0
if [[ "$mode" != loopback ]]; then
  if why=$("$TWO_NODES" check 2>&1); then
    use_netns=1
  elif [[ "$mode" == require ]]; then
    echo "$PROG: --require-netns: ${why}" >&2
    exit 3
  else
    echo "$PROG: network namespaces unavailable (${why}); running both ranks on loopback" >&2
  fi
fi

tmp=$(mktemp -d)
declare -a node_pid=() prefixer_pids=()

stop_nodes() {  # signal each rank's whole process group (it leads one, via setsid)
  local sig=$1 k
  for k in "${!node_pid[@]}"; do kill "-$sig" -- "-${node_pid[$k]}" 2>/dev/null || true; done
}

# The prefixers end when every writer of their fifo is gone; a process that escaped
# its rank's group could hold one open, so wait 2 s at most.
reap_prefixers() {
  local pid _
  for _ in $(seq 20); do
    for pid in "${prefixer_pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then sleep 0.1 && continue 2; fi
    done
    break
  done
  for pid in "${prefixer_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  prefixer_pids=()
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  local rc=$? pid
  trap - EXIT INT TERM
  stop_nodes KILL
  for pid in "${node_pid[@]}"; do wait "$pid" 2>/dev/null || true; done
  reap_prefixers
  if ((use_netns)); then "$TWO_NODES" down >/dev/null || echo "$PROG: teardown failed" >&2; fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if ((use_netns)); then
  "$TWO_NODES" up 2 >/dev/null
  master=10.77.0.1 ifname=chorus0
  port=${port:-29500}  # the namespaces are private: a fixed port cannot collide
else
  master=127.0.0.1 ifname=lo
  if [[ -z "$port" ]]; then
    # Loopback is shared with everything else on the machine: find a port nobody listens on.
    for _ in $(seq 50); do
      port=$((20000 + RANDOM % 30000))
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
    done
  fi
fi

# Prefixes each line; a last line without newline still gets one (bash read, not sed).
prefix_lines() {
  local line
  while IFS= read -r line || [[ -n "$line" ]]; do printf '%s %s\n' "$1" "$line"; done
}

start_node() {
  local k=$1
  shift
  mkfifo "$tmp/out$k" "$tmp/err$k"
  prefix_lines "[node$k]" <"$tmp/out$k" &
  prefixer_pids+=($!)
  prefix_lines "[node$k]" <"$tmp/err$k" >&2 &
  prefixer_pids+=($!)
  (
    export MASTER_ADDR=$master MASTER_PORT=$port RANK=$k WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1
    export GROUP_RANK=$k CHORUS_SOCKET_IFNAME=$ifname
    # setsid without fork (a background subshell is no group leader): $! leads the group.
    if ((use_netns)); then exec setsid "$TWO_NODES" exec "$k" "$@"; fi
    # Loopback stands in for two nodes too: two hosts for chorus (TCP, no shared memory),
    # as two_nodes.sh exec makes the namespaces.
    export CHORUS_HOSTID="${CHORUS_HOSTID:-chorus-node${k}-${CHORUS_NETNS_TAG}}"
    exec setsid "$@"
  ) >"$tmp/out$k" 2>"$tmp/err$k" </dev/null &
  node_pid[k]=$!
}

start_node 0 "$@"
start_node 1 "$@"

# Poll both ranks: bash reaps them in the background, so `kill -0` fails once one has
# exited and `wait` then returns its status.
declare -a rc=(running running)
first_fail="" exit_code=0
deadline=$((SECONDS + timeout_s))
while [[ "${rc[0]}" == running || "${rc[1]}" == running ]]; do
  for k in 0 1; do
    if [[ "${rc[$k]}" != running ]] || kill -0 "${node_pid[$k]}" 2>/dev/null; then continue; fi
    code=0
    wait "${node_pid[$k]}" || code=$?
    rc[k]=$code
    kill -KILL -- "-${node_pid[$k]}" 2>/dev/null || true  # what the rank left behind
    if ((code != 0)) && [[ -z "$first_fail" ]]; then
      first_fail=$k exit_code=$code
      echo "$PROG: node$k (rank $k) failed with exit code $code" >&2
      if ((deadline > SECONDS + grace_s)); then deadline=$((SECONDS + grace_s)); fi
    fi
  done
  if ((SECONDS >= deadline)) && [[ "${rc[0]}" == running || "${rc[1]}" == running ]]; then
    if [[ -z "$first_fail" ]]; then
      echo "$PROG: timeout after ${timeout_s} s" >&2
      exit_code=124
    fi
    for k in 0 1; do
      if [[ "${rc[$k]}" == running ]]; then echo "$PROG: node$k (rank $k) still running; stopping it" >&2; fi
    done
    stop_nodes TERM
    sleep 1
    exit "$exit_code"  # cleanup() kills what is left and tears down
  fi
  sleep 0.1
done
reap_prefixers
exit "$exit_code"
