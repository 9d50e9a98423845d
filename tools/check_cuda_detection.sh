#!/usr/bin/env bash
# Checks how the build finds the CUDA toolkit (third_party/cuda/cuda_configure.bzl):
# analysis only (bazel cquery), no compiler run, each step bounded. Cases: a missing
# folder, a fake toolkit (empty files where the build looks), the same toolkit with one
# file gone, the toolkit with --config=cpu_only, and the default (/usr/local/cuda).
# Prints one line per case and exits non-zero if any chose the wrong sources.
# usage: tools/check_cuda_detection.sh [bazel flags...]
set -uo pipefail  # no -e: every case runs and is reported
cd "$(dirname "$0")/.." || exit 1

fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
needed=(bin/nvcc include/cuda_runtime.h lib64/libcudart_static.a)
mkdir -p "$fake/bin" "$fake/include" "$fake/lib64"
for f in "${needed[@]}"; do : >"$fake/$f"; done
mkdir -p "$fake/partial" && cp -r "$fake/bin" "$fake/include" "$fake/partial/"

failed=0
# check NAME EXPECTED(cuda|cpu_only) FLAGS...: the sources //kernels/cuda:cuda links.
check() {
  local name=$1 want=$2
  shift 2
  local out got
  out=$(timeout 300 bazel cquery "$@" 'labels(srcs, //kernels/cuda:cuda)' 2>&1)
  if echo "$out" | grep -q '^//kernels/cuda:cpu_only.cc'; then
    got=cpu_only
  elif echo "$out" | grep -q '^//kernels/cuda:device_memory '; then
    got=cuda
  else
    echo "FAIL $name: bazel cquery gave neither build:"
    echo "$out" | tail -5
    failed=1
    return
  fi
  if [ "$got" = "$want" ]; then
    echo "ok   $name: $got"
  else
    echo "FAIL $name: $got, expected $want"
    failed=1
  fi
}

check "no toolkit (CHORUS_CUDA_PATH=/nonexistent)" cpu_only --repo_env=CHORUS_CUDA_PATH=/nonexistent "$@"
why=$(grep '^CUDA_MISSING' "$(bazel info output_base 2>/dev/null)/external/local_cuda/defs.bzl" 2>/dev/null)
case "$why" in
  *"/nonexistent"*"bin/nvcc"*) echo "ok   the reason names the folder and the file: $why" ;;
  *) echo "FAIL the reason should name /nonexistent and bin/nvcc: $why" && failed=1 ;;
esac
check "a toolkit (CHORUS_CUDA_PATH=<fake>)" cuda --repo_env=CHORUS_CUDA_PATH="$fake" "$@"
check "a toolkit given by CUDA_PATH" cuda --repo_env=CHORUS_CUDA_PATH= --repo_env=CUDA_PATH="$fake" "$@"
check "a toolkit without lib64/libcudart_static.a" cpu_only --repo_env=CHORUS_CUDA_PATH="$fake/partial" "$@"
check "a toolkit and --config=cpu_only" cpu_only --repo_env=CHORUS_CUDA_PATH="$fake" --config=cpu_only "$@"
default=cuda
for f in "${needed[@]}"; do [ -e "/usr/local/cuda/$f" ] || default=cpu_only; done
check "the default (/usr/local/cuda)" $default --repo_env=CHORUS_CUDA_PATH= --repo_env=CUDA_PATH= "$@"
exit $failed
