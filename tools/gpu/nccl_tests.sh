#!/usr/bin/env bash
# nccl-tests, unmodified, on the GPU machine (gpu_check.sh runs it after step 0): the
# seven perf binaries, `-b 8 -e 256M -f 4 -c 1`, two ranks on GPU 0 (NCCL_TESTS_DEVICE=0)
# started by chorusrun, MPI mode over chorus's minimal MPI (tools/nccl_tests/mpi); each
# through chorus's libnccl.so.2, then through the real NCCL, chosen by LD_LIBRARY_PATH.
# The binaries: those stage.sh built, where this driver runs their CUDA version, else
# built here (tools/nccl_tests/build.sh, when this machine has nvcc).
# usage: tools/gpu/nccl_tests.sh WORKDIR TABLES
# Env: NCCL_TESTS_SECONDS (the whole step, default 150); CHORUS_PERF_NCCL_LIB (the real
# NCCL; unset or missing: chorus alone); NCCL_TESTS_HOSTID=0 to run the real NCCL without
# one NCCL_HOSTID per rank. Logs in WORKDIR/nccl_tests/, the side-by-side table appended to
# TABLES. Exit 1 when a run through chorus failed or counted #wrong != 0 (NCCL's runs are
# reported only).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
[ $# -eq 2 ] || { echo "usage: $0 WORKDIR TABLES" >&2; exit 2; }
logs=$1/nccl_tests
tables=$2
mkdir -p "$logs"
dir=$PWD/.gpu_bin/nccl_tests
budget=${NCCL_TESTS_SECONDS:-150}
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
colls="all_reduce all_gather broadcast reduce reduce_scatter alltoall sendrecv"
for f in chorus/libnccl.so.2 mpi/libmpi.so chorusrun; do
  [ -e "$dir/$f" ] || { echo "nccl-tests: $dir/$f missing: run tools/gpu/stage.sh"; exit 1; }
done

# The binaries: carried, or built here.
bin=$dir/bin
driver=$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9]*' | awk '{print $3}')
built=$(cat "$bin/cuda_major" 2>/dev/null)
if [ -n "$built" ] && [ -n "$driver" ] && [ "$driver" -ge "$built" ]; then
  echo "nccl-tests: the binaries built with CUDA $built (the driver runs CUDA $driver)"
else
  echo "nccl-tests: carried binaries for CUDA ${built:-none}, the driver runs CUDA ${driver:-?}: building here"
  bin=$(mktemp -d)/bin  # not under WORKDIR: that comes back in logs.tgz
  BUILD_SECONDS=$(($(left) - 60)) tools/nccl_tests/build.sh "$bin" "$dir/chorus/libnccl.so.2" "$dir/mpi/libmpi.so" \
    "$dir/src" >"$logs/build.out" 2>&1
  rc=$?
  cat "$logs/build.out"
  [ $rc -eq 0 ] || { echo "nccl-tests: not built (exit $rc): nothing run"; exit 1; }
fi
nccl=${CHORUS_PERF_NCCL_LIB:-}
[ -f "$nccl" ] || { echo "nccl-tests: no real NCCL found: chorus alone"; nccl=""; }
# Which libraries each way loads (the header's nccl-library says it again).
echo "nccl-tests: chorus: $(LD_LIBRARY_PATH="$dir/mpi:$dir/chorus" ldd "$bin/all_reduce_perf" | grep -E 'libnccl|libmpi' | awk '{print $3}' | tr '\n' ' ')"
[ -n "$nccl" ] && echo "nccl-tests: NCCL: $(LD_LIBRARY_PATH="$dir/mpi:${nccl%/*}" ldd "$bin/all_reduce_perf" | grep -E 'libnccl|libmpi' | awk '{print $3}' | tr '\n' ' ')"

# one LIB NAME PERF: a two-rank run; rank 0's output in $logs/NAME.out.
fail=0
one() {
  local lib=$1 name=$2 perf=$3 limit rc hostid=()
  limit=$(left)
  [ "$limit" -gt 45 ] && limit=45
  if [ "$limit" -lt 10 ]; then echo "$name: skipped, no time left"; [ "$lib" = chorus ] && fail=1; return; fi
  # The real NCCL tells two ranks on one GPU apart by host id (gpu_check.sh step 0);
  # RANK is chorusrun's, expanded in each rank.
  # shellcheck disable=SC2016
  [ "$lib" != chorus ] && [ "${NCCL_TESTS_HOSTID:-1}" = 1 ] && hostid=(bash -c 'NCCL_HOSTID=nccl_tests_$RANK exec "$0" "$@"')
  env LD_LIBRARY_PATH="$dir/mpi:$([ "$lib" = chorus ] && echo "$dir/chorus" || echo "${nccl%/*}")" NCCL_TESTS_DEVICE=0 \
    "$dir/chorusrun" --nproc-per-node 2 --timeout "$limit" --tee-dir "$logs/$name" -- "${hostid[@]}" \
    "$bin/${perf}_perf" -b 8 -e 256M -f 4 -c 1 >"$logs/$name.log" 2>&1
  rc=$?
  cp "$logs/$name/rank_0.stdout" "$logs/$name.out" 2>/dev/null || : >"$logs/$name.out"
  # rows: size count type redop root, then time algbw busbw #wrong out of place and in place
  awk -v name="$name" -v rc=$rc '$1 ~ /^[0-9]+$/ && NF >= 13 {rows++; last = $1; if ($9 != "N/A") wrong += $9; if ($13 != "N/A") wrong += $13}
    /nccl-library=/ {for (i = 1; i <= NF; i++) if ($i ~ /^nccl-library=/) lib = substr($i, 14)}
    /Avg bus bandwidth/ {avg = $NF}
    END {printf "%-28s exit %3d  library %-6s  %2d sizes up to %10s  #wrong %d  avg busbw %s\n", name, rc, lib, rows, last, wrong, avg
      exit (rc != 0 || rows == 0 || wrong != 0)}' "$logs/$name.out" || {
    [ "$lib" = chorus ] && fail=1
    grep -hvE '^\[rank [0-9]+\] #|^\[rank 0\] +[0-9]' "$logs/$name.log" | head -n 8
  }
}
for c in $colls; do
  one chorus "chorus_$c" "$c"
  [ -n "$nccl" ] && one nccl "nccl_$c" "$c"
done

# Side by side: out-of-place busbw and #wrong (out of place + in place) per size.
{
  echo "# nccl-tests (unmodified, MPI over chorus), 2 ranks on GPU 0, -b 8 -e 256M -f 4 -c 1: chorus vs NCCL"
  rows() { awk '$1 ~ /^[0-9]+$/ && NF >= 13 {print $1, $8, $9 + $13}' "$logs/$1_$c.out" 2>/dev/null | sort; }
  for c in $colls; do
    join -a 1 -e - -o 0,1.2,1.3,2.2,2.3 <(rows chorus) <(rows nccl) | sort -n |
      awk -v c="$c" 'BEGIN {printf "# %-14s %12s %10s %7s %10s %7s %7s\n", c, "size", "chorus", "#wrong", "nccl", "#wrong", "ratio"}
        {printf "  %-14s %12d %10s %7s %10s %7s %7s\n", "", $1, $2, $3, $4, $5, ($4 + 0 > 0 ? sprintf("%.2f", $2 / $4) : "-")}'
  done
} | tee -a "$tables"
exit $fail
