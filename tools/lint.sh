#!/usr/bin/env bash
# The lint lane: tools/check_format.sh, check_tidy.sh, check_shell.sh and
# check_cuda_detection.sh (how the build finds or leaves out the CUDA toolkit).
# With an argument DIR, also writes one JUnit XML per check there (lint/<check>.xml for
# tools/count_tests.py --xml-dir lint=DIR), a failed check carrying its output.
# Exit 1 when any check fails; every check runs regardless.
set -euo pipefail
cd "$(dirname "$0")/.."

xml_dir=${1:-}
[ -z "$xml_dir" ] || mkdir -p "$xml_dir"
rc=0
for check in check_format check_tidy check_shell check_cuda_detection; do
  out=$(mktemp)
  start=$(date +%s)
  check_rc=0
  "tools/$check.sh" >"$out" 2>&1 || check_rc=$?
  secs=$(($(date +%s) - start))
  if [ $check_rc -eq 0 ]; then
    echo "lint: $check passed (${secs}s)"
  else
    rc=1
    echo "lint: $check FAILED (exit $check_rc, ${secs}s):"
    tail -n 60 "$out" | sed 's/^/  /'
  fi
  if [ -n "$xml_dir" ]; then
    python3 - "$xml_dir/$check.xml" "$check" "$check_rc" "$secs" "$out" <<'PY'
import sys
import xml.etree.ElementTree as ET
path, name, rc, secs, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
suite = ET.Element("testsuite", name="lint", tests="1", failures="1" if rc else "0")
case = ET.SubElement(suite, "testcase", classname="lint", name=name, time=secs)
if rc:
    ET.SubElement(case, "failure", message="tools/%s.sh exited with %d" % (name, rc)).text = \
        open(out, errors="replace").read()[-20000:]
ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
PY
  fi
  rm -f "$out"
done
exit $rc
