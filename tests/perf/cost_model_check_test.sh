#!/usr/bin/env bash
# tools/perf/cost_model_check.sh end to end on 2 ranks of one host with a tiny sweep:
# the table of choices, the model's predictions, and tools/simulate's beside the
# measured times (--simulate), then the same read back from the logs (--analyze).
# Checks the files and counts, not the speeds.
set -euo pipefail
check="$TEST_SRCDIR/chorus/tools/perf/cost_model_check.sh"
bin="$TEST_SRCDIR/chorus/tools/perf/chorus_perf"
sim="$TEST_SRCDIR/chorus/tools/simulate/simulate"
out="$TEST_TMPDIR/cmc"
fail() { echo "FAIL: $*" >&2; cat "$out"/*.txt >&2 2>/dev/null || true; exit 1; }

timeout 240 "$check" --bin "$bin" --sim "$sim" --out "$out" --placements 1x2 --colls "all_reduce broadcast" \
  --rounds 1 --simulate "--intra-latency-us 1" -- -b 8 -e 512 -f 8 -n 2 -w 1 >"$TEST_TMPDIR/stdout" 2>&1 ||
  { cat "$TEST_TMPDIR/stdout" >&2; fail "cost_model_check.sh exited $?"; }

# Every size of both collectives has a row of choices; the simulator's file has a row per
# forced algorithm that ran, and its count.
[ "$(grep -c '^1x2 ' "$out/table.txt")" = 6 ] || fail "want 6 rows of choices"
grep -Eq "^1x2 +all_reduce +8 recursive_doubling " "$out/simulated.txt" || fail "no simulated recursive doubling at 8 B"
grep -Eq "^1x2 +broadcast +512 tree " "$out/simulated.txt" || fail "no simulated broadcast tree at 512 B"
count=$(grep -E "^simulated within 25% of measured on 1x2: [0-9]+ of [0-9]+$" "$out/simulated.txt") ||
  fail "no count line"
total=${count##* of }
rows=$(grep -c "^1x2 " "$out/simulated.txt")
[ "$total" = "$rows" ] || fail "count says $total rows, the file has $rows"
# The simulator wrote its CSV for the placement.
head -n 1 "$out/sim_1x2.csv" | grep -q "^collective,ranks,hosts,bytes," || fail "sim_1x2.csv header"

# --analyze reads the same logs and writes the same counts without running anything.
cp "$out/simulated.txt" "$TEST_TMPDIR/first.txt"
timeout 60 "$check" --sim "$sim" --out "$out" --placements 1x2 --colls "all_reduce broadcast" --analyze \
  --simulate "--intra-latency-us 1" -- -b 8 -e 512 -f 8 >/dev/null 2>&1 || fail "--analyze exited $?"
cmp -s "$out/simulated.txt" "$TEST_TMPDIR/first.txt" || fail "--analyze gave other rows"
echo PASS
