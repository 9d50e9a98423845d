#!/usr/bin/env bash
# The RDMA lane: chorus's RDMA tests (transport contract, RDMA-only cases, collectives,
# send/recv, a rank killed mid-collective) on a real verbs stack: Soft-RoCE inside a
# QEMU guest. Writes GoogleTest XML per binary into OUT, which tools/count_tests.py
# counts with the rest. Needs the test binaries built (tools/test.sh builds them).
# usage: tools/rdma_vm/run_tests.sh OUT
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 1 ] || { echo "usage: tools/rdma_vm/run_tests.sh OUT" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
bin=$(bazel info bazel-bin 2>/dev/null)
bazel build //tests/transport:transport_test //tests/transport:rdma_transport_test //tests/chorus:all >/dev/null 2>&1 ||
  { echo "rdma lane: building the test binaries failed (run bazel build //tests/...)" >&2; exit 1; }

fail_lane() {  # the lane could not run: one failed case that says why
  printf '<?xml version="1.0"?>\n<testsuites><testsuite name="rdma_vm"><testcase classname="rdma_vm" name="lane"><failure message="%s"/></testcase></testsuite></testsuites>\n' "$1" >"$out/lane.xml"
  echo "rdma lane: FAILED: $1" >&2
  exit 1
}

start=$(date +%s)
set +e
tools/rdma_vm/run.sh --timeout 2400 --out "$out" -- tools/rdma_vm/guest_tests.sh "$bin" "$out"
code=$?
set -e
echo "rdma lane: guest run took $(( $(date +%s) - start ))s"
case $code in
  0) ;;
  124) fail_lane "the Soft-RoCE guest did not finish within 2400 s" ;;
  125) fail_lane "the Soft-RoCE guest could not run (see tools/rdma_vm/run.sh's message above)" ;;
  *) fail_lane "the guest test script exited with $code" ;;
esac
