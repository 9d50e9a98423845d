#!/usr/bin/env bash
# Two ranks as two "nodes" in two network namespaces joined by a veth pair: send/recv
# through the public API on both TCP engines, every byte checked by the benchmark
# (#wrong). Needs root and no sandbox; prints "SKIPPED: reason" and passes otherwise.
# Args: two_nodes.sh run_two_nodes.sh chorus_p2p_bench
set -euo pipefail
TWO=$(realpath "$1") RUN=$(realpath "$2") BENCH=$(realpath "$3")
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
  rows=$(grep -cE '^\[node0\] +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+ +0$' <<<"$out" || true)
  [[ "$rows" -ge 8 ]] || { echo "FAIL: expected >= 8 clean size rows, got $rows"; exit 1; }
done
echo PASS
