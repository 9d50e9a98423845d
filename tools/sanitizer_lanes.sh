#!/usr/bin/env bash
# The sanitizer lanes: chorus's tests again under AddressSanitizer + UBSan
# (--config=asan) and under ThreadSanitizer (--config=tsan), each built in its own
# output folder (.bazelrc). Writes OUT/count_args: one a line, the --lane arguments with
# which tools/count_tests.py counts each lane's cases apart from the plain run's.
# usage: tools/sanitizer_lanes.sh OUT [bazel test flags]
set -uo pipefail  # no -e: both lanes run; each exit code is counted
cd "$(dirname "$0")/.." || exit 1
[ $# -ge 1 ] || { echo "usage: tools/sanitizer_lanes.sh OUT [bazel test flags]" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd) || exit 1
shift
: >"$out/count_args"

# chorus's own code under test: the library, common/, its transports, algorithms,
# kernels, rendezvous and the NCCL API (tests/nccl's C programs are built with the lane's
# flags, so an instrumented program loads the instrumented libnccl.so.2). Left to the
# plain lane: tests/torch (an uninstrumented Python cannot load a sanitized library),
# tests/perf (MPI and Gloo are not instrumented, and Open MPI's own leaks fail
# LeakSanitizer), tests/dist and examples (packaging), tests/tools (scripts).
packages=(algos chorus common kernels nccl rendezvous transport)
patterns=()
set_expr=""
for p in "${packages[@]}"; do
  patterns+=("//tests/$p/...")
  set_expr+="${set_expr:+ + }//tests/$p/..."
done
set_expr="tests($set_expr)"

# A report fails the test at once (TSan would otherwise only change the exit code
# once every case had passed). Tests scale their own deadlines (tests/util/slowdown.h);
# Bazel's per-size timeouts are scaled here alike.
lane_flags=(
  --build_tests_only
  "--test_timeout=180,900,1800,3600"
  --test_env=UBSAN_OPTIONS=print_stacktrace=1
  --test_env=TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
)

for config in asan tsan; do
  labels=$out/$config.labels
  bazel query "$set_expr except attr(tags, manual, $set_expr)" 2>/dev/null | grep '^//' >"$labels"
  start=$(date +%s)
  bazel test --config="$config" "${lane_flags[@]}" "$@" -- "${patterns[@]}"
  rc=$?
  echo "sanitizer lane $config: build and tests took $(($(date +%s) - start))s"
  testlogs=$(bazel info --config="$config" bazel-testlogs 2>/dev/null)
  printf '%s\n' --lane "$config" "$rc" "$testlogs" "$labels" >>"$out/count_args"
done
