#!/bin/sh
# Inside the Soft-RoCE guest (tools/rdma_vm/run_tests.sh boots it): runs chorus's test
# binaries on the rxe device, each bounded in time, each writing GoogleTest XML into
# OUT (a binary that crashes or times out gets a synthetic failed case instead).
# usage: guest_tests.sh BAZEL_BIN OUT
set -u  # no -e: a crashing test binary becomes a failed case, the rest still run
bin=$1 out=$2
export CHORUS_TRANSPORT=rdma

# name | binary | gtest filter | seconds
cases="transport_test|tests/transport/transport_test|*rdma*|300
rdma_transport_test|tests/transport/rdma_transport_test|*|240
collectives_api_test|tests/chorus/collectives_api_test|*|300
p2p_test|tests/chorus/p2p_test|-*/epoll|300
fault_test|tests/chorus/fault_test|*|120
split_test|tests/chorus/split_test|*|300
overlap_test|tests/chorus/overlap_test|*|300
mismatch_api_test|tests/chorus/mismatch_api_test|*|300"

echo "$cases" | while IFS='|' read -r name path filter secs; do
  xml="$out/$name.xml"
  start=$(date +%s)
  timeout -s KILL "$secs" "$bin/$path" --gtest_filter="$filter" --gtest_output="xml:$xml" >"$out/$name.log" 2>&1
  code=$?
  took=$(( $(date +%s) - start ))
  if [ ! -s "$xml" ] || [ "$code" -ge 124 ]; then
    why="exit code $code"
    [ "$code" -eq 137 ] && why="killed after ${secs}s (timeout) or crashed"
    printf '<?xml version="1.0"?>\n<testsuites><testsuite name="%s"><testcase classname="rdma_vm" name="%s"><failure message="%s"/></testcase></testsuite></testsuites>\n' \
      "$name" "$name" "$why" >"$xml"
  fi
  summary=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$name.log" | tr '\n' ' ')
  echo "rdma lane: $name: exit $code in ${took}s: $summary"
  if [ "$code" -ne 0 ]; then
    grep -A8 ': Failure$' "$out/$name.log" | head -60  # what failed, not only how it ended
    tail -20 "$out/$name.log"
  fi
done
exit 0  # failures are in the XML, counted by tools/count_tests.py
