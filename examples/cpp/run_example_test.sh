#!/usr/bin/env bash
# Runs one example as a user would, through the launcher on N ranks (loopback), and
# checks that every rank got to its "<name> ok" line and exited 0; then that one rank
# alone is refused with a message saying how to start it.
# Args: chorusrun example N
set -euo pipefail
chorusrun=$1 example=$2 ranks=$3
name=$(basename "$example")

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

rc=0
out=$(timeout -s KILL 150 "$chorusrun" --nproc-per-node "$ranks" --timeout 120 -- "$example" 2>&1) || rc=$?
echo "$out"
[ "$rc" -eq 0 ] || fail "$name on $ranks ranks exited with $rc"
for ((r = 0; r < ranks; r++)); do
  grep -qF "[rank $r] rank $r: $name ok" <<<"$out" || fail "rank $r did not report '$name ok'"
done

rc=0
out=$(timeout -s KILL 60 "$chorusrun" --nproc-per-node 1 --timeout 30 -- "$example" 2>&1) || rc=$?
[ "$rc" -eq 1 ] || fail "$name on 1 rank: expected exit code 1, got $rc: $out"
grep -qF "needs at least 2 ranks, got 1" <<<"$out" || fail "$name on 1 rank did not say why: $out"
echo "PASS"
