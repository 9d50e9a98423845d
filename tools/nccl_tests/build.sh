#!/usr/bin/env bash
# Builds NVIDIA's nccl-tests, unmodified, in MPI mode against chorus: its include/nccl.h
# and libnccl.so.2, and the minimal MPI over chorus (mpi.h, libmpi.so). The seven perf
# binaries the GPU check runs, nothing else; one shared libverifiable.so (DSO=1) and
# CUDA's runtime linked statically, so OUTDIR carries to another machine as it is.
# usage: tools/nccl_tests/build.sh OUTDIR LIBDIR [NCCL_TESTS_SRC]
#   LIBDIR holds libnccl.so.2 and libmpi.so (bazel-bin's, or .gpu_bin/nccl_tests/lib)
#   NCCL_TESTS_SRC: default /work/shared/peers/nccl-tests, else .gpu_bin/nccl_tests/src
# Env: NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc); NVCC_GENCODE (default:
# this machine's GPU from nvidia-smi, else sm_90); BUILD_SECONDS (time cap, default 600).
# Exit 0: built; 2: skipped (no nvcc here: the reason is printed); else the build failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: $0 OUTDIR LIBDIR [NCCL_TESTS_SRC]" >&2; exit 1; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
libdir=$(cd "$2" && pwd)
src=${3:-}
if [ -z "$src" ]; then
  for s in /work/shared/peers/nccl-tests .gpu_bin/nccl_tests/src; do [ -f "$s/src/Makefile" ] && src=$s && break; done
fi
[ -n "$src" ] && [ -f "$src/src/Makefile" ] || { echo "build.sh: no nccl-tests sources (pass NCCL_TESTS_SRC)" >&2; exit 1; }
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$nvcc" ]; then
  echo "build.sh: skipped: no nvcc here (NVCC, PATH, /usr/local/cuda): nccl-tests needs the CUDA toolkit"
  exit 2
fi
for f in libnccl.so.2 libmpi.so; do [ -f "$libdir/$f" ] || { echo "build.sh: $libdir/$f missing" >&2; exit 1; }; done
if [ -z "${NVCC_GENCODE:-}" ]; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ' || true)
  [[ "$cc" =~ ^[0-9]+$ ]] || cc=90
  NVCC_GENCODE="-gencode=arch=compute_$cc,code=sm_$cc"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# NCCL_HOME and MPI_HOME as the Makefile wants them: include/ and lib/.
mkdir -p "$tmp/nccl/include" "$tmp/nccl/lib" "$tmp/mpi/include" "$tmp/mpi/lib"
cp nccl/nccl.h "$tmp/nccl/include/"
cp "$libdir/libnccl.so.2" "$tmp/nccl/lib/"
ln -s libnccl.so.2 "$tmp/nccl/lib/libnccl.so"
cp tools/nccl_tests/mpi/mpi.h "$tmp/mpi/include/"
cp "$libdir/libmpi.so" "$tmp/mpi/lib/"
cp -r "$src" "$tmp/src"  # built in a copy: the sources stay as published
echo "build.sh: nccl-tests $(cut -d' ' -f2 "$src/SOURCE" 2>/dev/null | cut -c1-12) with $("$nvcc" --version | grep -o 'release [0-9.]*'), $NVCC_GENCODE"
t0=$SECONDS
timeout "${BUILD_SECONDS:-600}" make -C "$tmp/src/src" -j"$(nproc)" build MPI=1 DSO=1 \
  MPI_HOME="$tmp/mpi" NCCL_HOME="$tmp/nccl" CUDA_HOME="$(dirname "$(dirname "$nvcc")")" NVCC="$nvcc" \
  NVCC_GENCODE="$NVCC_GENCODE" CUDARTLIB=cudart_static BUILDDIR="$out" \
  BIN_FILES_LIST="all_reduce all_gather broadcast reduce reduce_scatter alltoall sendrecv" >"$out/build.log" 2>&1 ||
  { tail -n 30 "$out/build.log"; echo "build.sh: make failed or ran past ${BUILD_SECONDS:-600} s (log: $out/build.log)"; exit 1; }
rm -rf "$out"/*.o "$out/os" "$out/verifiable/"*.o
echo "build.sh: built in $((SECONDS - t0)) s: $(cd "$out" && ls ./*_perf | tr '\n' ' ')(in $out)"
