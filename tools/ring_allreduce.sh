#!/usr/bin/env bash
# The main job: builds chorus and runs the ring_allreduce demo with two ranks as two
# "nodes" (two network namespaces joined by a veth pair; loopback, with the reason
# printed, where namespaces cannot be made), then the same sweep through Gloo on the
# same link for comparison.
#
#   tools/ring_allreduce.sh [--min-bytes 1K] [--max-bytes 64M] [--iters 10]
# Two real hosts: see README ("Two real hosts").
set -euo pipefail
cd "$(dirname "$0")/.."

tools/bootstrap.sh
bazel build //tools/demo:ring_allreduce //tools/perf:chorus_perf >/dev/null 2>&1 ||
  bazel build //tools/demo:ring_allreduce //tools/perf:chorus_perf

bin=$(bazel info bazel-bin 2>/dev/null)
export CHORUS_NETNS_TAG="demo$$"

echo "== chorus ring all-reduce, 2 ranks on 2 nodes"
tools/netns/run_two_nodes.sh -- "$bin/tools/demo/ring_allreduce" "$@"

min=1K max=64M
while [ $# -gt 0 ]; do
  case "$1" in
    --min-bytes) min=$2; shift 2 ;;
    --max-bytes) max=$2; shift 2 ;;
    *) shift ;;
  esac
done
echo
echo "== the same sweep through Gloo (ring all-reduce), same link"
tools/netns/run_two_nodes.sh -- "$bin/tools/perf/chorus_perf" --backend gloo --algo ring \
  -b "$min" -e "$max" -f 2 -n 10 -w 2 -c 1 --coll all_reduce ||
  echo "(the Gloo comparison did not run; see above)"
