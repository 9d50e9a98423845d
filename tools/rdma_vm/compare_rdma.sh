#!/usr/bin/env bash
# chorus over RDMA vs perftest on the same Soft-RoCE device, in ONE guest boot:
# ib_write_bw / ib_write_lat (guest_perftest.sh), then chorus send/recv and all_reduce
# (guest_chorus_bench.sh). Under emulation only the ratios mean anything.
# usage: tools/rdma_vm/compare_rdma.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/chorus_rdma_compare}
mkdir -p "$out"
out=$(cd "$out" && pwd)
bazel build -c opt //tools/p2p:chorus_p2p_bench //tools/perf:chorus_perf //tools/launcher:chorusrun >/dev/null 2>&1 ||
  { echo "compare_rdma.sh: bazel build -c opt of the benchmarks failed" >&2; exit 1; }
opt_bin=$(bazel info -c opt bazel-bin 2>/dev/null)
tools/rdma_vm/run.sh --timeout 1200 --out "$out" -- bash -c \
  "tools/rdma_vm/guest_perftest.sh --bw-sizes 4194304,16777216,67108864 --lat-sizes 8,4096 --csv $out/perftest.csv &&
   tools/rdma_vm/guest_chorus_bench.sh $opt_bin" | tee "$out/compare.txt"
