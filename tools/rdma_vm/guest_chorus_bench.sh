#!/usr/bin/env bash
# Guest side of compare_rdma.sh: chorus over RDMA on rxe0, two ranks in this guest
# (chorusrun), beside perftest's numbers from the same boot:
#   - ib_write_bw -b (both directions at once): the baseline for a 2-rank all_reduce,
#     whose every byte has a byte going the other way on the same device;
#   - chorus_p2p_bench: one-way send/recv bandwidth and 8-byte half round trip, with the
#     engine sleeping at once (default) and polling 200 us first (CHORUS_IB_POLL_US);
#   - chorus_perf all_reduce: busbw, results checked (#wrong).
# usage: guest_chorus_bench.sh OPT_BAZEL_BIN
set -euo pipefail
bin=${1:?usage: guest_chorus_bench.sh OPT_BAZEL_BIN}
export CHORUS_TRANSPORT=rdma
run=("$bin/tools/launcher/chorusrun" --nproc-per-node 2 --timeout 300 --)

echo "# ib_write_bw -b (bidirectional; MiB/s summed over both directions)"
port=18800
for s in 4194304 16777216 67108864; do
  port=$((port + 1))
  taskset -c 0 timeout 150 ib_write_bw -d rxe0 -x 1 -F -b -s "$s" -n 5 -p "$port" >/tmp/bw_srv.log 2>&1 &
  for _ in $(seq 100); do ss -Hltn "sport = :$port" | grep -q . && break; sleep 0.05; done
  taskset -c 1 timeout 150 ib_write_bw -d rxe0 -x 1 -F -b -s "$s" -n 5 -p "$port" 127.0.0.1 >/tmp/bw_cli.log 2>&1 || true
  wait || true
  echo "ib_write_bw_bidir $(awk 'f && NF { print; exit } /#bytes/ { f = 1 }' /tmp/bw_cli.log)"
done

for poll in 0 200; do
  echo "# chorus send/recv over RDMA (chorus_p2p_bench, 2 ranks, window 4), CHORUS_IB_POLL_US=$poll"
  CHORUS_IB_POLL_US=$poll "${run[@]}" "$bin/tools/p2p/chorus_p2p_bench" -b 4M -e 64M -t 256M -l 500
done
echo "# chorus all_reduce over RDMA (chorus_perf, 2 ranks, float32 sum)"
"${run[@]}" "$bin/tools/perf/chorus_perf" all_reduce --backend chorus -b 4M -e 64M -f 4 -n 5 -w 1
