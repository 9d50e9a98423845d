#!/usr/bin/env bash
# shellcheck disable=SC2016  # rank scripts are single-quoted on purpose: ranks expand them
# run_two_nodes.sh in --loopback mode (the fallback when namespaces are unavailable):
# environment, prefixing, a real byte exchange on 127.0.0.1, failure and timeout.
# Args: run_two_nodes.sh tcp_echo testlib.sh
set -euo pipefail
RUN=$(realpath "$1") ECHO_BIN=$(realpath "$2")
# shellcheck source=tests/tools/testlib.sh
source "$3"
unset CHORUS_HOSTID  # the scripts keep a caller's; these checks want their own

echo "--- env and prefixes"
# "<end>" keeps $(...) from stripping the newline the prefixer adds when node0 ends last.
out=$(timeout 60 "$RUN" --loopback -- sh -c 'echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $CHORUS_SOCKET_IFNAME $MASTER_PORT"; printf "no-newline"; echo "to-stderr" >&2' 2>"$TEST_TMPDIR/err"; echo "<end>")
err=$(cat "$TEST_TMPDIR/err")
expect_contains "$out" "[node0] 0 2 0 1 0 127.0.0.1 lo "
expect_contains "$out" "[node1] 1 2 0 1 1 127.0.0.1 lo "
expect_contains "$out" "[node0] no-newline"$'\n'
expect_contains "$err" "[node1] to-stderr"
[[ "$out" != *to-stderr* ]] || fail "stderr leaked into stdout"
p0=$(sed -n 's/^\[node0\] 0 2 .* lo \([0-9]*\)$/\1/p' <<<"$out")
p1=$(sed -n 's/^\[node1\] 1 2 .* lo \([0-9]*\)$/\1/p' <<<"$out")
[[ -n "$p0" && "$p0" == "$p1" ]] || fail "ranks disagree on MASTER_PORT: '$p0' '$p1'"

echo "--- each rank its own host for chorus (CHORUS_HOSTID), unless the caller set one"
out=$(CHORUS_NETNS_TAG=lb timeout 60 "$RUN" --loopback -- sh -c 'echo "hostid=$CHORUS_HOSTID"' 2>&1)
expect_contains "$out" "[node0] hostid=chorus-node0-lb"
expect_contains "$out" "[node1] hostid=chorus-node1-lb"
out=$(CHORUS_HOSTID=mine timeout 60 "$RUN" --loopback -- sh -c 'echo "hostid=$CHORUS_HOSTID"' 2>&1)
expect_contains "$out" "[node0] hostid=mine"
expect_contains "$out" "[node1] hostid=mine"

echo "--- rank 1 talks to rank 0 at MASTER_ADDR:MASTER_PORT"
prog='if [ "$RANK" = 0 ]; then exec "$0" "$MASTER_ADDR" "$MASTER_PORT" 15; fi
exec bash -c "$1" "$MASTER_ADDR" "$MASTER_PORT" "rank$RANK"'
out=$(timeout 60 "$RUN" --loopback --timeout 30 -- bash -c "$prog" "$ECHO_BIN" "$TCP_CLIENT" 2>&1) ||
  fail "run failed: $out"
expect_contains "$out" "[node1] echo:rank1"
expect_contains "$out" "[node0] served 'rank1'"

echo "--- a failing node is named, the other stopped after --grace"
rc=0
start=$SECONDS
out=$(timeout 60 "$RUN" --loopback --grace 1 -- sh -c '[ "$RANK" = 0 ] && exit 9; exec sleep 30' 2>&1) || rc=$?
expect_eq "$rc" 9 "exit code"
expect_contains "$out" "node0 (rank 0) failed with exit code 9"
expect_contains "$out" "node1 (rank 1) still running; stopping it"
((SECONDS - start < 10)) || fail "took $((SECONDS - start)) s to stop"

echo "--- timeout"
rc=0
out=$(timeout 60 "$RUN" --loopback --timeout 1 -- sleep 30 2>&1) || rc=$?
expect_eq "$rc" 124 "exit code"
expect_contains "$out" "timeout after 1 s"

echo "--- bad arguments"
rc=0
out=$(timeout 10 "$RUN" --timeout soon -- true 2>&1) || rc=$?
expect_eq "$rc" 2 "exit code"
expect_contains "$out" "--timeout: 'soon' is not a positive integer"
rc=0
out=$(timeout 10 "$RUN" --loopback 2>&1) || rc=$?
expect_eq "$rc" 2 "exit code"
expect_contains "$out" "no program given"
echo "PASS"
