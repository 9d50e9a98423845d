#!/usr/bin/env bash
# chorus over RDMA vs perftest on the same Soft-RoCE device, in ONE guest boot and
# REPS interleaved rounds (guest_chorus_bench.sh), then the table of per-round ratios
# and their medians (summarize_rdma.py). Under emulation only the ratios mean anything.
# usage: tools/rdma_vm/compare_rdma.sh [OUT_DIR] [REPS]     (REPS default 3; ~2 min each)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/chorus_rdma_compare}
reps=${2:-3}
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || { echo "compare_rdma.sh: REPS must be a positive integer, got '$reps'" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
bazel build -c opt //tools/p2p:chorus_p2p_bench //tools/perf:chorus_perf //tools/launcher:chorusrun >/dev/null 2>&1 ||
  { echo "compare_rdma.sh: bazel build -c opt of the benchmarks failed" >&2; exit 1; }
opt_bin=$(bazel info -c opt bazel-bin 2>/dev/null)
tools/rdma_vm/run.sh --timeout $((300 + 300 * reps)) --out "$out" -- \
  tools/rdma_vm/guest_chorus_bench.sh "$opt_bin" "$reps" | tee "$out/compare.txt"
echo "# summary (medians over $reps interleaved rounds; $out/summary.txt)"
python3 tools/rdma_vm/summarize_rdma.py "$out/compare.txt" | tee "$out/summary.txt"
