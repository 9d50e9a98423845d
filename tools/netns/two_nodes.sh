#!/usr/bin/env bash
# Simulates several "nodes" on one machine with network namespaces (needs root).
#
#   two_nodes.sh up [N] [--rate RATE]  make N (default 2) namespaces chorus_n<K>_<TAG>, each
#                                      with interface chorus0 = 10.77.0.<K+1>/24 and lo up.
#                                      N == 2: one veth pair; N > 2: veths to a bridge that
#                                      lives in its own namespace chorus_br_<TAG>. --rate
#                                      (e.g. 10gbit) shapes each chorus0 with tc tbf.
#                                      Idempotent; prints "node<K> <namespace> <address> chorus0".
#   two_nodes.sh down                  remove every namespace of this TAG (killing what runs there)
#   two_nodes.sh exec K cmd [args...]  run cmd inside node K's namespace, with
#                                      CHORUS_HOSTID=chorus-node<K>-<TAG> (see below)
#   two_nodes.sh check                 exit 0 if namespaces can be made here, else say why, exit 3
#
# TAG comes from $CHORUS_NETNS_TAG (default "chorus"), so that concurrent users (CI, a
# developer, two tests) never touch each other's namespaces. Nothing is created in the
# root namespace: both ends of every veth are created directly inside namespaces, so
# traffic on 10.77.0.0/24 cannot leave them.
#
# Host identity: the namespaces share this machine's hostname and boot id, which is what
# chorus takes a host to be, so ranks in two of them would count as one host (shared
# memory, one core count for both). exec therefore gives each node its own CHORUS_HOSTID
# (as NCCL_HOSTID does for NCCL), so that two namespaces are always two hosts; a caller
# that set a non-empty CHORUS_HOSTID keeps it (e.g. the same value in every node, to make
# them one host again).
set -euo pipefail

readonly TAG="${CHORUS_NETNS_TAG:-chorus}"
readonly IFNAME=chorus0
readonly SUBNET=10.77.0
readonly PROG=two_nodes.sh

die() {
  echo "$PROG: $*" >&2
  exit 1
}

usage() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}" >&2
  exit 2
}

[[ "$TAG" =~ ^[A-Za-z0-9_-]{1,40}$ ]] || die "CHORUS_NETNS_TAG='$TAG': use 1-40 of [A-Za-z0-9_-]"

node_ns() { echo "chorus_n${1}_${TAG}"; }
bridge_ns() { echo "chorus_br_${TAG}"; }
node_addr() { echo "${SUBNET}.$(($1 + 1))"; }

# Namespaces of this tag only: the anchored pattern keeps tag "a" from matching "x_a".
our_namespaces() {
  { ip netns list 2>/dev/null || true; } | awk '{print $1}' | grep -E "^chorus_(n[0-9]+|br)_${TAG}$" || true
}

node_count() { our_namespaces | grep -c "^chorus_n" || true; }

remove_all() {
  local ns pids
  for ns in $(our_namespaces); do
    # A namespace lives on while processes are inside it: stop them first.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [[ -n "$pids" ]]; then
      # shellcheck disable=SC2086  # one pid per word
      kill -KILL $pids 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true
    echo "removed $ns"
  done
}

cmd_check() {
  if [[ "$(id -u)" != 0 ]]; then
    echo "$PROG: network namespaces need root (running as uid $(id -u))"
    exit 3
  fi
  command -v ip >/dev/null || { echo "$PROG: 'ip' (iproute2) is not installed"; exit 3; }
  local err
  probe="chorus_probe_${TAG}_$$"  # global: the EXIT trap runs after this function returns
  trap 'ip netns del "$probe" 2>/dev/null || true' EXIT
  if ! err=$(ip netns add "$probe" 2>&1); then
    echo "$PROG: 'ip netns add' failed: $err"
    exit 3
  fi
  if ! err=$(ip -n "$probe" link add name a type veth peer name b 2>&1); then
    echo "$PROG: cannot create a veth pair: $err"
    exit 3
  fi
  if ! err=$(ip netns exec "$probe" true 2>&1); then
    echo "$PROG: 'ip netns exec' failed: $err"
    exit 3
  fi
  echo "ok: network namespaces are available"
}

is_up() {
  local n=$1 k
  [[ "$(node_count)" == "$n" ]] || return 1
  if ((n > 2)); then our_namespaces | grep -qx "$(bridge_ns)" || return 1; fi
  for ((k = 0; k < n; k++)); do
    ip -n "$(node_ns "$k")" -4 addr show dev "$IFNAME" 2>/dev/null | grep -q "inet $(node_addr "$k")/24" || return 1
  done
}

print_nodes() {
  local k
  for ((k = 0; k < $1; k++)); do echo "node$k $(node_ns "$k") $(node_addr "$k") $IFNAME"; done
}

cmd_up() {
  local n=2 rate=""
  while (($#)); do
    case "$1" in
      --rate) (($# >= 2)) || die "--rate: missing value"; rate=$2; shift 2 ;;
      --rate=*) rate=${1#--rate=}; shift ;;
      *)
        if ! [[ "$1" =~ ^[0-9]+$ ]] || (($1 < 2 || $1 > 200)); then die "up: node count '$1' is not in [2, 200]"; fi
        n=$1
        shift ;;
    esac
  done
  [[ -z "$rate" || "$rate" =~ ^[0-9]+(\.[0-9]+)?[kmgt]?(bit|bps)$ ]] || die "--rate: '$rate' is not like 10gbit"
  if [[ -z "$rate" ]] && is_up "$n"; then
    print_nodes "$n"
    return 0
  fi
  remove_all >/dev/null  # a different or half-made layout: start over
  # Any failure (or interruption) below removes what was made so far.
  trap 'rc=$?; if ((rc != 0)); then echo "$PROG: up failed, cleaning up" >&2; remove_all >/dev/null; fi' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  local k ns br
  for ((k = 0; k < n; k++)); do
    ns=$(node_ns "$k")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
  done
  if ((n == 2)); then
    ip link add name "$IFNAME" netns "$(node_ns 0)" type veth peer name "$IFNAME" netns "$(node_ns 1)"
  else
    br=$(bridge_ns)
    ip netns add "$br"
    ip -n "$br" link add name br0 type bridge forward_delay 0
    ip -n "$br" link set br0 up
    for ((k = 0; k < n; k++)); do
      ip link add name "$IFNAME" netns "$(node_ns "$k")" type veth peer name "p$k" netns "$br"
      ip -n "$br" link set "p$k" master br0 up
    done
  fi
  for ((k = 0; k < n; k++)); do
    ns=$(node_ns "$k")
    ip -n "$ns" addr add "$(node_addr "$k")/24" dev "$IFNAME"
    ip -n "$ns" link set "$IFNAME" up
    if [[ -n "$rate" ]]; then
      tc -n "$ns" qdisc add dev "$IFNAME" root tbf rate "$rate" burst 4mbit latency 100ms
    fi
  done
  trap - EXIT INT TERM
  print_nodes "$n"
}

cmd_exec() {
  (($# >= 2)) || die "exec: usage: exec K cmd [args...]"
  local k=$1
  shift
  [[ "$k" =~ ^[0-9]+$ ]] || die "exec: node '$k' is not a number"
  our_namespaces | grep -qx "$(node_ns "$k")" || die "exec: no namespace $(node_ns "$k") (run '$PROG up' first)"
  export CHORUS_HOSTID="${CHORUS_HOSTID:-chorus-node${k}-${TAG}}"
  exec ip netns exec "$(node_ns "$k")" "$@"
}

(($# >= 1)) || usage
sub=$1
shift
case "$sub" in
  up) cmd_up "$@" ;;
  down) (($# == 0)) || die "down takes no arguments"; remove_all ;;
  exec) cmd_exec "$@" ;;
  check) cmd_check ;;
  -h | --help | help) usage ;;
  *) echo "$PROG: unknown subcommand '$sub'" >&2; usage ;;
esac
