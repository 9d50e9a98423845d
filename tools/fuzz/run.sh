#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with Debian's clang-14 (ASan + UBSan; not
# bazel, whose toolchain is gcc) and runs each for a bounded time on a copy of its seed
# corpus (tests/fuzz/corpus/<target>/), printing one line per target.
#
#   tools/fuzz/run.sh [--seconds N] [--only t1,t2] [--artifacts DIR] [--xml DIR]
# Targets: store_frame peer_info tcp_wire tcp_frames bootstrap_ring. --seconds: per target (default 60).
# A crash, leak, UB report, timeout (-timeout=10) or allocation past -rss_limit_mb=2048
# leaves its input in --artifacts DIR (default /tmp/chorus-fuzz-artifacts); add it to the
# target's corpus once fixed. Exit 0 when no target found anything. --xml DIR writes
# DIR/fuzz.xml, one JUnit case per target (tools/test.sh counts them in CI).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

readonly PROG=fuzz/run.sh
seconds=60 only="" artifacts=/tmp/chorus-fuzz-artifacts xml=""
all_targets="store_frame peer_info tcp_wire tcp_frames bootstrap_ring"
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=${2:?--seconds needs a count}; shift 2 ;;
    --only) only=${2:?--only needs a list}; shift 2 ;;
    --artifacts) artifacts=${2:?--artifacts needs a directory}; shift 2 ;;
    --xml) xml=${2:?--xml needs a directory}; shift 2 ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "$PROG: unknown flag '$1' (see --help)" >&2; exit 2 ;;
  esac
done
targets=${only//,/ }
targets=${targets:-$all_targets}
for t in $targets; do
  [[ " $all_targets " == *" $t "* ]] || { echo "$PROG: unknown target '$t' (one of: $all_targets)" >&2; exit 2; }
done

# The sources each target needs besides its harness and common/*.cc.
sources() {
  case "$1" in
    store_frame) echo rendezvous/store_protocol.cc ;;
    peer_info) echo rendezvous/bootstrap.cc rendezvous/net_util.cc rendezvous/socket_io.cc ;;
    tcp_wire) echo transport/tcp/wire.cc ;;
    tcp_frames) echo transport/tcp/frame_machine.cc transport/tcp/wire.cc ;;
    bootstrap_ring) echo rendezvous/bootstrap_ring_wire.cc ;;
  esac
}

cxx=${CXX_FUZZ:-clang++-14}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$artifacts"
printf "%-14s %10s %8s %8s  %s\n" target runs cov ft result
status=0
for t in $targets; do
  bin="$work/$t"
  # shellcheck disable=SC2046  # one source per word
  if ! "$cxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. \
    "tests/fuzz/${t}_fuzz.cc" $(sources "$t") common/*.cc -lpthread -o "$bin" >"$work/$t.build" 2>&1; then
    tail -n 20 "$work/$t.build" >&2
    printf "%-14s %10s %8s %8s  %s\n" "$t" - - - "build failed"
    echo "$t build - - build failed" >>"$work/summary"
    status=1
    continue
  fi
  corpus="$work/$t.corpus"
  cp -r "tests/fuzz/corpus/$t" "$corpus"
  "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$artifacts/$t-" "$corpus" >"$work/$t.log" 2>&1
  rc=$?
  runs=$(awk '/stat::number_of_executed_units:/ { print $2 }' "$work/$t.log")
  cov=$(grep -Eo 'cov: [0-9]+' "$work/$t.log" | tail -n 1 | cut -d' ' -f2)
  ft=$(grep -Eo 'ft: [0-9]+' "$work/$t.log" | tail -n 1 | cut -d' ' -f2)
  if [ $rc -eq 0 ]; then
    result=ok
  else
    result="found a bug (exit $rc): $(grep -m1 -Eo '(ERROR|SUMMARY): .*|runtime error: .*|Test unit written to .*' \
      "$work/$t.log" | head -c 200)"
    grep -Eo 'Test unit written to .*' "$work/$t.log" >&2
    status=1
  fi
  printf "%-14s %10s %8s %8s  %s\n" "$t" "${runs:--}" "${cov:--}" "${ft:--}" "$result"
  echo "$t run ${runs:--} ${cov:--} $result" >>"$work/summary"
done
if [[ -n "$xml" ]]; then
  mkdir -p "$xml"
  python3 - "$xml/fuzz.xml" "$work/summary" <<'PY'
import sys
import xml.etree.ElementTree as ET
path, summary = sys.argv[1], sys.argv[2]
suite = ET.Element("testsuite", name="fuzz")
for line in open(summary):
    name, stage, runs, cov, result = line.rstrip("\n").split(" ", 4)
    case = ET.SubElement(suite, "testcase", classname="fuzz", name=name)
    if result != "ok":
        ET.SubElement(case, "failure", message="%s: %s (runs %s, cov %s)" % (stage, result, runs, cov))
ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
PY
fi
exit $status
