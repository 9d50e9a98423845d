#!/usr/bin/env bash
# compare.sh, several times in a row, then the median of each per-round ratio.
#
#   tools/perf/compare_rounds.sh OUT ROUNDS [compare.sh options] [-- chorus_perf sweep args]
#
# This machine's neighbours move a single run by tens of percent, and they move every
# backend of a run alike only when the backends run close together. So every round is a
# whole compare.sh (each backend back to back on each link), every ratio is taken inside
# its round, and the summary (tools/perf/summarize_rounds.py, saved as OUT/summary.txt)
# gives the median and the range over rounds. Each round's own table is under
# OUT/round_K/. Exit status: 2 if a round found #wrong != 0, 1 if a round failed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ $# -ge 2 ] || { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 1; }
out=$1
rounds=$2
shift 2
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "compare_rounds.sh: ROUNDS '$rounds' is not a positive integer" >&2; exit 1; }
for a in "$@"; do
  [ "$a" = --out ] && { echo "compare_rounds.sh: give OUT as the first argument, not --out" >&2; exit 1; }
done
mkdir -p "$out"
rm -rf "$out"/round_* "$out/summary.txt"
status=0
for ((k = 1; k <= rounds; k++)); do
  echo "== round $k of $rounds" >&2
  rc=0
  "$here/compare.sh" --out "$out/round_$k" "$@" >"$out/round_$k.log" 2>&1 || rc=$?
  mkdir -p "$out/round_$k"
  echo "$rc" >"$out/round_$k/exit_code"
  grep -E '^ +lat8B|^iperf3' "$out/round_$k.log" | sed 's/^/   /' >&2 || true  # a failed round may have no rows
  if [ "$rc" -eq 2 ]; then
    status=2
  elif [ "$rc" -ne 0 ]; then
    echo "   round $k failed (exit $rc): $(tail -n 1 "$out/round_$k.log")" >&2
    [ "$status" -eq 0 ] && status=1
  fi
done
python3 "$here/summarize_rounds.py" "$out" | tee "$out/summary.txt"
exit "$status"
