#!/usr/bin/env bash
# tools/perf/compare.sh end to end on loopback with a tiny sweep: chorus, gloo ring and
# (when mpirun exists) MPI over TCP and over its shared memory (mpi:shm) side by side,
# iperf3 when installed. Checks the table, the CSVs and the ratio columns, not the speeds.
set -euo pipefail
compare="$TEST_SRCDIR/chorus/tools/perf/compare.sh"
bin="$TEST_SRCDIR/chorus/tools/perf/chorus_perf"
out="$TEST_TMPDIR/cmp"
runs="chorus gloo:ring"
mpi=0
command -v mpirun >/dev/null && mpi=1 runs="$runs mpi mpi:shm"
iperf=1
command -v iperf3 >/dev/null || iperf=0

fail() { echo "FAIL: $*" >&2; [ -f "$out/table.txt" ] && cat "$out/table.txt" >&2; exit 1; }

# Bad --mpi-btl and mpi:<algo> are refused before anything runs.
for bad in "--mpi-btl udp" "--runs mpi:ring"; do
  rc=0
  # shellcheck disable=SC2086  # option and value
  msg=$("$compare" --bin "$bin" --out "$out" $bad 2>&1) || rc=$?
  [ "$rc" = 1 ] || fail "'$bad': exit $rc, expected 1"
  grep -q "tcp or shm\|:tcp or :shm" <<<"$msg" || fail "'$bad': $msg"
done

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
if [ "$mpi" = 1 ]; then
  grep -q "mpi: --mpi-btl tcp" "$table" || fail "the header does not name the MPI transport"
  for label in mpi mpi:shm; do
    grep -q "^loopback2,2,$label,sweep,mpi," "$out/results.csv" || fail "no $label rows in results.csv"
  done
  # Every size row has a number under mpi and under mpi:shm (fields 4 and 5).
  bad=$(awk '$1 ~ /^(8|64|512|4K|32K)$/ && ($4 == "-" || $5 == "-")' "$table" | wc -l)
  [ "$bad" = 0 ] || fail "mpi or mpi:shm has no result in $bad rows"
  grep -q "^# backend: mpi" "$out/logs/loopback2_mpi_shm.sweep.log" || fail "no mpi:shm log"
fi
if [ "$iperf" = 1 ]; then
  grep -q "^iperf3 (same link, same run): one flow [0-9.]* Gbit/s" "$table" || fail "no iperf3 line"
fi
if command -v gnuplot >/dev/null; then [ -s "$out/busbw_loopback2.png" ] || fail "no plot"; fi
echo "PASS"
