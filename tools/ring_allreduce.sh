#!/usr/bin/env bash
# The main job: builds chorus (bazel -c opt) and runs the ring_allreduce demo with two
# ranks as two "nodes" (two network namespaces joined by a veth pair; on loopback, with
# the reason printed, where namespaces cannot be made, e.g. without root), then the
# same sweep through Gloo's ring all-reduce on the same kind of link, and prints both
# side by side. About a minute and a half on 2 cores once built.
#
#   tools/ring_allreduce.sh [--min-bytes 1K] [--max-bytes 64M] [--iters 10] [--warmup 2]
# Two real hosts: see README ("Two real hosts"). Everything side by side, MPI and iperf3
# included: tools/perf/compare.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

min=1K max=64M iters=10 warmup=2
while [ $# -gt 0 ]; do
  case "$1" in
    --min-bytes | --max-bytes | --iters | --warmup)
      [ $# -ge 2 ] || { echo "ring_allreduce.sh: $1 needs a value" >&2; exit 2; }
      case "$1" in --min-bytes) min=$2 ;; --max-bytes) max=$2 ;; --iters) iters=$2 ;; --warmup) warmup=$2 ;; esac
      shift 2 ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "ring_allreduce.sh: unknown flag '$1' (see --help)" >&2; exit 2 ;;
  esac
done

tools/bootstrap.sh
echo "== building: bazel build -c opt //tools/demo:ring_allreduce //tools/perf:chorus_perf"
log=$(mktemp)
tmp=$(mktemp -d)
trap 'rm -rf "$log" "$tmp"' EXIT
if ! bazel build -c opt //tools/demo:ring_allreduce //tools/perf:chorus_perf >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  echo "ring_allreduce.sh: build failed" >&2
  exit 1
fi
# The -c opt outputs (the bazel-bin link follows whatever configuration built last).
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
export CHORUS_NETNS_TAG="demo$$"

echo
echo "== chorus ring all-reduce (tools/demo/ring_allreduce), 2 ranks on 2 nodes"
tools/netns/run_two_nodes.sh --timeout 150 -- "$bin/tools/demo/ring_allreduce" \
  --min-bytes "$min" --max-bytes "$max" --iters "$iters" --warmup "$warmup" | tee "$tmp/chorus.txt"

echo
echo "== the same sweep through Gloo (gloo::allreduce RING, what PyTorch uses), same kind of link"
gloo_ok=1
tools/netns/run_two_nodes.sh --timeout 150 -- "$bin/tools/perf/chorus_perf" all_reduce --backend gloo --algo ring \
  -b "$min" -e "$max" -f 2 -n "$iters" -w "$warmup" -c 1 | tee "$tmp/gloo.txt" ||
  { gloo_ok=0; echo "(the Gloo comparison did not run; see above)"; }
[ "$gloo_ok" = 1 ] || exit 0

# Side by side: the demo's busbw and Gloo's out-of-place busbw; ratio from the times.
echo
echo "== side by side (busbw GB/s; chorus/gloo > 1: chorus is faster)"
awk '
  FNR == 1 { file++ }
  $1 ~ /^\[node0\]$/ && $2 ~ /^[0-9]+$/ {
    if (file == 1) { ct[$2] = $4; cb[$2] = $6; order[++n] = $2 } else { gt[$2] = $7; gb[$2] = $9 }
  }
  END {
    printf "%12s %14s %14s %12s\n", "size(B)", "chorus busbw", "gloo busbw", "chorus/gloo"
    for (i = 1; i <= n; i++) {
      s = order[i]
      r = (s in gt && ct[s] > 0) ? sprintf("%.2f", gt[s] / ct[s]) : "-"
      printf "%12d %14.3f %14s %12s\n", s, cb[s], (s in gb) ? sprintf("%.3f", gb[s]) : "-", r
    }
  }' "$tmp/chorus.txt" "$tmp/gloo.txt"
