#!/usr/bin/env bash
# tools/count_tests.py counts each test case once: a target's old shard_K_of_M logs
# (left by an earlier shard_count in the same output base) are not counted again, a
# skipped case is apart, a failed case and a target without a log are failures; a
# lane's cases (the same targets under a sanitizer, or JUnit XML from outside Bazel) add
# to the line, named apart, and a sanitizer's report after every case passed fails its target.
set -euo pipefail
count=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case_xml() {  # FILE PASSED FAILED SKIPPED
  mkdir -p "$(dirname "$1")"
  {
    echo '<testsuites><testsuite>'
    for ((i = 0; i < $2; i++)); do echo "<testcase classname=\"T\" name=\"p$i\"/>"; done
    for ((i = 0; i < $3; i++)); do echo "<testcase classname=\"T\" name=\"f$i\"><failure/></testcase>"; done
    for ((i = 0; i < $4; i++)); do echo "<testcase classname=\"T\" name=\"s$i\" result=\"skipped\"><skipped/></testcase>"; done
    echo '</testsuite></testsuites>'
  } >"$1"
}
logs=$tmp/testlogs
for k in 1 2 3 4; do case_xml "$logs/a/sharded/shard_${k}_of_4/test.xml" 13 0 0; done
touch -d '2 hours ago' "$logs"/a/sharded/shard_*_of_4/test.xml
for k in 1 2 3 4 5 6; do case_xml "$logs/a/sharded/shard_${k}_of_6/test.xml" 10 0 0; done
case_xml "$logs/a/plain/test.xml" 3 0 2
printf '//a:sharded\n//a:plain\n' >"$tmp/labels"
out=$(python3 "$count" "$logs" --labels "$tmp/labels" 2>&1 | tail -n 1) || true  # exit 1 on failed cases
[ "$out" = "63 passed, 0 failed, 2 skipped" ] || { echo "FAIL: stale shards: got '$out'"; exit 1; }

case_xml "$logs/a/broken/test.xml" 1 1 0
printf '//a:broken\n//a:missing\n' >"$tmp/labels2"
out=$(python3 "$count" "$logs" --labels "$tmp/labels2" 2>&1 | tail -n 1) || true  # exit 1 on failed cases
[ "$out" = "1 passed, 2 failed, 0 skipped" ] || { echo "FAIL: failures: got '$out'"; exit 1; }
case_xml "$tmp/asan/a/plain/test.xml" 4 1 0
out=$(python3 "$count" "$logs" --labels "$tmp/labels" --lane asan 3 "$tmp/asan" "$tmp/labels" \
  --lane tsan 1 "$tmp/tsan" "$tmp/labels" 2>&1) || true  # exit 1 on failed cases
want="FAILED: asan: //a:sharded (no test log: not built or not run)
FAILED: asan: a/plain:T.f0
FAILED: tsan: //a:sharded (no test log: not built or not run)
FAILED: tsan: //a:plain (no test log: not built or not run)
67 passed, 4 failed, 2 skipped"
[ "$out" = "$want" ] || { echo "FAIL: lanes: got '$out'"; exit 1; }
: >"$tmp/none"
out=$(python3 "$count" "$logs" --labels "$tmp/labels" --lane tsan 1 "$tmp/tsan" "$tmp/none" 2>&1 | tail -n 2) || true
want="FAILED: tsan: bazel test exited with code 1 (see its output above)
63 passed, 1 failed, 2 skipped"
[ "$out" = "$want" ] || { echo "FAIL: a lane that failed to build: got '$out'"; exit 1; }

mkdir -p "$tmp/tsan2/a/plain"
cp "$logs/a/plain/test.xml" "$tmp/tsan2/a/plain/test.xml"
printf 'SUMMARY: ThreadSanitizer: data race x.cc:3 in F\n' >"$tmp/tsan2/a/plain/test.log"
printf '//a:plain\n' >"$tmp/plain"
out=$(python3 "$count" "$logs" --labels "$tmp/none" --lane tsan 3 "$tmp/tsan2" "$tmp/plain" 2>&1 | tail -n 2) || true
want="FAILED: tsan: a/plain (SUMMARY: ThreadSanitizer: data race x.cc:3 in F)
3 passed, 1 failed, 2 skipped"
[ "$out" = "$want" ] || { echo "FAIL: a report after the cases passed: got '$out'"; exit 1; }

# Extra lanes outside Bazel: each --xml-dir is counted, its failures named LANE/FILE.
case_xml "$tmp/rdma/transport_test.xml" 4 0 1
case_xml "$tmp/lint/check_format.xml" 0 1 0
case_xml "$tmp/lint/check_shell.xml" 1 0 0
out=$(python3 "$count" "$logs" --labels "$tmp/labels" --xml-dir "$tmp/rdma" --xml-dir "lint=$tmp/lint" 2>&1) || true  # exit 1 on failed cases
[ "$(tail -n 1 <<<"$out")" = "68 passed, 1 failed, 3 skipped" ] || { echo "FAIL: lanes: got '$out'"; exit 1; }
grep -q "^FAILED: lint/check_format:T.f0$" <<<"$out" || { echo "FAIL: lane label: got '$out'"; exit 1; }
echo "PASS"
