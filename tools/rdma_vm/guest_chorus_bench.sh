#!/usr/bin/env bash
# Guest side of compare_rdma.sh: chorus over RDMA on rxe0, two ranks in this guest
# (chorusrun), against perftest on the same device, in REPS interleaved rounds (the
# host's neighbours make single runs swing by 20%; summarize_rdma.py takes medians).
# Each round, every benchmark on every size:
#   - ib_write_bw one way and ib_write_bw -b (both directions at once), both through
#     guest_perftest.sh: the baselines for send/recv and for a 2-rank all_reduce, whose every byte
#     has a byte going the other way on the same device;
#   - chorus_p2p_bench one way and -d (both ways), results checked (#wrong);
#   - chorus_perf all_reduce: float32 sum, results checked (#wrong).
# Round 1 also measures latency: ib_write_lat and chorus's 8-byte half round trip,
# with the engine sleeping at once (default) and polling 200 us first (CHORUS_IB_POLL_US).
# usage: guest_chorus_bench.sh OPT_BAZEL_BIN [REPS]
set -euo pipefail
bin=${1:?usage: guest_chorus_bench.sh OPT_BAZEL_BIN [REPS]}
reps=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
export CHORUS_TRANSPORT=rdma
run=("$bin/tools/launcher/chorusrun" --nproc-per-node 2 --timeout 300 --)
sizes=(4194304 16777216 67108864)
csv_sizes=$(IFS=,; echo "${sizes[*]}")

for ((rep = 1; rep <= reps; rep++)); do
  echo "# rep $rep"
  lat=''
  [ "$rep" = 1 ] && lat=8,4096
  "$here/guest_perftest.sh" --bw-sizes "$csv_sizes" --bidir-sizes "$csv_sizes" --lat-sizes "$lat" ||
    echo "# guest_perftest.sh failed (exit $?)"
  polls=(0)
  [ "$rep" = 1 ] && polls=(0 200)
  for poll in "${polls[@]}"; do
    echo "# chorus send/recv one way (chorus_p2p_bench, 2 ranks, window 4), CHORUS_IB_POLL_US=$poll"
    CHORUS_IB_POLL_US=$poll "${run[@]}" "$bin/tools/p2p/chorus_p2p_bench" -b 4M -e 64M -t 256M -l 500 ||
      echo "# chorus_p2p_bench failed (exit $?)"
  done
  echo "# chorus send/recv both ways (chorus_p2p_bench -d, 2 ranks, window 4)"
  "${run[@]}" "$bin/tools/p2p/chorus_p2p_bench" -b 4M -e 64M -t 128M -l 10 -d || echo "# chorus_p2p_bench -d failed (exit $?)"
  echo "# chorus all_reduce (chorus_perf, 2 ranks, float32 sum)"
  "${run[@]}" "$bin/tools/perf/chorus_perf" all_reduce --backend chorus -b 4M -e 64M -f 4 -n 5 -w 1 ||
    echo "# chorus_perf failed (exit $?)"
done
