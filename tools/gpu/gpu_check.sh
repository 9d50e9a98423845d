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
    --gtest_filter='*StreamOrder*:*SendRecv*' >"$out/memcheck_device_api.log" 2>&1 || fail=1
  tail -n 3 "$out/memcheck_device_api.log"
else
  echo "compute-sanitizer not found" | tee "$out/memcheck.log"
  fail=1
fi

echo "== kernel benchmark"
"$bin/cuda_reduce_bench" | tee "$out/kernel_bench.txt" || fail=1
awk '!/^#/ && $7 != 0 { bad = 1 } END { exit bad }' "$out/kernel_bench.txt" || { echo "kernel bench: #wrong != 0"; fail=1; }

echo "== chorus_perf: chorus (TCP, device buffers) vs NCCL (socket transport), 2 ranks on one GPU"
perf_run() {  # perf_run NAME BACKEND: two ranks, torchrun's variables, one NCCL_HOSTID each
  local name=$1 backend=$2 port=$((29600 + RANDOM % 300)) r pids=() bad=0
  for r in 0 1; do
    LD_LIBRARY_PATH="$libs" RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NCCL_HOSTID="chorus_gpu_check_$r" \
      timeout 300 "$bin/chorus/tools/perf/chorus_perf" --backend "$backend" --device -b 64K -e 256M -f 4 -n 10 -w 3 \
      >"$out/perf_$name.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || bad=1; done
  cp "$out/perf_$name.rank0.log" "$out/perf_$name.txt"
  grep -v '^$' "$out/perf_$name.txt" | tail -n 9
  if [ $bad -ne 0 ]; then
    echo "$name: a rank failed (logs: $out/perf_$name.rank*.log)"
    fail=1
  else
    awk '$1 ~ /^[0-9]+$/ && NF >= 13 && ($9 != 0 || $13 != 0) { bad = 1 } END { exit bad }' "$out/perf_$name.txt" ||
      { echo "$name: #wrong != 0"; fail=1; }
  fi
}
perf_run chorus chorus
perf_run nccl nccl
# busbw side by side (out of place) and chorus / NCCL.
join <(awk '$1 ~ /^[0-9]+$/ && NF >= 13 {print $1, $8}' "$out/perf_chorus.txt" | sort) \
     <(awk '$1 ~ /^[0-9]+$/ && NF >= 13 {print $1, $8}' "$out/perf_nccl.txt" | sort) | sort -n |
  awk 'BEGIN {print "# size  chorus_busbw  nccl_busbw  chorus/nccl"} {printf "%10d %10s %10s %8.2f\n", $1, $2, $3, ($3 > 0 ? $2 / $3 : 0)}' |
  tee "$out/perf_chorus_vs_nccl.txt"

echo "== result: $([ $fail -eq 0 ] && echo PASS || echo FAIL) (files in $out)"
exit $fail
