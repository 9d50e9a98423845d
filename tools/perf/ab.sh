#!/usr/bin/env bash
# A/B rounds of one chorus_perf sweep, side by side on loopback: chorus once per given
# environment (A, B, ...) and Open MPI, alternating for ROUNDS rounds, every rank pinned
# to core r % ncores (as compare.sh --bind core). Prints, per run, each size's time in
# us out of place / in place (chorus_perf's max over ranks), so that a change is judged
# by ratios taken inside one round, never across runs.
#
#   tools/perf/ab.sh [-n NRANKS] [-r ROUNDS] [-b BIN] [--no-mpi] [--mpi-btl LIST] [ENV ...] -- SWEEP
#   e.g. tools/perf/ab.sh -n 3 CHORUS_ALGO=tree CHORUS_ALGO=chain -- broadcast -b 1M -e 64M -f 4 -n 10 -w 2
# ENV: one environment per chorus run, its VAR=VALUE pairs joined by commas ("-" for
# none; "bin=PATH" among them runs another chorus_perf, a build of an older commit, say);
# the default is one run with chorus's defaults.
# --mpi-btl: Open MPI's runs, comma-separated: tcp (default, --mca btl tcp,self), shm
# (its shared memory, --mca btl vader,self; printed as "mpi:shm"), or tcp,shm for both.
set -euo pipefail
cd "$(dirname "$0")/../.."
np=2 rounds=3 bin="" mpi=1 mpi_btls=tcp envs=()
while [ $# -gt 0 ]; do
  case $1 in
    -n) np=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    -b) bin=$2; shift 2 ;;
    --no-mpi) mpi=0; shift ;;
    --mpi-btl) mpi_btls=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) envs+=("$1"); shift ;;
  esac
done
[ $# -gt 0 ] || { echo "ab.sh: no sweep after --" >&2; exit 2; }
[ ${#envs[@]} -gt 0 ] || envs=(-)
IFS=, read -r -a btls <<<"$mpi_btls"
for b in "${btls[@]}"; do
  [ "$b" = tcp ] || [ "$b" = shm ] || { echo "ab.sh: --mpi-btl: '$b' is not tcp or shm" >&2; exit 2; }
done
if [ -z "$bin" ]; then
  bazel build -c opt //tools/perf:chorus_perf >/dev/null 2>&1 || { echo "ab.sh: bazel build failed" >&2; exit 1; }
  bin=bazel-out/k8-opt/bin/tools/perf/chorus_perf
fi
cores=$(nproc)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
port=$((29700 + RANDOM % 200))
rows() { grep -v '^#' "$1" | awk 'NF >= 13 {printf "%s %s/%s  ", $1, $6, $10}'; }
run_chorus() {  # run_chorus ENV SWEEP...
  local r pids=() e=() vars=() b=$bin
  [ "$1" != - ] && IFS=, read -r -a e <<<"$1"
  shift
  for v in "${e[@]}"; do
    if [ "${v%%=*}" = bin ]; then b=${v#bin=}; else vars+=("$v"); fi
  done
  for ((r = 0; r < np; r++)); do
    env "${vars[@]}" RANK=$r WORLD_SIZE="$np" MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      taskset -c "$((r % cores))" "$b" "$@" --backend chorus >"$out/rank$r.txt" 2>&1 &
    pids+=($!)
  done
  local bad=0
  for p in "${pids[@]}"; do wait "$p" || bad=1; done
  port=$((port + 1))
  [ $bad -eq 0 ] && rows "$out/rank0.txt" || echo "failed: $(tail -n 2 "$out"/rank*.txt | tr '\n' ' ')"
}
run_mpi() {  # run_mpi tcp|shm SWEEP...
  local btl=tcp,self
  [ "$1" = shm ] && btl=vader,self
  shift
  mpirun --allow-run-as-root --oversubscribe -np "$np" --bind-to none --mca btl "$btl" \
    --mca mpi_yield_when_idle 1 sh -c "taskset -c \$((OMPI_COMM_WORLD_RANK % $cores)) $bin $* --backend mpi" \
    >"$out/mpi.txt" 2>&1 && rows "$out/mpi.txt" || echo "failed: $(tail -n 2 "$out/mpi.txt" | tr '\n' ' ')"
}
echo "# chorus_perf $*; $np ranks pinned r % $cores; us out of place/in place"
for ((k = 1; k <= rounds; k++)); do
  for e in "${envs[@]}"; do echo "round $k chorus $e: $(run_chorus "$e" "$@")"; done
  if [ $mpi -eq 1 ] && command -v mpirun >/dev/null; then
    for b in "${btls[@]}"; do
      label=mpi
      [ "$b" = shm ] && label=mpi:shm
      echo "round $k $label: $(run_mpi "$b" "$@")"
    done
  fi
done
