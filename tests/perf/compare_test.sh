#!/usr/bin/env bash
# tools/perf/compare.sh end to end on loopback with a tiny sweep: chorus, gloo ring and
# (when mpirun exists) MPI side by side, iperf3 when installed. Checks the table, the
# CSVs and the ratio columns, not the speeds.
set -euo pipefail
compare="$TEST_SRCDIR/chorus/tools/perf/compare.sh"
bin="$TEST_SRCDIR/chorus/tools/perf/chorus_perf"
out="$TEST_TMPDIR/cmp"
runs="chorus gloo:ring"
command -v mpirun >/dev/null && runs="$runs mpi"
iperf=1
command -v iperf3 >/dev/null || iperf=0

fail() { echo "FAIL: $*" >&2; [ -f "$out/table.txt" ] && cat "$out/table.txt" >&2; exit 1; }

timeout 240 "$compare" --bin "$bin" --links loopback --out "$out" --runs "$runs" --iperf-seconds "$iperf" \
  --latency-iters 20 --timeout 60 -- all_reduce -b 8 -e 64K -f 8 -n 2 -w 1 >"$TEST_TMPDIR/stdout" 2>"$TEST_TMPDIR/stderr" ||
  { cat "$TEST_TMPDIR/stderr" >&2; fail "compare.sh exited $?"; }

table="$out/table.txt"
[ -s "$table" ] || fail "no table"
grep -q "## loopback, 2 ranks" "$table" || fail "no loopback block"
grep -q "chorus/gloo" "$table" || fail "no chorus/gloo column"
# 8, 64, 512, 4K, 32K: five size rows, each with a numeric chorus/gloo ratio (column after best_gloo).
rows=$(awk '$1 ~ /^(8|64|512|4K|32K)$/' "$table" | wc -l)
[ "$rows" = 5 ] || fail "expected 5 size rows, got $rows"
bad=$(awk '$1 ~ /^(8|64|512|4K|32K)$/ && $2 == "-"' "$table" | wc -l)
[ "$bad" = 0 ] || fail "chorus has no result in $bad rows"
awk '$1 !~ /^#/ && /!/' "$table" | grep -q . && fail "a run reported wrong results"
grep -q "^ *lat8B(us)" "$table" || fail "no latency row"
[ "$(wc -l <"$out/table_loopback2.csv")" -ge 7 ] || fail "short table_loopback2.csv"
head -n 1 "$out/results.csv" | grep -q "^link,nranks,label,kind" || fail "results.csv header"
grep -q "^loopback2,2,chorus,sweep,chorus," "$out/results.csv" || fail "no chorus rows in results.csv"
if [ "$iperf" = 1 ]; then
  grep -q "^iperf3 (same link, same run): one flow [0-9.]* Gbit/s" "$table" || fail "no iperf3 line"
fi
if command -v gnuplot >/dev/null; then [ -s "$out/busbw_loopback2.png" ] || fail "no plot"; fi
echo "PASS"
