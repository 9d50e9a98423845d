#!/usr/bin/env bash
# Builds torch_chorus on the GPU machine (torch 2.x with CUDA, no Bazel) from what
# tools/gpu/torch_stage.sh carried in .gpu_bin/torch_chorus: its sources against this
# machine's torch (torch.utils.cpp_extension's paths and its C++ ABI), with
# -DTORCH_CHORUS_CUDA where torch has CUDA, linked with the chorus archive built there.
# Result: DEST/torch_chorus/ (__init__.py, _C.so), importable with DEST on PYTHONPATH.
# On failure the compiler's log is printed (its last lines) and kept in LOG.
# usage: tools/gpu/torch_build.sh DEST [LOG]    (PYTHON: the interpreter, python3)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
dest=${1:?usage: torch_build.sh DEST [LOG]}
log=${2:-$dest/torch_build.log}
python=${PYTHON:-python3}
staged=.gpu_bin/torch_chorus
mkdir -p "$dest/torch_chorus" "$dest/obj"
: >"$log"
[ -f "$staged/libchorus.a" ] || { echo "torch_build.sh: $staged/libchorus.a missing: run tools/gpu/stage.sh (or torch_stage.sh) here" | tee -a "$log"; exit 2; }

# version, C++ ABI, CUDA version ("" without), include dirs, library dirs, CUDA headers
info=$("$python" - <<'EOF' 2>>"$log"
import os, sysconfig
import torch
from torch.utils import cpp_extension as ce
print(torch.__version__.split("+")[0])
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(torch.version.cuda or "")
print(";".join(ce.include_paths() + [sysconfig.get_paths()["include"]]))
print(";".join(ce.library_paths()))
cuda_inc = []
for root in [ce.CUDA_HOME, "/usr/local/cuda"]:
    if root and os.path.isfile(os.path.join(root, "include", "cuda_runtime_api.h")):
        cuda_inc.append(os.path.join(root, "include"))
        break
try:  # the wheel's own CUDA runtime headers (nvidia-cuda-runtime-cu12)
    import nvidia.cuda_runtime
    cuda_inc.append(os.path.join(list(nvidia.cuda_runtime.__path__)[0], "include"))
except ImportError:
    pass
print(";".join(cuda_inc))
EOF
) || { echo "torch_build.sh: torch not importable by $python"; tail -n 20 "$log"; exit 2; }
mapfile -t lines <<<"$info"
version=${lines[0]} abi=${lines[1]} cuda=${lines[2]}
IFS=';' read -r -a incs <<<"${lines[3]}"
IFS=';' read -r -a libdirs <<<"${lines[4]}"
IFS=';' read -r -a cuda_incs <<<"${lines[5]:-}"
staged_abi=$(cat "$staged/CXX11_ABI" 2>/dev/null || echo 1)
echo "torch_build.sh: torch $version (C++ ABI $abi, CUDA ${cuda:-none}); chorus archive ABI $staged_abi" | tee -a "$log"
if [ "$abi" != "$staged_abi" ]; then
  echo "torch_build.sh: torch here uses _GLIBCXX_USE_CXX11_ABI=$abi, the chorus archive $staged_abi: rebuild it with --copt=-D_GLIBCXX_USE_CXX11_ABI=$abi (torch_stage.sh)" | tee -a "$log"
  exit 2
fi

flags=(-std=c++17 -O2 -fPIC -fvisibility=hidden -Wall -Wno-unused-parameter "-D_GLIBCXX_USE_CXX11_ABI=$abi"
  "-DTORCH_CHORUS_TORCH_VERSION=\"$version\"" -I"$staged/src")
for d in "${incs[@]}"; do flags+=(-isystem "$d"); done
srcs=(module process_group torch_store)
torch_libs=(-ltorch_python -ltorch -ltorch_cpu -lc10)
if [ -n "$cuda" ]; then
  flags+=(-DTORCH_CHORUS_CUDA)
  for d in "${cuda_incs[@]}"; do [ -n "$d" ] && flags+=(-isystem "$d"); done
  srcs+=(cuda_ops)
  torch_libs+=(-ltorch_cuda -lc10_cuda)
fi
# One compiler per source, in parallel.
pids=()
for s in "${srcs[@]}"; do
  g++ "${flags[@]}" -c "$staged/src/torch_chorus/csrc/$s.cc" -o "$dest/obj/$s.o" >"$dest/obj/$s.log" 2>&1 &
  pids+=($!)
done
bad=0
for i in "${!srcs[@]}"; do
  s=${srcs[$i]}
  wait "${pids[$i]}" || { bad=1; echo "== $s: g++ failed" >>"$log"; }
  cat "$dest/obj/$s.log" >>"$log"
done
if [ $bad -eq 0 ]; then
  link=(-shared -o "$dest/torch_chorus/_C.so")
  for s in "${srcs[@]}"; do link+=("$dest/obj/$s.o"); done
  # chorus (CUDA's static runtime inside) stays private to _C.so.
  link+=("$staged/libchorus.a" "-Wl,--exclude-libs,ALL")
  for d in "${libdirs[@]}"; do link+=("-L$d" "-Wl,-rpath,$d"); done
  link+=("${torch_libs[@]}" -ldl -lrt -lpthread)
  echo "g++ ${link[*]}" >>"$log"
  g++ "${link[@]}" >>"$log" 2>&1 || bad=1
fi
if [ $bad -ne 0 ]; then
  echo "torch_build.sh: build failed; the compiler's log ($log), first errors:"
  grep -E -m 40 'error|undefined reference' "$log"
  echo "-- last lines:"
  tail -n 40 "$log"
  exit 1
fi
cp "$staged/src/torch_chorus/__init__.py" "$dest/torch_chorus/"
echo "torch_build.sh: $dest/torch_chorus built (${srcs[*]})" | tee -a "$log"
