#!/usr/bin/env bash
# Builds the GPU binaries here (Bazel, nvcc) and copies them into .gpu_bin/ (ignored by
# git), the folder the device call carries. Then, in ONE device call:
#   carry [".gpu_bin"], command "tools/gpu/gpu_check.sh"
# usage: tools/gpu/stage.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
targets=(//tests/kernels:cuda_reduce_test //tests/chorus:device_api_test //kernels/cuda:cuda_reduce_bench
  //tools/perf:chorus_perf //tests/perf:device_backends_test //tools/gpu:timeslice_probe
  //nccl:libnccl.so.2 //tools/nccl_tests/mpi:libmpi.so //tools/launcher:chorusrun)
bazel build -c opt "${targets[@]}" >/dev/null 2>&1 || { echo "stage.sh: bazel build -c opt ${targets[*]} failed" >&2; exit 1; }
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
rm -rf .gpu_bin && mkdir -p .gpu_bin
cp "$bin/tests/kernels/cuda_reduce_test" "$bin/tests/chorus/device_api_test" "$bin/kernels/cuda/cuda_reduce_bench" \
  "$bin/tests/perf/device_backends_test" "$bin/tools/gpu/timeslice_probe" .gpu_bin/
# Where device_backends_test looks for chorus_perf (TEST_SRCDIR=.gpu_bin).
mkdir -p .gpu_bin/chorus/tools/perf .gpu_bin/lib
cp "$bin/tools/perf/chorus_perf" .gpu_bin/chorus/tools/perf/
# chorus_perf links Debian's libgloo and Open MPI (and what they pull in), which the GPU
# machine need not have: carry them (gpu_check.sh puts .gpu_bin/lib on LD_LIBRARY_PATH).
ldd .gpu_bin/chorus/tools/perf/chorus_perf .gpu_bin/device_backends_test | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
  grep -vE '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libz|libudev|ld-linux[^/]*)\.so' | sort -u |
  while read -r lib; do cp -L "$lib" .gpu_bin/lib/; done
# Nothing may be missing there (a Bazel test linked against its _solib_ tree would not start).
missing=$(ldd .gpu_bin/* .gpu_bin/chorus/tools/perf/chorus_perf 2>/dev/null | grep -B20 'not found' | grep -E '^\S|not found' || true)
if echo "$missing" | grep -q 'not found'; then
  echo "stage.sh: libraries not found (link these targets statically):" >&2
  echo "$missing" >&2
  exit 1
fi
# nccl-tests (tools/gpu/nccl_tests.sh): chorus's libnccl.so.2 and the MPI shim in folders
# of their own (LD_LIBRARY_PATH picks chorus or the real NCCL), chorusrun, the unmodified
# sources, and the seven binaries built here where nvcc is (else built there).
nt=.gpu_bin/nccl_tests
mkdir -p "$nt/chorus" "$nt/mpi"
cp "$bin/nccl/libnccl.so.2" "$nt/chorus/"
cp "$bin/tools/nccl_tests/mpi/libmpi.so" "$nt/mpi/"
cp "$bin/tools/launcher/chorusrun" "$nt/"
cp -r "${NCCL_TESTS_SRC:-/work/shared/peers/nccl-tests}" "$nt/src"
rc=0
tools/nccl_tests/build.sh "$nt/bin" "$nt/chorus/libnccl.so.2" "$nt/mpi/libmpi.so" "$nt/src" || rc=$?
[ $rc -eq 0 ] || [ $rc -eq 2 ] || { echo "stage.sh: tools/nccl_tests/build.sh failed" >&2; exit 1; }
# torch_chorus's sources and chorus as an archive, for the GPU machine's torch (step 1b).
tools/gpu/torch_stage.sh || echo "stage.sh: torch_chorus not staged (gpu_check.sh step 1b will say so)" >&2
# The device call carries 64 MiB in all: no debug sections (symbols stay, for backtraces).
find .gpu_bin -maxdepth 1 -type f -exec strip --strip-debug {} +
strip --strip-debug .gpu_bin/chorus/tools/perf/chorus_perf "$nt"/chorus/* "$nt"/mpi/* "$nt/chorusrun"
# The working tree travels with it: packed into one compressed bundle, which the GPU
# scripts unpack in place (common.sh), what is carried stays well below the limit.
tar -C .gpu_bin -czf .gpu_bundle.tgz . && rm -rf .gpu_bin && mkdir .gpu_bin && mv .gpu_bundle.tgz .gpu_bin/bundle.tgz
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
size=$(($(du -sb .gpu_bin | cut -f1) + tree))
[ "$size" -lt $((64 << 20)) ] || { echo "stage.sh: .gpu_bin and the tree are $((size >> 20)) MiB, more than the 64 MiB a device call carries" >&2; exit 1; }
echo "stage.sh: .gpu_bin ready ($((size >> 20)) MiB with the tree): carry it to the device and run tools/gpu/gpu_check.sh"
