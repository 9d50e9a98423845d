#!/usr/bin/env bash
# Stages torch_chorus for the GPU machine, which has torch 2.x with CUDA but no Bazel
# (called by stage.sh): chorus built here with CUDA as one static-PIC archive
# (.gpu_bin/torch_chorus/libchorus.a: every object Bazel links into torch_chorus's
# _C.so, CUDA's static runtime and liburing included), the headers torch_chorus
# includes, and torch_chorus's sources. tools/gpu/torch_build.sh compiles them there.
# The archive has this build's C++ ABI (_GLIBCXX_USE_CXX11_ABI, from Debian's torch:
# 1); torch_build.sh refuses a torch built with the other one.
# usage: tools/gpu/torch_stage.sh   (after .gpu_bin/ exists)
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build -c opt //torch_chorus:_C.so >/dev/null 2>&1 ||
  { echo "torch_stage.sh: bazel build -c opt //torch_chorus:_C.so failed" >&2; exit 1; }
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
params="$bin/torch_chorus/_C.so-2.params"
[ -f "$params" ] || { echo "torch_stage.sh: $params missing (Bazel's link parameters)" >&2; exit 1; }
dst=.gpu_bin/torch_chorus
rm -rf "$dst" && mkdir -p "$dst/src"
# chorus's objects: every object of the link but torch_chorus's own, and the static
# libraries it names (CUDA's runtime, liburing).
exec_root=$(bazel info -c opt execution_root 2>/dev/null)
{
  echo "CREATE $PWD/$dst/libchorus.a"
  grep -E '\.o$' "$params" | grep -v '/torch_chorus/_objs/' | sed "s|^|ADDMOD $exec_root/|"
  grep -E '^/.*\.a$' "$params" | sed 's|^|ADDLIB |'
  grep -E '^-l:.*\.a$' "$params" | sed 's|^-l:||' | while read -r a; do echo "ADDLIB $(gcc -print-file-name="$a")"; done
  echo SAVE
  echo END
} >"$dst/libchorus.mri"
ar -M <"$dst/libchorus.mri"
strip --strip-debug "$dst/libchorus.a"  # the carry is capped (64 MiB in all)
ranlib "$dst/libchorus.a"
# What the archive needs from outside it: the C and C++ runtimes only (the GPU machine
# has no RDMA library; chorus loads ibverbs with dlopen).
nm -u --format=posix "$dst/libchorus.a" 2>/dev/null | awk '{print $1}' | sort -u >"$dst/undefined.txt"
nm --defined-only --format=posix "$dst/libchorus.a" 2>/dev/null | awk '{print $1}' | sort -u >"$dst/defined.txt"
runtime=$(for l in libc.so.6 libm.so.6 libstdc++.so.6 libgcc_s.so.1; do nm -D --defined-only --format=posix "$(gcc -print-file-name="$l")" 2>/dev/null; done |
  awk '{sub(/@.*/, "", $1); print $1}' | sort -u)
comm -23 "$dst/undefined.txt" "$dst/defined.txt" | comm -23 - <(echo "$runtime") |
  grep -vE '^(_GLOBAL_OFFSET_TABLE_|__dso_handle|__tls_get_addr|atexit)$' >"$dst/undefined_other.txt" || true
rm -f "$dst/undefined.txt" "$dst/defined.txt"
if [ -s "$dst/undefined_other.txt" ]; then
  echo "torch_stage.sh: libchorus.a needs symbols from outside libc/libm/libstdc++/libgcc_s ($dst/undefined_other.txt):" >&2
  head -n 20 "$dst/undefined_other.txt" >&2
  exit 1
fi
# Headers torch_chorus includes, with their own includes (chorus's tree, headers only).
git ls-files '*.h' | grep -E '^(chorus|common|rendezvous|transport|algos|kernels)/' | tar -cf - -T - | tar -xf - -C "$dst/src"
mkdir -p "$dst/src/torch_chorus"
cp -r torch_chorus/csrc torch_chorus/__init__.py "$dst/src/torch_chorus/"
# The ABI Bazel built with (third_party/torch/torch.bzl took it from the system's torch).
grep -o '_GLIBCXX_USE_CXX11_ABI=[01]' "$(bazel info output_base 2>/dev/null)/external/torch/defs.bzl" | head -n 1 |
  cut -d= -f2 >"$dst/CXX11_ABI"
[ -s "$dst/CXX11_ABI" ] || echo 1 >"$dst/CXX11_ABI"  # GCC's default
du -sh "$dst" | awk -v abi="$(cat "$dst/CXX11_ABI")" '{print "torch_stage.sh: " $2 " ready (" $1 ", C++ ABI " abi ")"}'
