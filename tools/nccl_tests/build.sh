#!/usr/bin/env bash
# Builds NVIDIA's nccl-tests, unmodified, in MPI mode against chorus: its include/nccl.h
# and libnccl.so.2, and the minimal MPI over chorus (mpi.h, libmpi.so). The seven perf
# binaries the GPU check runs, nothing else; one libverifiable.so (DSO=1) and a copy of
# CUDA's runtime beside them (found through their $ORIGIN rpath), so that OUTDIR is small
# and carries to another machine as it is.
# usage: tools/nccl_tests/build.sh OUTDIR LIBNCCL LIBMPI [NCCL_TESTS_SRC]
#   LIBNCCL, LIBMPI: chorus's libnccl.so.2 and the shim's libmpi.so (bazel-bin's, or the
#   copies in .gpu_bin/nccl_tests); NCCL_TESTS_SRC: default /work/shared/peers/nccl-tests,
#   else .gpu_bin/nccl_tests/src. OUTDIR/cuda_major: the CUDA major version built with.
# Env: NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc); NVCC_GENCODE (default:
# this machine's GPU from nvidia-smi, else sm_90); BUILD_SECONDS (time cap, default 600).
# Exit 0: built; 2: skipped (no nvcc here: the reason is printed); else the build failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 3 ] || { echo "usage: $0 OUTDIR LIBNCCL LIBMPI [NCCL_TESTS_SRC]" >&2; exit 1; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
libnccl=$2
libmpi=$3
src=${4:-}
if [ -z "$src" ]; then
  for s in /work/shared/peers/nccl-tests .gpu_bin/nccl_tests/src; do [ -f "$s/src/Makefile" ] && src=$s && break; done
fi
[ -n "$src" ] && [ -f "$src/src/Makefile" ] || { echo "build.sh: no nccl-tests sources (pass NCCL_TESTS_SRC)" >&2; exit 1; }
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$nvcc" ]; then
  echo "build.sh: skipped: no nvcc here (NVCC, PATH, /usr/local/cuda): nccl-tests needs the CUDA toolkit"
  exit 2
fi
for f in "$libnccl" "$libmpi"; do [ -f "$f" ] || { echo "build.sh: $f missing" >&2; exit 1; }; done
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
cp "$libnccl" "$tmp/nccl/lib/libnccl.so.2"
ln -s libnccl.so.2 "$tmp/nccl/lib/libnccl.so"
cp tools/nccl_tests/mpi/mpi.h "$tmp/mpi/include/"
cp "$libmpi" "$tmp/mpi/lib/libmpi.so"
cp -r "$src" "$tmp/src"  # built in a copy: the sources stay as published
release=$("$nvcc" --version | grep -o 'release [0-9.]*')
echo "build.sh: nccl-tests $(cut -d' ' -f2 "$src/SOURCE" 2>/dev/null | cut -c1-12) with $release, $NVCC_GENCODE"
t0=$SECONDS
timeout "${BUILD_SECONDS:-600}" make -C "$tmp/src/src" -j"$(nproc)" build MPI=1 DSO=1 \
  MPI_HOME="$tmp/mpi" NCCL_HOME="$tmp/nccl" CUDA_HOME="$(dirname "$(dirname "$nvcc")")" NVCC="$nvcc" \
  NVCC_GENCODE="$NVCC_GENCODE" BUILDDIR="$out" \
  BIN_FILES_LIST="all_reduce all_gather broadcast reduce reduce_scatter alltoall sendrecv" >"$out/build.log" 2>&1 ||
  { tail -n 30 "$out/build.log"; echo "build.sh: make failed or ran past ${BUILD_SECONDS:-600} s (log: $out/build.log)"; exit 1; }
rm -rf "$out"/*.o "$out/os" "$out/verifiable/"*.o
cudart=$(LD_LIBRARY_PATH="$tmp/nccl/lib:$tmp/mpi/lib" ldd "$out/all_reduce_perf" | awk '$1 ~ /^libcudart/ && $3 ~ /^\// {print $3}')
[ -n "$cudart" ] && cp -L "$cudart" "$out/"
strip "$out"/*_perf "$out/verifiable/libverifiable.so.0"
rm -f "$out/verifiable/libverifiable.so"  # a link; the binaries need the .so.0
echo "$release" | awk '{split($2, v, "."); print v[1]}' >"$out/cuda_major"
echo "build.sh: built in $((SECONDS - t0)) s: $(cd "$out" && echo ./*_perf) (in $out)"
