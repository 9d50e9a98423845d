#!/usr/bin/env bash
# The whole GPU check, in one call on the lent GPU machine (binaries built here by
# tools/gpu/stage.sh and carried in .gpu_bin/, 600 s at most):
#   carry [".gpu_bin"], command "tools/gpu/gpu_check.sh"
# In this order, each step under its own time limit, so that a hang costs one step:
#   0. whether NCCL runs two ranks on the one GPU under PyTorch (NCCL_HOSTID per rank; no
#      chorus code: nccl_torch_probe.py), and which NCCL setting does so in chorus_perf
#      (then with its cuMem/NVLS/P2P/SHM paths off): the first that does is used from then on
#   0b. nccl-tests, unmodified (tools/gpu/nccl_tests.sh, about 150 s, taken from step 4's
#      time): all_reduce, all_gather, broadcast, reduce, reduce_scatter, alltoall and
#      sendrecv_perf, -b 8 -e 256M -f 4 -c 1, two ranks on GPU 0, MPI mode over chorus's
#      minimal MPI (tools/nccl_tests/mpi), through chorus's libnccl.so.2 and then through
#      NCCL (step 0's setting): #wrong and busbw side by side in tables.txt; a run through
#      chorus that fails or counts #wrong != 0 fails the check
#   1. the GPU tests: kernels vs the CPU, every collective on device buffers (CUDA IPC
#      and staged over TCP, 2 and 3 ranks on the one GPU), stream order, misuse; the
#      device backends of chorus_perf
#   1b. torch_chorus built against this machine's torch and run on CUDA tensors, two
#      ranks on the one GPU (tools/gpu/torch_gpu.sh, 120 s at most)
#   1c. PyTorch's own NCCL backend over chorus's libnccl.so.2 (LD_PRELOAD) against NCCL:
#      every torch.distributed op and 5 DDP steps, two ranks on the one GPU, each result
#      checked against the CPU and against NCCL's run; first, the ncclX torch imports that
#      chorus lacks (tools/gpu/torch_nccl_preload.sh, 75 s at most)
#   2. the kernel benchmark (reduction vs device-to-device copy, #wrong checked), and
#      timeslice_probe: what handing the GPU between two processes costs a round, by
#      interprocess events (CHORUS_CUDA_IPC_SYNC=events) against stream memory operations
#      on flags in shared host memory or in device memory mapped through CUDA IPC (what
#      CUDA IPC calls use by default) (a diagnostic, not counted; again under MPS in step 3)
#   3. chorus_perf all_reduce on device buffers, two ranks on the one GPU, side by side:
#        chorus_ipc   chorus through CUDA IPC at every size (CHORUS_CUDA_IPC=always), its
#                     all_reduce on one GPU led by rank 0 (the default)
#        chorus_ipc_split  the same, split (CHORUS_CUDA_IPC_ONE_GPU=split), as across GPUs
#        chorus_ipc_events  chorus_ipc with the streams ordered by interprocess events
#                     (CHORUS_CUDA_IPC_SYNC=events) instead of flags in device memory
#        chorus_auto  chorus with its defaults (stream form: through CUDA IPC at every size)
#        chorus_tcp   chorus staged over TCP (CHORUS_CUDA_IPC=off), as between two hosts
#                     (its defaults: every copy enqueued at the call behind signal flags,
#                     a TCP channel per core of each rank, at most 8)
#        chorus_tcp_lanes1  the same over one TCP channel (CHORUS_TCP_LANES=1)
#        chorus_tcp_gate    the same with the semaphore wait kernel (CHORUS_STAGING_SYNC=kernel)
#        nccl_socket  NCCL with one NCCL_HOSTID per rank (NCCL then uses its socket transport)
#        nccl_shared  NCCL with NCCL_MULTI_RANK_GPU_ENABLE=1 (newer NCCL only; optional)
#      device calls in stream order, one stream wait a loop, as nccl-tests times NCCL
#      (chorus_ipc also with --blocking: each call waited for); the same under MPS (both
#      ranks' work shares the GPU instead of taking turns); chorus and Gloo on host
#      buffers over the same loopback (chorus with 1, 2 and 4 TCP channels); and the three
#      bars: kernel >= 0.9x copy; chorus_tcp >= 1.5x nccl_socket at 64-256 MiB;
#      chorus_ipc >= 80% of the HBM limit at the copy bandwidth (bytes read + written per
#      S-byte all_reduce of two ranks: 4 S led by rank 0, 5 S split)
#   4. compute-sanitizer memcheck over the kernel tests and the device API tests, with
#      what time is left (less steps 1b's 120 s and 1c's 75 s, taken from what memcheck
#      had left)
# What comes back (at most 8 files): $OUT/summary.txt (this output), $OUT/tables.txt
# (benchmark, side-by-side tables, bars), $OUT/logs.tgz (every log and test XML).
# Exit != 0 when a test or a run fails (the bars are reported, not enforced).
# NCCL: $CHORUS_PERF_NCCL_LIB, else the one PyTorch ships (nvidia.nccl), else ldconfig's.
set -uo pipefail  # no -e: every check runs; failures are counted
cd "$(dirname "$0")/../.." || exit
out=${OUT:-gpu_check_out}
mkdir -p "$out"
exec > >(tee "$out/summary.txt") 2>&1
tee_pid=$!
bin=.gpu_bin
[ -d "$bin" ] || { echo "gpu_check.sh: $bin/ missing: run tools/gpu/stage.sh here and carry .gpu_bin"; exit 2; }
work=$(mktemp -d)   # logs; packed into $OUT/logs.tgz at the end
tmp=$(mktemp -d)    # the tests' file:// rendezvous (TEST_TMPDIR), not worth bringing back
tables="$work/tables.txt"
start=$SECONDS
fail=0
# gloo and Open MPI for chorus_perf (carried by stage.sh), for its runs only.
libs="$PWD/$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
. tools/gpu/common.sh
# No RDMA on the GPU machine: keep the libraries from looking (and from printing about it).
export CHORUS_TRANSPORT=tcp NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo

finish() {
  cp "$tables" "$out/tables.txt" 2>/dev/null
  tar -czf "$out/logs.tgz" -C "$work" . 2>/dev/null
  echo "== result: $([ $fail -eq 0 ] && echo PASS || echo FAIL) after $((SECONDS - start)) s (files in $out)"
  rm -rf "$tmp"
  exec >&- 2>&-
  wait "$tee_pid" 2>/dev/null
  exit $fail
}
# Seconds the whole check may take (GPU_CHECK_SECONDS, 570 by default: a 600 s call with a
# margin; the whole check wants about 500 s, memcheck the rest).
budget=${GPU_CHECK_SECONDS:-570}
left() { echo $((budget - (SECONDS - start))); }  # seconds left of the check
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo "$l"; }  # a step's limit, within what is left

# reap WHAT: ends what a stopped step left running from the carried binaries (a test's
# chorus_perf ranks, say: their semaphores and kernels would share the GPU with the next
# step's measurements) and says so.
reap() {
  local left
  left=$(pgrep -f "$bin/" | tr '\n' ' ')
  [ -z "$left" ] && return
  echo "$1 left processes running ($left): killed"
  pkill -9 -f "$bin/"
  sleep 1
}
# What else runs on the GPU (nothing should, while measuring).
gpu_apps() { nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader 2>/dev/null | grep -c . ; }

# gtest NAME SECONDS [ENV...]: runs a carried test binary, prints its verdicts and, where
# it failed, the first failure lines.
gtest() {
  local name=$1 limit
  limit=$(cap "$2")
  shift 2
  if [ "$limit" -lt 20 ]; then echo "$name: skipped, no time left"; fail=1; return; fi
  env "$@" TEST_TMPDIR="$tmp" timeout "$limit" "$bin/$name" --gtest_output="xml:$work/$name.xml" >"$work/$name.log" 2>&1
  local rc=$?
  reap "$name"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$work/$name.log"
  if [ $rc -ne 0 ]; then
    fail=1
    [ $rc -eq 124 ] && echo "$name: stopped after $limit s"
    grep -E 'Failure|error|FAILED|rank [0-9]+ (failed|exited)' "$work/$name.log" | head -n 25
  fi
}

{
  echo "# $(date -u +%FT%TZ) $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "nvidia-smi failed"
  # What the host side of the staged path runs on (TCP over loopback).
  echo "# $(uname -r); $(nproc) CPUs: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
  echo "# $(sysctl -n net.core.wmem_max net.core.rmem_max net.ipv4.tcp_wmem net.ipv4.tcp_rmem 2>/dev/null | tr '\n\t' ' ')"
} | tee "$work/device.txt"
nccl_lib=$(find_nccl)
echo "NCCL: ${nccl_lib:-not found}" | tee -a "$work/device.txt"

# perf_run NAME BACKEND required|optional VAR=VALUE...: two ranks with torchrun's variables
# ($sweep: chorus_perf's sizes and counts, if not the default; $perf_timeout: its --timeout;
# $perf_host: host buffers instead of --device)
perf_run() {
  local name=$1 backend=$2 required=$3 bad=0 limit dev=--device
  [ -n "${perf_host:-}" ] && dev=""
  shift 3
  limit=$(cap 90)
  if [ "$limit" -lt 20 ]; then
    echo "$name: skipped, no time left"
    [ "$required" = required ] && fail=1
    : >"$work/perf_$name.txt"
    return
  fi
  local args="--backend $backend $dev --timeout ${perf_timeout:-60} all_reduce"
  perf_ranks "$work/perf_$name" "$limit" "$args ${sweep:--b 64K -e 256M -f 4 -n 20 -w 5} ${perf_flags:-}" "$@" || bad=1
  reap "$name"
  cp "$work/perf_$name.rank0.log" "$work/perf_$name.txt"
  grep -v '^$' "$work/perf_$name.txt" | tail -n 12
  if [ $bad -ne 0 ]; then
    echo "$name: a rank failed (logs: perf_$name.rank*.log in logs.tgz)"
    tail -n 5 "$work/perf_$name.rank1.log"
    [ "$required" = required ] && fail=1
    : >"$work/perf_$name.txt"
  else
    awk '$1 ~ /^[0-9]+$/ && NF >= 13 && ($9 != 0 || $13 != 0) { bad = 1 } END { exit bad }' "$work/perf_$name.txt" ||
      { echo "$name: #wrong != 0"; fail=1; }
  fi
}

# NCCL's socket transport between two ranks on one GPU: the first of these settings
# that runs a short sweep is used for every NCCL run below and for the tests (NCCL's
# warnings are in the logs: NCCL_DEBUG=WARN).
export NCCL_DEBUG=WARN
echo "== 0. which NCCL setting runs two ranks on this GPU ($(left) s left)"
# PyTorch's NCCL, no chorus code (its rows: size, time, busbw, #wrong).
if python3 -c 'import torch' 2>/dev/null; then
  timeout "$(cap 100)" python3 tools/gpu/nccl_torch_probe.py --timeout "$(cap 90)" >"$work/perf_nccl_torch.txt" 2>"$work/nccl_torch.log"
  echo "torch probe exit $?" >>"$work/nccl_torch.log"
  tee -a "$work/device.txt" <"$work/perf_nccl_torch.txt"
else
  echo "no PyTorch here: NCCL not probed through it" | tee "$work/perf_nccl_torch.txt"
fi
nccl_env="" nccl_works=""
# (2026-11-25, NCCL 2.28.9 from PyTorch's wheel: every setting faulted with an illegal
# address right after init, while NCCL under PyTorch ran: chorus_perf had handed NCCL
# host buffers for the header's host names. Fixed; the first setting should run now.)
for try in "" "NCCL_CUMEM_ENABLE=0" \
  "NCCL_CUMEM_ENABLE=0 NCCL_CUMEM_HOST_ENABLE=0 NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1" \
  "NCCL_RUNTIME_CONNECT=0 NCCL_GRAPH_REGISTER=0 NCCL_LOCAL_REGISTER=0 NCCL_PROTO=Simple NCCL_ALGO=Ring" \
  "NCCL_CUMEM_ENABLE=0 NCCL_CUMEM_HOST_ENABLE=0 NCCL_RUNTIME_CONNECT=0 NCCL_GRAPH_REGISTER=0 NCCL_LOCAL_REGISTER=0 NCCL_NVLS_ENABLE=0 NCCL_PROTO=Simple NCCL_ALGO=Ring NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ALLOC"; do
  # shellcheck disable=SC2086
  perf_timeout=15 sweep="-b 64K -e 64K -n 2 -w 1" perf_run nccl_probe nccl optional NCCL_HOSTID=chorus_gpu_check_@RANK@ $try >/dev/null
  if [ -s "$work/perf_nccl_probe.txt" ]; then
    nccl_env=$try nccl_works=1
    echo "NCCL runs with: ${try:-its defaults} (and NCCL_HOSTID per rank)" | tee -a "$work/device.txt"
    break
  fi
  echo "NCCL with ${try:-its defaults}: $(grep -h -m1 -E 'NCCL WARN|chorus_perf:|error|failed' "$work"/perf_nccl_probe.rank*.log | head -n 1)"
  tries=$((${tries:-0} + 1))
  for r in 0 1; do cp "$work/perf_nccl_probe.rank$r.log" "$work/nccl_probe_failed_$tries.rank$r.log" 2>/dev/null; done
done
# shellcheck disable=SC2163,SC2086
[ -n "$nccl_env" ] && export $nccl_env

echo "== 0b. nccl-tests through chorus's libnccl.so.2 and through NCCL ($(left) s left)"
limit=$(cap "${GPU_CHECK_NCCL_TESTS_SECONDS:-150}")  # 0: skipped
if [ "$limit" -ge 30 ]; then
  NCCL_TESTS_SECONDS=$((limit - 10)) CHORUS_PERF_NCCL_LIB=$([ -n "$nccl_works" ] && echo "$nccl_lib") \
    timeout -k 5 "$limit" tools/gpu/nccl_tests.sh "$work" "$tables" || { echo "nccl-tests: failed (nccl_tests/ in logs.tgz)"; fail=1; }
  reap nccl_tests
else
  echo "nccl-tests: skipped (GPU_CHECK_NCCL_TESTS_SECONDS=${GPU_CHECK_NCCL_TESTS_SECONDS:-150}, $(left) s left)"
fi

echo "== 1. tests ($(left) s left)"
gtest cuda_reduce_test 90
gtest device_api_test 240
gtest device_backends_test 150 LD_LIBRARY_PATH="$libs" TEST_SRCDIR="$bin"

# torch_chorus on CUDA tensors under this machine's torch 2.x (built here from .gpu_bin/torch_chorus).
echo "== 1b. torch_chorus, CUDA tensors ($(left) s left)"
tools/gpu/torch_gpu.sh "$(cap 120)" "$work/torch" || fail=1

# PyTorch's NCCL backend through chorus's libnccl.so.2 (LD_PRELOAD) vs through NCCL.
echo "== 1c. PyTorch's NCCL backend over chorus's libnccl.so.2 ($(left) s left)"
limit=$(cap "${GPU_CHECK_PRELOAD_SECONDS:-75}")  # 0: skipped, not counted
if [ "$limit" -ge 30 ]; then
  CHORUS_PERF_NCCL_LIB=$nccl_lib timeout -k 5 "$limit" tools/gpu/torch_nccl_preload.sh $((limit - 5)) "$work/torch_preload" "$tables" ||
    { echo "1c: failed (torch_preload/ in logs.tgz)"; fail=1; }
else
  echo "1c: skipped (GPU_CHECK_PRELOAD_SECONDS=${GPU_CHECK_PRELOAD_SECONDS:-75}, $(left) s left)"
  [ "${GPU_CHECK_PRELOAD_SECONDS:-75}" != 0 ] && fail=1
fi

echo "== 2. kernel benchmark, timeslice_probe ($(left) s left; other processes on the GPU: $(gpu_apps))"
timeout "$(cap 90)" "$bin/cuda_reduce_bench" >"$work/kernel_bench.txt" 2>&1 || { echo "kernel bench failed or timed out"; fail=1; }
tee -a "$tables" <"$work/kernel_bench.txt"
awk '!/^#/ && NF >= 7 && $7 != 0 { bad = 1 } END { exit bad }' "$work/kernel_bench.txt" || { echo "kernel bench: #wrong != 0"; fail=1; }
# probe NAME: timeslice_probe around a 64 KiB and a 256 MiB copy kernel (a diagnostic:
# its failure is reported, not counted).
probe() {
  local b
  for b in 65536 268435456; do
    if [ "$(left)" -lt 60 ]; then echo "timeslice_probe ($1, $b B): skipped, no time left"; continue; fi
    timeout 40 "$bin/timeslice_probe" --bytes "$b" --rounds 200 || echo "timeslice_probe ($1, $b B): failed or timed out"
    reap timeslice_probe
  done 2>&1 | tee "$work/probe_$1.txt" | tee -a "$tables"
}
probe no_mps

echo "== 3. chorus_perf all_reduce, device buffers, 2 ranks on one GPU ($(left) s left; other processes on the GPU: $(gpu_apps))"
# The bars' runs first (the staged path beside NCCL, then CUDA IPC), the rest after.
perf_run chorus_tcp chorus required CHORUS_CUDA_IPC=off
perf_run chorus_tcp_lanes1 chorus required CHORUS_CUDA_IPC=off CHORUS_TCP_LANES=1
if [ -n "$nccl_works" ]; then
  perf_run nccl_socket nccl required NCCL_HOSTID=chorus_gpu_check_@RANK@
else
  echo "nccl_socket: skipped, NCCL ran under none of step 0's settings (nccl_probe_failed_*.log in logs.tgz)"
  fail=1
  : >"$work/perf_nccl_socket.txt"
fi
perf_run chorus_ipc chorus required CHORUS_CUDA_IPC=always
perf_run chorus_ipc_split chorus required CHORUS_CUDA_IPC=always CHORUS_CUDA_IPC_ONE_GPU=split
perf_run chorus_ipc_events chorus required CHORUS_CUDA_IPC=always CHORUS_CUDA_IPC_SYNC=events
perf_run nccl_shared nccl optional NCCL_MULTI_RANK_GPU_ENABLE=1
# Under MPS, where both ranks' work shares the GPU instead of taking turns in time slices
# (NVIDIA's way for processes to share one GPU): CUDA IPC led and split, staged, NCCL.
mps=$(command -v nvidia-cuda-mps-control)
if [ -z "$mps" ]; then
  echo "MPS runs: skipped, no nvidia-cuda-mps-control"
else
  export CUDA_MPS_PIPE_DIRECTORY="$tmp/mps_pipe" CUDA_MPS_LOG_DIRECTORY="$tmp/mps_log"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if timeout 20 "$mps" -d; then
    sleep 1
    probe mps
    mps_sweep="-b 64K -e 256M -f 4 -n 20 -w 5"  # 64 MiB too: beside the no-MPS rows
    sweep=$mps_sweep perf_run chorus_ipc_mps chorus optional CHORUS_CUDA_IPC=always
    sweep=$mps_sweep perf_run chorus_ipc_split_mps chorus optional CHORUS_CUDA_IPC=always CHORUS_CUDA_IPC_ONE_GPU=split
    sweep=$mps_sweep perf_run chorus_tcp_mps chorus optional CHORUS_CUDA_IPC=off
    [ -n "$nccl_works" ] && sweep=$mps_sweep perf_run nccl_socket_mps nccl optional NCCL_HOSTID=chorus_gpu_check_@RANK@
    echo quit | timeout 20 "$mps"
  else
    echo "MPS daemon did not start"
  fi
  cp -r "$CUDA_MPS_LOG_DIRECTORY" "$work/mps_log" 2>/dev/null
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
fi
perf_flags=--blocking perf_run chorus_ipc_blocking chorus required CHORUS_CUDA_IPC=always
perf_run chorus_tcp_gate chorus required CHORUS_CUDA_IPC=off CHORUS_STAGING_SYNC=kernel
# The defaults (the footer says which way the calls went).
perf_run chorus_auto chorus required
# What the staged path's wire gives: the same sweep on host buffers (no GPU copies),
# with 1, 2 and 4 TCP channels at 256 MiB, and Gloo's on the same loopback (chorus_perf
# carries libgloo) for scale.
perf_host=1 sweep="-b 1M -e 256M -f 16 -n 10 -w 3" perf_run chorus_host chorus optional
for k in 1 2 4; do
  perf_host=1 sweep="-b 256M -e 256M -n 5 -w 2" perf_run "chorus_host_lanes$k" chorus optional CHORUS_TCP_LANES=$k
done
perf_host=1 sweep="-b 256M -e 256M -n 5 -w 2" perf_run chorus_host_chunk2m chorus optional CHORUS_CHUNK_BYTES=2M
perf_host=1 sweep="-b 1M -e 256M -f 16 -n 10 -w 3" perf_run gloo_host gloo optional
grep -h 'device-buffer calls' "$work"/perf_chorus_*.rank0.log
grep -o 'tcp/[a-z_]* on [^,]*, [0-9]* channels\?' "$work"/perf_chorus_tcp*.rank0.log "$work"/perf_chorus_host*.rank0.log
grep -q 'staged (0 with signal' "$work/perf_chorus_tcp.rank0.log" &&
  { echo "chorus_tcp: no call went with signal flags (see its footer and log)"; fail=1; }
for run in chorus_ipc chorus_ipc_split chorus_ipc_blocking chorus_ipc_events; do
  grep -q 'through CUDA IPC ([0-9]* with flags), 0 staged' "$work/perf_$run.rank0.log" ||
    { echo "$run: not every call went through CUDA IPC (see its footer)"; fail=1; }
done
# Flags unless asked for events (the footer: "N through CUDA IPC (M with flags)").
for run in chorus_ipc chorus_ipc_split chorus_ipc_events; do
  grep -o '[0-9]* through CUDA IPC ([0-9]* with flags)' "$work/perf_$run.rank0.log" | awk -v run="$run" '
    {all = $1; flags = substr($5, 2)} END {want = (run ~ /events/ ? 0 : all)
      if (flags != want) {print run ": " flags " of " all " calls through CUDA IPC with flags, want " want; exit 1}}' ||
    fail=1
done
# size, out-of-place busbw (chorus_perf's rows; perf_nccl_torch.txt rows: size time busbw #wrong)
busbw() { awk '$1 ~ /^[0-9]+$/ && NF >= 13 {print $1, $8} $1 ~ /^[0-9]+$/ && NF == 4 && $4 == 0 {print $1, $3}' "$work/perf_$1.txt" 2>/dev/null | sort; }
side_by_side() {  # side_by_side A B: busbw of both per size and A/B
  join <(busbw "$1") <(busbw "$2") | sort -n |
    awk -v a="$1" -v b="$2" 'BEGIN {printf "# %10s %12s %12s %8s\n", "size", a, b, a "/" b}
      {printf "%12d %12s %12s %8.2f\n", $1, $2, $3, ($3 > 0 ? $2 / $3 : 0)}'
}
{
  side_by_side chorus_tcp nccl_socket | tee "$work/tcp_vs_nccl.txt"
  side_by_side chorus_ipc nccl_socket
  side_by_side chorus_ipc chorus_ipc_split
  side_by_side chorus_ipc chorus_ipc_events
  side_by_side chorus_ipc chorus_ipc_blocking
  side_by_side chorus_tcp nccl_torch | tee "$work/tcp_vs_torch.txt"
  side_by_side chorus_tcp chorus_tcp_lanes1
  side_by_side chorus_tcp_lanes1 nccl_socket
  side_by_side chorus_tcp chorus_tcp_gate
  side_by_side chorus_auto chorus_ipc
  side_by_side chorus_tcp chorus_host
  side_by_side chorus_host gloo_host
  for k in 1 2 4; do side_by_side "chorus_host_lanes$k" chorus_host; done
  side_by_side chorus_host_chunk2m chorus_host
  echo "# under MPS"
  side_by_side chorus_ipc_mps chorus_ipc
  side_by_side chorus_ipc_split_mps chorus_ipc_split
  side_by_side chorus_tcp_mps chorus_tcp
  side_by_side chorus_tcp_mps nccl_socket_mps
  [ -s "$work/perf_nccl_shared.txt" ] && side_by_side chorus_ipc nccl_shared
} | tee -a "$tables"

echo "== bars"
median() { sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }
{
  ratio=$(awk '!/^#/ && $2 == "sum" && $3 == 268435456 {print $6}' "$work/kernel_bench.txt" | median)
  copy=$(awk '!/^#/ && $2 == "sum" && $3 == 268435456 {print $5}' "$work/kernel_bench.txt" | median)
  echo "kernel: reduce/copy at 256 MiB, median over dtypes: ${ratio:-?} (bar >= 0.9)"
  awk '$1 >= 67108864 && !/^#/ {printf "chorus_tcp/nccl_socket at %d: %.2f (bar >= 1.5)\n", $1, $4}' "$work/tcp_vs_nccl.txt"
  side_by_side chorus_tcp_mps nccl_socket_mps | awk '$1 >= 67108864 && !/^#/ {printf "under MPS: chorus_tcp/nccl_socket at %d: %.2f (bar >= 1.5)\n", $1, $4}'
  awk '$1 >= 67108864 && !/^#/ {printf "chorus_tcp/nccl_torch (NCCL under PyTorch) at %d: %.2f (bar >= 1.5)\n", $1, $4}' "$work/tcp_vs_torch.txt"
  # Two ranks, S bytes each; busbw = S / t. Led by rank 0: both inputs read, both
  # outputs written once: 4 S bytes of HBM traffic. Split: phase 1 reads 2 x S/2 and
  # writes S/2 per rank, phase 2 copies S/2 per rank (read + write): 5 S.
  for run in chorus_ipc:4 chorus_ipc_split:5 chorus_ipc_events:4 chorus_ipc_mps:4 chorus_ipc_split_mps:5; do
    busbw "${run%:*}" | sort -n | awk -v copy="${copy:-0}" -v run="${run%:*}" -v k="${run#*:}" '$1 >= 67108864 && copy > 0 {
      lim = copy / k
      printf "%s at %d: busbw %s GB/s, HBM limit %.1f GB/s (copy %s GB/s / %d): %.0f%% (bar >= 80%%)\n", run, $1, $2, lim, copy, k, 100 * $2 / lim}'
  done
} | tee -a "$tables"

echo "== 4. compute-sanitizer memcheck ($(left) s left)"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ ! -x "$cs" ]; then
  echo "compute-sanitizer not found"
  fail=1
else
  # API errors chorus expects and handles (a pointer CUDA does not know, a declined
  # mapping) are not memory errors: only those fail the check.
  memcheck() {  # memcheck NAME FILTER [sanitizer options]
    local name=$1 filter=$2 limit
    shift 2
    limit=$(( $(left) - 10 ))
    [ "$limit" -gt 120 ] && limit=120
    if [ "$limit" -lt 30 ]; then echo "memcheck $name: skipped, no time left"; return; fi
    TEST_TMPDIR="$tmp" timeout "$limit" "$cs" --tool memcheck --report-api-errors no --error-exitcode 3 "$@" \
      "$bin/$name" --gtest_filter="$filter" >"$work/memcheck_$name.log" 2>&1
    local rc=$?
    tail -n 3 "$work/memcheck_$name.log"
    if [ $rc -eq 124 ]; then echo "memcheck $name: stopped after $limit s (not a finding)";
    elif [ $rc -ne 0 ]; then fail=1; grep -E '=========.*(Invalid|Error|error)' "$work/memcheck_$name.log" | head -n 15; fi
  }
  memcheck cuda_reduce_test '*HostMemory*:*NInputs*' --leak-check full
  memcheck device_api_test '*StreamOrder*:*Chained*:*SendRecv*' --target-processes all
fi

finish
