#!/usr/bin/env bash
# Guest side of compare_rdma.sh: chorus over RDMA on rxe0, two ranks in this guest
# (chorusrun), beside perftest's numbers from the same boot: chorus_p2p_bench
# (one-way send/recv bandwidth, 8-byte half round trip) and chorus_perf all_reduce
# (busbw, results checked: #wrong). usage: guest_chorus_bench.sh OPT_BAZEL_BIN
set -euo pipefail
bin=${1:?usage: guest_chorus_bench.sh OPT_BAZEL_BIN}
export CHORUS_TRANSPORT=rdma
run=("$bin/tools/launcher/chorusrun" --nproc-per-node 2 --timeout 300 --)
echo "# chorus send/recv over RDMA (chorus_p2p_bench, 2 ranks, window 4)"
"${run[@]}" "$bin/tools/p2p/chorus_p2p_bench" -b 4M -e 64M -t 256M -l 500
echo "# chorus all_reduce over RDMA (chorus_perf, 2 ranks, float32 sum)"
"${run[@]}" "$bin/tools/perf/chorus_perf" all_reduce --backend chorus -b 4M -e 64M -f 2 -n 5 -w 1
