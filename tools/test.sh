#!/usr/bin/env bash
# The test command: bootstraps the machine (apt), then runs `bazel test //...`
# and prints "N passed, N failed, N skipped" counted from every test case's result.
# With --rdma (the default when CI=true) it also runs the RDMA lane: the RDMA tests
# inside a Soft-RoCE QEMU guest (tools/rdma_vm/run_tests.sh), counted in the same line.
# With --sanitizers (the default when CI=true) the tests run again under ASan + UBSan and
# under TSan (tools/sanitizer_lanes.sh), counted in the same line too, named apart.
# With --lint (the default when CI=true) it also runs tools/lint.sh: format, clang-tidy
# and shellcheck, each counted as one case.
# With --faults (the default when CI=true) it also runs the fault-injection suite
# (tools/faults/run.sh -n 3), each fault counted as one case.
# With --fuzz (the default when CI=true) it also runs each libFuzzer target for 60 s
# (tools/fuzz/run.sh), each target counted as one case.
# Other arguments go to bazel test (e.g. tools/test.sh //tests/chorus/...).
set -euo pipefail
cd "$(dirname "$0")/.."

rdma_lane=0
sanitizer_lanes=0
lint_lane=0
faults_lane=0
fuzz_lane=0
if [ "${CI:-}" = "true" ]; then rdma_lane=1; sanitizer_lanes=1; lint_lane=1; faults_lane=1; fuzz_lane=1; fi
args=()
for a in "$@"; do
  case "$a" in
    --rdma) rdma_lane=1 ;;
    --no-rdma) rdma_lane=0 ;;
    --sanitizers) sanitizer_lanes=1 ;;
    --no-sanitizers) sanitizer_lanes=0 ;;
    --lint) lint_lane=1 ;;
    --no-lint) lint_lane=0 ;;
    --faults) faults_lane=1 ;;
    --no-faults) faults_lane=0 ;;
    --fuzz) fuzz_lane=1 ;;
    --no-fuzz) fuzz_lane=0 ;;
    *) args+=("$a") ;;
  esac
done
set -- "${args[@]+"${args[@]}"}"

tools/bootstrap.sh || exit 1

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(//...)

bazel_flags=()
if [ "${CI:-}" = "true" ]; then
  # A CI run must really run the tests, never replay cached results.
  bazel_flags+=(--nocache_test_results)
fi

rc=0
bazel test "${bazel_flags[@]+"${bazel_flags[@]}"}" "${targets[@]}" || rc=$?
# Count the test cases of exactly the targets this run covered (cached ones included).
labels=$(mktemp)
set_expr="tests(set(${targets[*]}))"
bazel query "$set_expr except attr(tags, manual, $set_expr)" 2>/dev/null | grep '^//' >"$labels" || true
# Not the bazel-testlogs symlink: it follows whatever configuration was built last.
testlogs=$(bazel info bazel-testlogs 2>/dev/null)
count_args=()
if [ $rdma_lane -eq 1 ]; then
  lane_out=$(mktemp -d)
  # Counted from the XML it leaves (a failing lane.xml where it could not run).
  tools/rdma_vm/run_tests.sh "$lane_out" || echo "test.sh: RDMA lane exited with $?" >&2
  count_args+=(--xml-dir "rdma_vm=$lane_out")
fi
if [ $sanitizer_lanes -eq 1 ]; then
  lanes_out=$(mktemp -d)
  # Counted from the logs and count_args it leaves (a lane that failed to build counts as a failure).
  tools/sanitizer_lanes.sh "$lanes_out" "${bazel_flags[@]+"${bazel_flags[@]}"}" || true
  mapfile -t lane_args <"$lanes_out/count_args"
  count_args+=("${lane_args[@]+"${lane_args[@]}"}")
fi
if [ $lint_lane -eq 1 ]; then
  lint_out=$(mktemp -d)
  tools/lint.sh "$lint_out" || true  # counted from its XML below
  count_args+=(--xml-dir "lint=$lint_out")
fi
if [ $faults_lane -eq 1 ]; then
  faults_out=$(mktemp -d)
  tools/faults/run.sh -n 3 --xml "$faults_out" || true  # counted from its XML below
  count_args+=(--xml-dir "faults=$faults_out")
fi
if [ $fuzz_lane -eq 1 ]; then
  fuzz_out=$(mktemp -d)
  tools/fuzz/run.sh --seconds 60 --xml "$fuzz_out" || true  # counted from its XML below
  count_args+=(--xml-dir "fuzz=$fuzz_out")
fi
count_rc=0
python3 tools/count_tests.py "$testlogs" --bazel-exit "$rc" --labels "$labels" "${count_args[@]+"${count_args[@]}"}" ||
  count_rc=$?
rm -f "$labels"
if [ $rdma_lane -eq 1 ]; then rm -rf "$lane_out"; fi
if [ $sanitizer_lanes -eq 1 ]; then rm -rf "$lanes_out"; fi
if [ $lint_lane -eq 1 ]; then rm -rf "$lint_out"; fi
if [ $faults_lane -eq 1 ]; then rm -rf "$faults_out"; fi
if [ $fuzz_lane -eq 1 ]; then rm -rf "$fuzz_out"; fi
[ $rc -ne 0 ] && exit $rc
exit $count_rc
