#!/usr/bin/env bash
# Point-to-point ceiling, in one run: chorus send/recv (both TCP engines) beside iperf3
# one-way throughput on the same link, on loopback and across two network namespaces
# joined by a veth pair (root only; skipped with the reason otherwise).
#
#   tools/p2p/compare_p2p.sh [outdir]       (builds with bazel -c opt first)
#
# Prints, per link: iperf3 one-way GB/s, then chorus_p2p_bench's 8-byte latency and
# bandwidth table for io_uring and epoll (every message checked: #wrong column).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/chorus_p2p}
mkdir -p "$out"
bazel build -c opt //tools/p2p:chorus_p2p_bench >/dev/null 2>&1
BENCH=$(bazel info -c opt bazel-bin 2>/dev/null)/tools/p2p/chorus_p2p_bench
TWO=tools/netns/two_nodes.sh
RUN=tools/netns/run_two_nodes.sh
ARGS=(-b 64K -e 256M -t 1G -l 5000)

iperf_gbs() {  # iperf3 -J one-way receiver throughput in GB/s; args: client-prefix server-prefix addr
  local cli=$1 srv=$2 addr=$3 port=$((5300 + RANDOM % 500))
  $srv iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
  local spid=$!
  sleep 0.5
  $cli iperf3 -c "$addr" -p "$port" -t 5 -J 2>/dev/null |
    python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e9))'
  wait "$spid" 2>/dev/null || true
}

echo "== loopback"
echo "iperf3 one-way: $(iperf_gbs "" "" 127.0.0.1) GB/s"
for engine in uring epoll; do
  echo "-- chorus $engine"
  CHORUS_TCP_ENGINE=$engine "$RUN" --loopback --timeout 300 -- "$BENCH" "${ARGS[@]}" | tee "$out/loopback_$engine.txt"
done

echo "== two namespaces (veth)"
export CHORUS_NETNS_TAG="p2p$$"
if why=$("$TWO" check 2>&1); then
  "$TWO" up 2 >/dev/null
  echo "iperf3 one-way: $(iperf_gbs "$TWO exec 1" "$TWO exec 0" 10.77.0.1) GB/s"
  "$TWO" down >/dev/null 2>&1 || true
  for engine in uring epoll; do
    echo "-- chorus $engine"
    CHORUS_TCP_ENGINE=$engine "$RUN" --require-netns --timeout 300 -- "$BENCH" "${ARGS[@]}" | tee "$out/netns_$engine.txt"
  done
else
  echo "skipped: $why"
fi
