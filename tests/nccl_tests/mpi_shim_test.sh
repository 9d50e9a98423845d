#!/bin/bash
# The MPI shim under chorusrun: mpi_program's checks on 2, 3 and 4 ranks; a bad call
# ends the job with a message naming the call and the rank; no launcher, a clear error.
# Then nccl-tests' start-up with chorus's libnccl.so.2 beside the shim (mpi_nccl_program).
# usage: mpi_shim_test.sh CHORUSRUN MPI_PROGRAM LIBMPI MPI_NCCL_PROGRAM
set -euo pipefail
run=$1
prog=$2
lib=$3
nccl_prog=$4
readelf -d "$lib" | grep -q 'SONAME.*\[libmpi\.so\]' || { echo "no SONAME libmpi.so in $lib"; exit 1; }
# Self-contained: chorus is linked in, only system libraries are needed.
! readelf -d "$lib" | grep NEEDED | grep -q '_S' || { echo "$lib needs Bazel-internal libraries"; exit 1; }
others=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^MPI_' || true)
[ -z "$others" ] || { echo "symbols other than MPI_* exported:"; echo "$others" | head; exit 1; }
out=${TEST_TMPDIR:-/tmp}/mpi_shim_test.$$
for n in 2 3 4; do
  "$run" --nproc-per-node "$n" --timeout 60 -- "$prog" >"$out" 2>&1 || { cat "$out"; echo "$n ranks failed"; exit 1; }
  oks=$(grep -c 'mpi shim ok' "$out" || true)
  [ "$oks" -eq "$n" ] || { cat "$out"; echo "$n ranks: $oks said ok"; exit 1; }
done
# expect_fail MODE PATTERN [LAUNCHER ARGS]: the job fails, and says PATTERN.
expect_fail() {
  local mode=$1 pattern=$2 rc=0
  shift 2
  "$@" "$prog" "$mode" >"$out" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] || { cat "$out"; echo "$mode: exit 0"; exit 1; }
  grep -qE "$pattern" "$out" || { cat "$out"; echo "$mode: no line matching: $pattern"; exit 1; }
}
expect_fail bad-type 'chorus mpi: MPI_Allreduce on rank [01] of 2: datatype 0 is not one this MPI supports' \
  "$run" --nproc-per-node 2 --timeout 60 --
expect_fail bad-op 'chorus mpi: MPI_Allreduce on rank [01] of 2: op 0 is not one' "$run" --nproc-per-node 2 --timeout 60 --
expect_fail before-init 'chorus mpi: MPI_Barrier \(rank not known yet\): called before MPI_Init' \
  "$run" --nproc-per-node 2 --timeout 60 --
expect_fail all 'chorus mpi: MPI_Init \(rank not known yet\): .*RANK is not set.*chorusrun' env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT
for n in 2 3; do
  "$run" --nproc-per-node "$n" --timeout 60 -- "$nccl_prog" >"$out" 2>&1 || { cat "$out"; echo "nccl, $n ranks: failed"; exit 1; }
  oks=$(grep -c 'nccl over the mpi shim ok' "$out" || true)
  [ "$oks" -eq "$n" ] || { cat "$out"; echo "nccl, $n ranks: $oks said ok"; exit 1; }
done
echo "mpi shim ok on 2, 3 and 4 ranks; bad calls fail clearly; libnccl.so.2 beside it ok"
