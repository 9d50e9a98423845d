#!/bin/bash
# Creating a world of n ranks on this machine, chorus beside Open MPI, in one run:
# for each n, chorusrun + setup_probe (Communicator::Create + Barrier) and
# mpirun + setup_probe --backend mpi (MPI_Init + MPI_Barrier), oversubscribed alike.
# Prints setup_probe's line per run (job_ms, init_ms, barrier_ms, fds, rss_mb:
# max/mean over the ranks) and the ratio chorus/MPI of job_ms.
#
#   tools/scale/setup_scale.sh [--ranks "8 16 32 64"] [--transport auto|tcp|shm]
#                              [--rounds R] [--timeout S] [--no-mpi]
set -euo pipefail

ranks="8 16 32 64"
transport=auto
rounds=1
timeout_s=300
mpi=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --transport) transport="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --no-mpi) mpi=0; shift ;;
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

for n in $ranks; do
  for ((r = 1; r <= rounds; r++)); do
    c=$(CHORUS_TRANSPORT="$transport" timeout "$timeout_s" "$chorusrun" --nproc-per-node "$n" -- "$probe" 2>&1 |
      grep -o 'setup backend=.*' || echo "setup backend=chorus ranks=$n FAILED")
    echo "$c transport=$transport"
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
