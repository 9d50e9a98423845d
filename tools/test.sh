#!/usr/bin/env bash
# The test command: bootstraps the machine (apt), then runs `bazel test //...`
# and prints "N passed, N failed, N skipped" counted from every test case's result.
# With --rdma (the default when CI=true) it also runs the RDMA lane: the RDMA tests
# inside a Soft-RoCE QEMU guest (tools/rdma_vm/run_tests.sh), counted in the same line.
# With --sanitizers (the default when CI=true) the tests run again under ASan + UBSan and
# under TSan (tools/sanitizer_lanes.sh), counted in the same line too, named apart.
# Other arguments go to bazel test (e.g. tools/test.sh //tests/chorus/...).
set -uo pipefail
cd "$(dirname "$0")/.."

rdma_lane=0
sanitizer_lanes=0
[ "${CI:-}" = "true" ] && rdma_lane=1 && sanitizer_lanes=1
args=()
for a in "$@"; do
  case "$a" in
    --rdma) rdma_lane=1 ;;
    --no-rdma) rdma_lane=0 ;;
    --sanitizers) sanitizer_lanes=1 ;;
    --no-sanitizers) sanitizer_lanes=0 ;;
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

bazel test "${bazel_flags[@]}" "${targets[@]}"
rc=$?
# Count the test cases of exactly the targets this run covered (cached ones included).
labels=$(mktemp)
set_expr="tests(set(${targets[*]}))"
bazel query "$set_expr except attr(tags, manual, $set_expr)" 2>/dev/null | grep '^//' >"$labels"
# Not the bazel-testlogs symlink: it follows whatever configuration was built last.
testlogs=$(bazel info bazel-testlogs 2>/dev/null)
count_args=()
if [ $rdma_lane -eq 1 ]; then
  lane_out=$(mktemp -d)
  tools/rdma_vm/run_tests.sh "$lane_out"
  count_args+=(--xml-dir "$lane_out")
fi
if [ $sanitizer_lanes -eq 1 ]; then
  lanes_out=$(mktemp -d)
  tools/sanitizer_lanes.sh "$lanes_out" "${bazel_flags[@]+"${bazel_flags[@]}"}"
  mapfile -t lane_args <"$lanes_out/count_args"
  count_args+=("${lane_args[@]+"${lane_args[@]}"}")
fi
python3 tools/count_tests.py "$testlogs" --bazel-exit "$rc" --labels "$labels" "${count_args[@]+"${count_args[@]}"}"
count_rc=$?
rm -f "$labels"
[ $rdma_lane -eq 1 ] && rm -rf "$lane_out"
[ $sanitizer_lanes -eq 1 ] && rm -rf "$lanes_out"
[ $rc -ne 0 ] && exit $rc
exit $count_rc
