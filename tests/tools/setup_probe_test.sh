#!/usr/bin/env bash
# tools/scale/setup_probe as setup_scale.sh runs it: three ranks under chorusrun, and
# rank 0's one line with every field a number.
set -euo pipefail
chorusrun=$1
probe=$2
out=$(timeout -s KILL 120 "$chorusrun" --nproc-per-node 3 -- "$probe" 2>&1) || { echo "FAIL: $out"; exit 1; }
line=$(grep -o 'setup backend=chorus ranks=3 .*' <<<"$out") || { echo "FAIL: no setup line in: $out"; exit 1; }
grep -Eq 'job_ms=[0-9]+ init_ms=[0-9]+/[0-9]+ barrier_ms=[0-9.]+/[0-9.]+ cpu_ms=[0-9]+/[0-9.]+ fds=[0-9]+/[0-9.]+ rss_mb=[0-9.]+/[0-9.]+$' \
  <<<"$line" || { echo "FAIL: malformed: $line"; exit 1; }
rc=0
"$probe" --backend nccl >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: an unknown backend exited $rc"; exit 1; }
echo PASS
