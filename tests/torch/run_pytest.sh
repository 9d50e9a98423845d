#!/usr/bin/env bash
# Runs one pytest file of the torch_chorus suite with the system Python (the one that
# has torch), the built torch_chorus package first on PYTHONPATH, and JUnit XML where
# Bazel reads it (each test case counted by tools/count_tests.py).
set -euo pipefail
python=$1
test_file=$2
root="${TEST_SRCDIR:?}/${TEST_WORKSPACE:?}"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m pytest -q -p no:cacheprovider "$root/$test_file" ${XML_OUTPUT_FILE:+--junitxml="$XML_OUTPUT_FILE"}
