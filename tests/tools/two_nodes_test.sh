#!/usr/bin/env bash
# shellcheck disable=SC2016  # rank scripts are single-quoted on purpose: ranks expand them
# Brings up real network namespaces and checks that nodes exchange bytes over them.
# Needs root and no Bazel sandbox; prints "SKIPPED: reason" and passes when the
# kernel or the user cannot make namespaces.
# Args: two_nodes.sh run_two_nodes.sh tcp_echo testlib.sh
set -euo pipefail
TWO=$(realpath "$1") RUN=$(realpath "$2") ECHO_BIN=$(realpath "$3")
# shellcheck source=tests/tools/testlib.sh
source "$4"

export CHORUS_NETNS_TAG="t$$_${RANDOM}"  # unique: never touches anyone else's namespaces
unset CHORUS_HOSTID  # the scripts keep a caller's; these checks want their own
if ! why=$(timeout 20 "$TWO" check 2>&1); then
  echo "SKIPPED: $why"
  exit 0
fi
trap 'timeout 30 "$TWO" down >/dev/null 2>&1 || true' EXIT

echo "--- up 2, idempotent"
out=$(timeout 30 "$TWO" up)
expect_eq "$out" "node0 chorus_n0_${CHORUS_NETNS_TAG} 10.77.0.1 chorus0
node1 chorus_n1_${CHORUS_NETNS_TAG} 10.77.0.2 chorus0" "up output"
expect_eq "$(timeout 30 "$TWO" up 2)" "$out" "second up"
[[ "$(ip netns list | grep -c "_${CHORUS_NETNS_TAG}")" == 2 ]] || fail "expected 2 namespaces"
expect_contains "$("$TWO" exec 1 ip -4 -o addr show dev chorus0)" "10.77.0.2/24"
expect_contains "$("$TWO" exec 1 ip -o link show lo)" "UP"
# Each node is its own host for chorus; a CHORUS_HOSTID the caller set is kept.
expect_eq "$("$TWO" exec 1 printenv CHORUS_HOSTID)" "chorus-node1-${CHORUS_NETNS_TAG}" "node1's CHORUS_HOSTID"
expect_eq "$(CHORUS_HOSTID='' "$TWO" exec 0 printenv CHORUS_HOSTID)" "chorus-node0-${CHORUS_NETNS_TAG}" "node0's CHORUS_HOSTID"
expect_eq "$(CHORUS_HOSTID=mine "$TWO" exec 1 printenv CHORUS_HOSTID)" "mine" "a caller's CHORUS_HOSTID"
# Nothing leaks into the root namespace.
! ip -4 -o addr | grep -q "10.77.0." || fail "10.77.0.x visible in the root namespace"

echo "--- node1 -> node0 over the veth"
timeout 20 "$TWO" exec 0 "$ECHO_BIN" 10.77.0.1 5001 15 >/dev/null &
echo_pid=$!
reply=$(timeout 20 "$TWO" exec 1 bash -c "$TCP_CLIENT" 10.77.0.1 5001 hello-from-node1)
expect_eq "$reply" "echo:hello-from-node1" "reply"
wait "$echo_pid" || fail "tcp_echo in node0 failed"
# No route into the namespaces from the root one (and no probe is sent: a SYN to
# 10.77.0.1 from here could leave the machine through a default route).
! ip route show | grep -q "10.77.0." || fail "root namespace has a route to 10.77.0.0/24"

echo "--- up 3 (bridge) with --rate, node2 -> node0"
out=$(timeout 30 "$TWO" up 3 --rate 100mbit)
expect_contains "$out" "node2 chorus_n2_${CHORUS_NETNS_TAG} 10.77.0.3 chorus0"
expect_contains "$("$TWO" exec 2 tc qdisc show dev chorus0)" "tbf"
timeout 20 "$TWO" exec 0 "$ECHO_BIN" 10.77.0.1 5003 15 >/dev/null &
echo_pid=$!
expect_eq "$(timeout 20 "$TWO" exec 2 bash -c "$TCP_CLIENT" 10.77.0.1 5003 via-bridge)" "echo:via-bridge" "bridged reply"
wait "$echo_pid" || fail "tcp_echo in node0 failed (bridge)"

echo "--- down"
timeout 30 "$TWO" down >/dev/null
[[ -z "$(ip netns list | grep "_${CHORUS_NETNS_TAG}\b" || true)" ]] || fail "namespaces left after down"
timeout 30 "$TWO" down >/dev/null  # idempotent

echo "--- run_two_nodes.sh --require-netns: rank 1 talks to rank 0 through MASTER_ADDR"
prog='echo "env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $CHORUS_SOCKET_IFNAME $CHORUS_HOSTID"
if [ "$RANK" = 0 ]; then exec "$0" "$MASTER_ADDR" "$MASTER_PORT" 15; fi
exec bash -c "$1" "$MASTER_ADDR" "$MASTER_PORT" "rank$RANK"'
out=$(timeout 60 "$RUN" --require-netns --timeout 30 -- bash -c "$prog" "$ECHO_BIN" "$TCP_CLIENT" 2>&1) ||
  fail "run_two_nodes.sh failed: $out"
expect_contains "$out" "[node0] env 0 2 0 1 10.77.0.1 chorus0 chorus-node0-${CHORUS_NETNS_TAG}"
expect_contains "$out" "[node1] env 1 2 0 1 10.77.0.1 chorus0 chorus-node1-${CHORUS_NETNS_TAG}"
expect_contains "$out" "[node0] served 'rank1'"
expect_contains "$out" "[node1] echo:rank1"
[[ -z "$(ip netns list | grep "_${CHORUS_NETNS_TAG}\b" || true)" ]] || fail "run_two_nodes.sh left namespaces"

echo "--- run_two_nodes.sh names the failing node"
rc=0
out=$(timeout 60 "$RUN" --require-netns --grace 1 -- bash -c '[ "$RANK" = 1 ] && exit 7; sleep 30' 2>&1) || rc=$?
expect_eq "$rc" 7 "exit code"
expect_contains "$out" "node1 (rank 1) failed with exit code 7"
[[ -z "$(ip netns list | grep "_${CHORUS_NETNS_TAG}\b" || true)" ]] || fail "namespaces left after a failure"
echo "PASS"
