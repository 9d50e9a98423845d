#!/bin/bash
# The C program built on nccl.h runs against the shared library, whose SONAME is NCCL's
# and which exports only nccl* symbols.
set -euo pipefail
prog="$1"
lib="$2"
readelf -d "$lib" | grep -q 'SONAME.*\[libnccl\.so\.2\]' || { echo "no SONAME libnccl.so.2 in $lib"; exit 1; }
readelf -d "$prog" | grep -q 'NEEDED.*\[libnccl\.so\.2\]' || { echo "$prog does not need libnccl.so.2"; exit 1; }
# Self-contained: chorus is linked in, only system libraries are needed.
if readelf -d "$lib" | grep 'NEEDED' | grep -q '_S'; then
  echo "$lib needs Bazel-internal libraries:"
  readelf -d "$lib" | grep NEEDED
  exit 1
fi
others=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^nccl' || true)
if [ -n "$others" ]; then
  echo "symbols other than nccl* exported:"
  echo "$others" | head
  exit 1
fi
"$prog"
