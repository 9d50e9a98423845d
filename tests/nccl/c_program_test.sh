#!/bin/bash
# The C programs built on nccl.h run against the shared library, whose SONAME is NCCL's
# and which exports exactly the functions nccl.h declares: each nccl* and its pnccl*.
set -euo pipefail
prog="$1"
profiler="$2"
lib="$3"
header="$4"
readelf -d "$lib" | grep -q 'SONAME.*\[libnccl\.so\.2\]' || { echo "no SONAME libnccl.so.2 in $lib"; exit 1; }
for p in "$prog" "$profiler"; do
  readelf -d "$p" | grep -q 'NEEDED.*\[libnccl\.so\.2\]' || { echo "$p does not need libnccl.so.2"; exit 1; }
done
# Self-contained: chorus is linked in, only system libraries are needed.
if readelf -d "$lib" | grep 'NEEDED' | grep -q '_S'; then
  echo "$lib needs Bazel-internal libraries:"
  readelf -d "$lib" | grep NEEDED
  exit 1
fi
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
others=$(echo "$exported" | grep -v -E '^p?nccl' || true)
if [ -n "$others" ]; then
  echo "symbols other than nccl* and pnccl* exported:"
  echo "$others" | head
  exit 1
fi
plain=$(echo "$exported" | grep '^nccl' || true)
profiling=$(echo "$exported" | grep '^pnccl' | sed 's/^p//' || true)
if [ -z "$plain" ] || [ "$plain" != "$profiling" ]; then
  echo "each nccl* must have its pnccl* and no other; nccl* without pnccl*, then pnccl* without nccl*:"
  comm -3 <(echo "$plain") <(echo "$profiling")
  exit 1
fi
declared=$(grep -oE '\bp?nccl[A-Za-z]+\(' "$header" | tr -d '(' | sort -u)
if [ "$declared" != "$exported" ]; then
  echo "declared in nccl.h but not exported, then exported but not declared:"
  comm -3 <(echo "$declared") <(echo "$exported")
  exit 1
fi
"$prog"
"$profiler"
