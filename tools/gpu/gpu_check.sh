#!/usr/bin/env bash
# The whole GPU check, in one call on the lent GPU machine (binaries built here by
# tools/gpu/stage.sh and carried in .gpu_bin/): the GPU tests, compute-sanitizer memcheck
# over them, the kernel benchmark (vs device-to-device copy, #wrong checked), and
# chorus_perf on device buffers: chorus (staged over TCP) and NCCL (two ranks on the one
# GPU, each with its own NCCL_HOSTID, so NCCL uses its socket transport between them),
# side by side. Writes everything under $OUT (or ./gpu_check_out) and prints a summary;
# exit != 0 on failure. Not yet part of it: the CUDA IPC transport (issue 4).
# NCCL: $CHORUS_PERF_NCCL_LIB, else the one PyTorch ships (nvidia.nccl), else ldconfig's.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu_check_out}
mkdir -p "$out"
bin=.gpu_bin
[ -d "$bin" ] || { echo "gpu_check.sh: $bin/ missing: run tools/gpu/stage.sh here and carry .gpu_bin" >&2; exit 2; }
fail=0
# gloo and Open MPI for chorus_perf (carried by stage.sh), for its runs only.
libs="$PWD/$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  echo "# $(date -u +%FT%TZ) $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "nvidia-smi failed"
} | tee "$out/device.txt"

echo "== tests"
"$bin/cuda_reduce_test" --gtest_output="xml:$out/cuda_reduce_test.xml" >"$out/cuda_reduce_test.log" 2>&1 || fail=1
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/cuda_reduce_test.log"
# Collectives and send/recv on device buffers, forked ranks over TCP on this GPU.
# TEST_TMPDIR: where the ranks' file:// rendezvous lives (bazel sets it at home).
mkdir -p "$out/tmp"
TEST_TMPDIR="$out/tmp" "$bin/device_api_test" --gtest_output="xml:$out/device_api_test.xml" \
  >"$out/device_api_test.log" 2>&1 || fail=1
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/device_api_test.log"

# chorus_perf --device and --backend nccl (refusals, checked sweeps).
nccl_lib=${CHORUS_PERF_NCCL_LIB:-$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)}
[ -n "$nccl_lib" ] && [ -e "$nccl_lib" ] || nccl_lib=$(ldconfig -p 2>/dev/null | awk '/libnccl.so.2 /{print $NF; exit}')
echo "NCCL: ${nccl_lib:-not found}" | tee -a "$out/device.txt"
export CHORUS_PERF_NCCL_LIB=${nccl_lib:-libnccl.so.2}
LD_LIBRARY_PATH="$libs" TEST_SRCDIR="$bin" TEST_TMPDIR="$out/tmp" "$bin/device_backends_test" --gtest_output="xml:$out/device_backends_test.xml" \
  >"$out/device_backends_test.log" 2>&1 || fail=1
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/device_backends_test.log"

echo "== compute-sanitizer memcheck"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$cs" ]; then
  "$cs" --tool memcheck --leak-check full --error-exitcode 3 "$bin/cuda_reduce_test" \
    --gtest_filter='*HostMemory*:*NInputs*' >"$out/memcheck.log" 2>&1 || fail=1
  tail -n 3 "$out/memcheck.log"
  # The staging path: gate kernel, event marks, copies, in every forked rank.
  TEST_TMPDIR="$out/tmp" "$cs" --tool memcheck --target-processes all --error-exitcode 3 "$bin/device_api_test" \
    --gtest_filter='*StreamOrder*:*SendRecv*:*Chained*' >"$out/memcheck_device_api.log" 2>&1 || fail=1
  tail -n 3 "$out/memcheck_device_api.log"
else
  echo "compute-sanitizer not found" | tee "$out/memcheck.log"
  fail=1
fi

echo "== kernel benchmark"
"$bin/cuda_reduce_bench" | tee "$out/kernel_bench.txt" || fail=1
awk '!/^#/ && $7 != 0 { bad = 1 } END { exit bad }' "$out/kernel_bench.txt" || { echo "kernel bench: #wrong != 0"; fail=1; }

echo "== chorus_perf all_reduce, device buffers, 2 ranks on one GPU"
perf_run() {  # perf_run NAME BACKEND REQUIRED VAR=VALUE...: two ranks with torchrun's variables
  local name=$1 backend=$2 required=$3 port=$((29600 + RANDOM % 300)) r pids=() bad=0
  shift 3
  for r in 0 1; do
    env LD_LIBRARY_PATH="$libs" RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "${@//@RANK@/$r}" timeout 300 "$bin/chorus/tools/perf/chorus_perf" --backend "$backend" --device \
      all_reduce -b 64K -e 256M -f 4 -n 20 -w 5 >"$out/perf_$name.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || bad=1; done
  cp "$out/perf_$name.rank0.log" "$out/perf_$name.txt"
  grep -v '^$' "$out/perf_$name.txt" | tail -n 12
  if [ $bad -ne 0 ]; then
    echo "$name: a rank failed (logs: $out/perf_$name.rank*.log)"
    [ "$required" = required ] && fail=1
    : >"$out/perf_$name.txt"
  else
    awk '$1 ~ /^[0-9]+$/ && NF >= 13 && ($9 != 0 || $13 != 0) { bad = 1 } END { exit bad }' "$out/perf_$name.txt" ||
      { echo "$name: #wrong != 0"; fail=1; }
  fi
}
perf_run chorus_ipc chorus required
perf_run chorus_tcp chorus required CHORUS_CUDA_IPC=off
perf_run nccl_socket nccl required NCCL_HOSTID=chorus_gpu_check_@RANK@
perf_run nccl_shared nccl optional NCCL_MULTI_RANK_GPU_ENABLE=1
grep -h 'device-buffer calls' "$out"/perf_chorus_*.rank0.log
busbw() { awk '$1 ~ /^[0-9]+$/ && NF >= 13 {print $1, $8}' "$out/perf_$1.txt" | sort; }  # size, out-of-place busbw
side_by_side() {  # side_by_side A B: busbw of both per size and A/B
  join <(busbw "$1") <(busbw "$2") | sort -n |
    awk -v a="$1" -v b="$2" 'BEGIN {printf "# %10s %12s %12s %8s\n", "size", a, b, a "/" b}
      {printf "%12d %12s %12s %8.2f\n", $1, $2, $3, ($3 > 0 ? $2 / $3 : 0)}'
}
side_by_side chorus_tcp nccl_socket | tee "$out/perf_chorus_tcp_vs_nccl_socket.txt"
side_by_side chorus_ipc nccl_socket | tee "$out/perf_chorus_ipc_vs_nccl_socket.txt"
[ -s "$out/perf_nccl_shared.txt" ] && side_by_side chorus_ipc nccl_shared | tee "$out/perf_chorus_ipc_vs_nccl_shared.txt"

echo "== bars"
median() { sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }
{
  ratio=$(awk '!/^#/ && $3 == 268435456 {print $6}' "$out/kernel_bench.txt" | median)
  copy=$(awk '!/^#/ && $3 == 268435456 {print $5}' "$out/kernel_bench.txt" | median)
  echo "kernel: reduce/copy at 256 MiB, median over dtypes: ${ratio:-?} (bar >= 0.9)"
  awk '$1 >= 67108864 && !/^#/ {printf "chorus_tcp/nccl_socket at %d: %.2f (bar >= 1.5)\n", $1, $4}' "$out/perf_chorus_tcp_vs_nccl_socket.txt"
  # Two ranks, S bytes each: phase 1 reads 2 x S/2 and writes S/2 per rank, phase 2
  # copies S/2 per rank (read + write): 5 S bytes of HBM traffic; busbw = S / t.
  busbw chorus_ipc | sort -n | awk -v copy="${copy:-0}" '$1 >= 67108864 && copy > 0 {lim = copy / 5;
    printf "chorus_ipc at %d: busbw %s GB/s, HBM limit %.1f GB/s (copy %s GB/s / 5): %.0f%% (bar >= 80%%)\n", $1, $2, lim, copy, 100 * $2 / lim}'
} | tee "$out/bars.txt"

echo "== result: $([ $fail -eq 0 ] && echo PASS || echo FAIL) (files in $out)"
exit $fail
