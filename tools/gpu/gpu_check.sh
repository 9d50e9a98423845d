#!/usr/bin/env bash
# The whole GPU check, in one call on the lent GPU machine (binaries built here by
# tools/gpu/stage.sh and carried in .gpu_bin/): the GPU tests, compute-sanitizer memcheck
# over them, the kernel benchmark (vs device-to-device copy, #wrong checked). Writes
# everything under $OUT (or ./gpu_check_out) and prints a summary; exit != 0 on failure.
# Not yet part of it: chorus_perf --backend nccl and the CUDA IPC transport (issue 4).
# Also runs device_api_test (collectives on device buffers, staged over TCP).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu_check_out}
mkdir -p "$out"
bin=.gpu_bin
[ -d "$bin" ] || { echo "gpu_check.sh: $bin/ missing: run tools/gpu/stage.sh here and carry .gpu_bin" >&2; exit 2; }
fail=0
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

echo "== result: $([ $fail -eq 0 ] && echo PASS || echo FAIL) (files in $out)"
exit $fail
