#!/usr/bin/env bash
# Runs clang-tidy-14 (checks in .clang-tidy) over our own C++ sources, in parallel.
# Bazel 4.2 writes no compile_commands.json, so this one is built from the flags the
# BUILD files use: -std=c++17 -I. plus the external include folders found here.
# Exit 1 when any file has a finding. Arguments: files to check (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

clang_tidy=${CLANG_TIDY:-clang-tidy-14}
if ! command -v "$clang_tidy" >/dev/null; then
  echo "check_tidy: $clang_tidy not found (apt-get install clang-tidy-14)" >&2
  exit 2
fi

flags=(-std=c++17 -I. -Wno-unknown-warning-option)
# Open MPI: where `mpicxx --showme:compile` points (tools/perf/BUILD).
for d in /usr/src/googletest/googletest/include /usr/src/googletest/googlemock/include /usr/local/cuda/include \
  /usr/lib/x86_64-linux-gnu/openmpi/include; do
  [ -d "$d" ] && flags+=("-isystem$d")
done
# torch_chorus is checked only where the build has torch (third_party/torch/torch.bzl).
torch=0
py_include=$(/usr/bin/python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])" 2>/dev/null || true)
if [ -f /usr/include/torch/csrc/distributed/c10d/ProcessGroup.hpp ] && [ -f "$py_include/Python.h" ]; then
  torch=1
  flags+=(-isystem/usr/include/torch/csrc/api/include "-isystem$py_include" -D_GLIBCXX_USE_CXX11_ABI=1)
fi

if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files -- '*.cc' ':!:third_party/**')
  [ $torch -eq 1 ] || mapfile -t files < <(printf '%s\n' "${files[@]}" | grep -v '^torch_chorus/')
  # Built only on the GPU machine, against its CUDA torch 2.x (tools/gpu/torch_build.sh):
  # Debian's CPU torch lacks the CUDA headers it includes.
  mapfile -t files < <(printf '%s\n' "${files[@]}" | grep -v '^torch_chorus/csrc/cuda_ops\.cc$')
fi

db=$(mktemp -d)
trap 'rm -rf "$db"' EXIT
python3 - "$root" "$db/compile_commands.json" "${files[@]}" -- "${flags[@]}" <<'PY'
import json, sys
root, out = sys.argv[1], sys.argv[2]
sep = sys.argv.index("--")
files, flags = sys.argv[3:sep], sys.argv[sep + 1:]
entries = []
for f in files:
    extra = []
    if f == "kernels/reduce_avx2.cc":  # as kernels/BUILD compiles it
        extra = ["-mavx2", "-mf16c", "-mfma", "-DCHORUS_KERNELS_ISA=isa_avx2"]
    entries.append({"directory": root, "file": f,
                    "arguments": ["clang++"] + flags + extra + ["-c", f]})
json.dump(entries, open(out, "w"), indent=1)
PY

jobs=${TIDY_JOBS:-$(nproc)}
log="$db/findings"
# One clang-tidy per file; each prints its findings, a failing one leaves its name.
# shellcheck disable=SC2016  # expanded by the inner sh
printf '%s\0' "${files[@]}" | xargs -0 -P"$jobs" -I{} sh -c \
  '"$0" -p "$1" --quiet --header-filter="^$2/" "$3" >"$1/$(echo "$3" | tr / _).out" 2>&1 || echo "$3" >>"$4"' \
  "$clang_tidy" "$db" "$root" {} "$log"
cat "$db"/*.out 2>/dev/null | grep -v -e '^[0-9]* warnings\? generated' -e '^Suppressed' -e '^Use -header-filter' || true
if [ -s "$log" ]; then
  echo "check_tidy: findings in $(wc -l <"$log") of ${#files[@]} files:"
  sort "$log" | sed 's/^/  /'
  exit 1
fi
echo "check_tidy: ${#files[@]} files clean"
