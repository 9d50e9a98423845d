#!/bin/bash
# Creating a world of n ranks on this machine, chorus beside Open MPI, in one run:
# for each n, chorusrun + setup_probe (Communicator::Create + Barrier) and
# mpirun + setup_probe --backend mpi (MPI_Init + MPI_Barrier), oversubscribed alike.
# Prints setup_probe's line per run (job_ms, init_ms, barrier_ms, cpu_ms, fds, rss_mb:
# max/mean over the ranks) and the ratio chorus/MPI of job_ms. With --phases, also the
# max over the ranks of each set-up phase (the "set-up phases:" lines logged at INFO).
#
#   tools/scale/setup_scale.sh [--ranks "8 16 32 64"] [--transport auto|tcp|shm]
#                              [--rounds R] [--timeout S] [--no-mpi] [--phases]
set -euo pipefail

ranks="8 16 32 64"
transport=auto
rounds=1
timeout_s=300
mpi=1
phases=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --transport) transport="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --no-mpi) mpi=0; shift ;;
    --phases) phases=1; shift ;;
    *) echo "setup_scale.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

cd "$(dirname "$0")/../.."
bazel build -c opt //tools/scale:setup_probe //tools/launcher:chorusrun >&2
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
probe="$bin/tools/scale/setup_probe"
chorusrun="$bin/tools/launcher/chorusrun"

# job_ms of a setup_probe line.
job_ms() { sed -n 's/.*job_ms=\([0-9]*\).*/\1/p' <<<"$1"; }

# "phases ranks=n name=max_ms ..." from the ranks' "set-up phases:" lines, in their order.
max_phases() {
  sed -n 's/.*set-up phases: //p' <<<"$2" | tr ',' '\n' | awk -v n="$1" '
    NF == 3 { if (!($1 in max)) order[k++] = $1; if ($2 > max[$1]) max[$1] = $2 }
    END { printf "phases ranks=%d max_ms", n; for (i = 0; i < k; i++) printf " %s=%.0f", order[i], max[order[i]]; print "" }'
}

for n in $ranks; do
  for ((r = 1; r <= rounds; r++)); do
    debug="${CHORUS_DEBUG:-WARN}"
    [[ $phases == 1 ]] && debug=INFO
    out=$(CHORUS_DEBUG="$debug" CHORUS_TRANSPORT="$transport" timeout "$timeout_s" "$chorusrun" \
      --nproc-per-node "$n" -- "$probe" 2>&1 || true)
    c=$(grep -o 'setup backend=.*' <<<"$out" || echo "setup backend=chorus ranks=$n FAILED")
    echo "$c transport=$transport"
    if [[ $phases == 1 ]]; then max_phases "$n" "$out"; fi
    if [[ $mpi == 1 ]]; then
      m=$(timeout "$timeout_s" mpirun --allow-run-as-root --oversubscribe -np "$n" "$probe" --backend mpi 2>&1 |
        grep -o 'setup backend=.*' || echo "setup backend=mpi ranks=$n FAILED")
      echo "$m"
      cj=$(job_ms "$c")
      mj=$(job_ms "$m")
      if [[ -n $cj && -n $mj && $mj != 0 ]]; then
        awk -v n="$n" -v c="$cj" -v m="$mj" 'BEGIN { printf "ratio ranks=%d job_ms chorus/mpi=%.2f\n", n, c / m }'
      fi
    fi
  done
done
