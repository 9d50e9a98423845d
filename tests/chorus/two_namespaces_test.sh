#!/usr/bin/env bash
# Two ranks as two "nodes" in two network namespaces joined by a veth pair: send/recv
# through the public API on both TCP engines, every byte checked by the benchmark
# (#wrong); the namespaces are two hosts, so no shared memory spans them. Then 2 x 2
# ranks (two per namespace): shared memory within each, TCP between, every collective
# size checked by chorus_perf. Needs root and no sandbox; prints "SKIPPED: reason" and
# passes otherwise.
# Args: two_nodes.sh run_two_nodes.sh chorus_p2p_bench chorus_perf
set -euo pipefail
TWO=$(realpath "$1") RUN=$(realpath "$2") BENCH=$(realpath "$3") PERF=$(realpath "$4")
export CHORUS_NETNS_TAG="c$$_${RANDOM}"
if ! why=$(timeout 20 "$TWO" check 2>&1); then
  echo "SKIPPED: $why"
  exit 0
fi
for engine in uring epoll; do
  echo "--- $engine"
  out=$(CHORUS_TCP_ENGINE=$engine timeout 120 "$RUN" --require-netns --timeout 90 -- \
    "$BENCH" -b 1K -e 16M -t 8M -l 200 2>&1) || { echo "$out"; echo "FAIL: $engine run failed"; exit 1; }
  echo "$out"
  grep -q "tcp/$( [[ $engine == uring ]] && echo io_uring || echo epoll ) on 10.77.0.1" <<<"$out" ||
    { echo "FAIL: rank 0 did not use $engine on the veth address"; exit 1; }
  ! grep -q "shm (" <<<"$out" || { echo "FAIL: shared memory between two namespaces"; exit 1; }
  rows=$(grep -cE '^\[node0\] +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+ +0$' <<<"$out" || true)
  [[ "$rows" -ge 8 ]] || { echo "FAIL: expected >= 8 clean size rows, got $rows"; exit 1; }
done

echo "--- 2 x 2"
tmp=${TEST_TMPDIR:-$(mktemp -d)}
"$TWO" up >/dev/null
trap '"$TWO" down >/dev/null 2>&1 || true' EXIT
port=$((20000 + RANDOM % 20000))
pids=()
for r in 0 1 2 3; do
  timeout 120 "$TWO" exec $((r / 2)) env RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) MASTER_ADDR=10.77.0.1 \
    MASTER_PORT=$port CHORUS_SOCKET_IFNAME=chorus0 "$PERF" all_reduce -b 1K -e 4M -f 4 -n 2 -w 1 >"$tmp/r$r" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { cat "$tmp"/r*; echo "FAIL: a 2 x 2 rank failed"; exit 1; }; done
cat "$tmp/r0"
grep -q "shm (2 ranks on this host" "$tmp/r0" && grep -q " + tcp/" "$tmp/r0" ||
  { echo "FAIL: 2 x 2 is not shared memory within the namespaces and TCP between"; exit 1; }
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float +sum +-1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +0 ' "$tmp/r0" || true)
[[ "$rows" -ge 6 ]] || { echo "FAIL: expected >= 6 clean 2 x 2 all_reduce rows, got $rows"; exit 1; }
echo PASS
