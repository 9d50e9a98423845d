#!/usr/bin/env bash
# The TCP side of the GPU check alone, in about two minutes (binaries from
# tools/gpu/stage.sh, carried in .gpu_bin/): 2-rank all_reduce on host buffers with 1 to 8
# TCP channels and 512 KiB or 2 MiB chunks; on device buffers staged over TCP (chorus's
# defaults, and one channel) beside NCCL over its sockets (one NCCL_HOSTID per rank); the
# threads' CPU use during a 4-channel run. For tuning the channels on a many-core machine:
#   carry [".gpu_bin"], command "tools/gpu/tcp_sweep.sh"
set -euo pipefail
cd "$(dirname "$0")/../.." || exit
out=${OUT:-tcp_sweep_out}
mkdir -p "$out"
exec > >(tee "$out/tcp_sweep.txt") 2>&1
bin=.gpu_bin
libs="$PWD/$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
. tools/gpu/common.sh
export CHORUS_TRANSPORT=tcp NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo
find_nccl >/dev/null
echo "# $(date -u +%FT%TZ) $(nproc) CPUs; NCCL: $CHORUS_PERF_NCCL_LIB"

# run NAME BACKEND "SWEEP" [--device] [ENV...]: two ranks, rank 0's rows.
run() {
  local name=$1 backend=$2 sweep=$3 dev=$4
  shift 4
  perf_ranks "$out/$name" 60 "--backend $backend $dev --timeout 30 all_reduce $sweep" "$@" || echo "$name: a rank failed"
  echo "## $name: $(grep -o 'tcp/[a-z_]* on [^,]*, [0-9]* channels\?' "$out/$name.rank0.log")"
  awk '$1 ~ /^[0-9]+$/ && NF >= 13 {printf "%12d busbw %7s (in place %7s) #wrong %s %s\n", $1, $8, $12, $9, $13}' "$out/$name.rank0.log"
}

host="-b 16M -e 256M -f 16 -n 5 -w 2"
for k in 1 2 4 8; do run "host_lanes$k" chorus "$host" "" CHORUS_TCP_LANES=$k; done
run host_lanes4_chunk2m chorus "$host" "" CHORUS_TCP_LANES=4 CHORUS_CHUNK_BYTES=2M
run host_lanes8_chunk2m chorus "$host" "" CHORUS_TCP_LANES=8 CHORUS_CHUNK_BYTES=2M
run gloo_host gloo "$host" ""
# Threads of one rank during a longer 4-channel run.
run host_lanes4_long chorus "-b 256M -e 256M -n 30 -w 2" "" CHORUS_TCP_LANES=4 &
long=$!
sleep 4
top -H -b -n 1 -w 160 | head -n 24
wait "$long"  # (a bare wait would wait for tee too)
dev="-b 1M -e 256M -f 4 -n 10 -w 3"
run chorus_tcp chorus "$dev" --device CHORUS_CUDA_IPC=off
run chorus_tcp_lanes1 chorus "$dev" --device CHORUS_CUDA_IPC=off CHORUS_TCP_LANES=1
run nccl_socket nccl "$dev" --device NCCL_HOSTID=chorus_tcp_sweep_@RANK@
echo "# done"
