#!/usr/bin/env bash
# torch_chorus on the GPU machine, one step of gpu_check.sh: builds it against that
# machine's torch (torch_build.sh), then runs torch_gpu_check.py (two ranks on the one
# GPU, every op on CUDA tensors, streams, DDP against Gloo), within SECONDS in all.
# Logs (the compiler's too) go to LOGDIR, which gpu_check.sh brings back.
# usage: tools/gpu/torch_gpu.sh SECONDS LOGDIR
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
limit=${1:?usage: torch_gpu.sh SECONDS LOGDIR}
logs=${2:?usage: torch_gpu.sh SECONDS LOGDIR}
mkdir -p "$logs"
start=$SECONDS
build=$(mktemp -d)
if [ ! -d .gpu_bin/torch_chorus ]; then
  echo "torch_chorus: skipped, .gpu_bin/torch_chorus missing (tools/gpu/stage.sh stages it)"
  exit 1
fi
if ! python3 -c 'import torch' 2>/dev/null; then
  echo "torch_chorus: skipped, no PyTorch here"
  exit 1
fi
# The build gets at most two thirds of the time; the check what is left.
timeout $((limit * 2 / 3)) tools/gpu/torch_build.sh "$build" "$logs/torch_build.log"
rc=$?
[ $rc -eq 124 ] && echo "torch_chorus: build stopped after $((limit * 2 / 3)) s (log: torch_build.log)"
[ $rc -ne 0 ] && exit 1
left=$((limit - (SECONDS - start)))
if [ $left -lt 20 ]; then echo "torch_chorus: check skipped, $left s left"; exit 1; fi
PYTHONPATH="$build${PYTHONPATH:+:$PYTHONPATH}" timeout "$left" python3 tools/gpu/torch_gpu_check.py --timeout 30 \
  >"$logs/torch_gpu_check.log" 2>&1
rc=$?
grep -vE 'UserWarning|warnings.warn' "$logs/torch_gpu_check.log" | grep -E '^(#|check|==|torch_gpu_check|.* (PASS|FAIL|MISSING) )|only ranks|Error' | head -n 80
if [ $rc -eq 124 ]; then
  echo "torch_chorus: check stopped after $left s (log: torch_gpu_check.log); its last lines:"
  tail -n 15 "$logs/torch_gpu_check.log"
fi
rm -rf "$build"
exit $rc
