#!/usr/bin/env bash
# gpu_check.sh step 1c: PyTorch's own NCCL backend over chorus's libnccl.so.2 (LD_PRELOAD)
# against the real NCCL, two ranks on GPU 0 (torch_nccl_preload.py says what runs and
# what is compared). First which ncclX torch's libraries import that chorus's does not
# define (a mixed binding: where torch calls one, the process ends, or reaches another
# libnccl mapped beside chorus's with chorus's communicator), then the run over chorus,
# the plain run, and the comparison per rank, appended to TABLES.
# usage: tools/gpu/torch_nccl_preload.sh SECONDS LOGDIR TABLES
# Env: CHORUS_NCCL_LIB: chorus's library (default .gpu_bin/nccl_tests/chorus/libnccl.so.2,
# where stage.sh carries it); CHORUS_PERF_NCCL_LIB: the real NCCL (named only: torch finds
# its own); PYTHON (python3); PRELOAD_DRY_RUN=1: Gloo on CPU tensors (the plumbing, no GPU).
# Exit 1 when the run over chorus failed, got a result wrong or unlike NCCL's, or did not
# have chorus's library mapped (NCCL's run failing is reported, not counted).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
usage="usage: torch_nccl_preload.sh SECONDS LOGDIR TABLES"
limit=${1:?$usage}
logs=${2:?$usage}
tables=${3:?$usage}
mkdir -p "$logs"
start=$SECONDS
left() { echo $((limit - (SECONDS - start))); }
say() { echo "$*" | tee -a "$tables"; }
py=${PYTHON:-python3}
script=tools/gpu/torch_nccl_preload.py
dry=()
[ "${PRELOAD_DRY_RUN:-0}" = 1 ] && dry=(--cpu-dry-run)

lib=${CHORUS_NCCL_LIB:-.gpu_bin/nccl_tests/chorus/libnccl.so.2}
chorus=$(realpath -e "$lib" 2>/dev/null) || { echo "1c: skipped, $lib missing (tools/gpu/stage.sh stages it)"; exit 1; }
torch=$("$py" -c 'import torch, os; print(torch.__version__, os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null) ||
  { echo "1c: skipped, no PyTorch here"; exit 1; }
tlib=${torch#* }
nccl=${CHORUS_PERF_NCCL_LIB:-"torch's own"}
say "# 1c. PyTorch ${torch%% *}'s NCCL backend over chorus's libnccl.so.2 (LD_PRELOAD) vs NCCL ($nccl), 2 ranks on GPU 0"
say "#   vs the CPU and vs NCCL's run: ints exact; floats rtol float32 1e-5, float16 1e-3, bfloat16 1e-2; DDP 1e-4"

# What torch imports from libnccl that chorus's library lacks.
if command -v nm >/dev/null; then
  nm -D --defined-only "$chorus" | awk 'NF == 3 && $2 ~ /^[TWi]$/ {sub(/@.*/, "", $3); print $3}' | sort -u >"$logs/chorus_defines.txt"
  for so in "$tlib"/*.so*; do
    nm -D --undefined-only "$so" 2>/dev/null | awk -v so="${so##*/}" '$NF ~ /^p?nccl[A-Z]/ {sub(/@.*/, "", $NF); print $NF, so}'
  done | sort -u >"$logs/torch_imports.txt"
  imports=$(cut -d' ' -f1 "$logs/torch_imports.txt" | sort -u)
  needed=$(for so in "$tlib"/*.so*; do readelf -d "$so" 2>/dev/null | grep -q 'NEEDED.*libnccl' && echo "${so##*/}"; done | paste -sd ' ')
  if [ -z "$imports" ]; then
    say "1c: torch's libraries import no ncclX: this torch has no NCCL or links it in statically, which LD_PRELOAD cannot reach"
  else
    say "1c: torch imports $(echo "$imports" | wc -l) ncclX ($(cut -d' ' -f2 "$logs/torch_imports.txt" | sort -u | paste -sd ' ')), libnccl NEEDED by: ${needed:-none}"
    missing=$(echo "$imports" | comm -23 - "$logs/chorus_defines.txt" | paste -sd ' ')
    if [ -n "$missing" ]; then
      say "1c: WARNING: MIXED BINDING: torch imports what chorus's libnccl.so.2 does not define: $missing"
      say "1c:   a call to one ends the process (symbol lookup error) or, where another libnccl is mapped, runs NCCL's code on chorus's communicator: a crash risk"
    else
      say "1c: chorus's libnccl.so.2 defines every ncclX torch imports"
    fi
  fi
else
  say "1c: nm not found: torch's imports not checked against chorus's library"
fi

# run NAME SECONDS [VAR=VALUE...]: the two ranks (their digests in LOGDIR/NAME/).
run() {
  local name=$1 t=$2 rc r pid
  shift 2
  if [ "$t" -lt 20 ]; then echo "1c: $name run skipped, $t s left"; return 1; fi
  env "$@" timeout -k 5 "$t" "$py" "$script" --out "$logs/$name" --timeout $((t - 8)) --op-timeout $((t / 2)) \
    --chorus-lib "$chorus" "${dry[@]}" >"$logs/$name.log" 2>&1
  rc=$?
  # A rank the runner could not end would hold the GPU through the next steps.
  for r in 0 1; do
    pid=$(cat "$logs/$name/rank$r.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null &&
      { kill -9 "$pid"; echo "1c: $name rank $r was still running: killed"; }
  done
  sed -n "s/^rank /1c: $name rank /p" "$logs/$name.log"
  [ $rc -eq 124 ] && echo "1c: $name run stopped after $t s"
  [ $rc -ne 0 ] && grep -hE 'Error|error|NCCL WARN|Traceback' "$logs/$name.log" | grep -vE '^rank [0-9]|UserWarning' | head -n 8
  return $rc
}
secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
# Over chorus first (what this step is for), with three fifths of the time; NCCL after.
# (chorus's id and TCP on loopback, as gpu_check.sh keeps NCCL there: NCCL_SOCKET_IFNAME=lo)
run chorus $(( ($(left) - 4) * 3 / 5 )) LD_PRELOAD="$chorus${LD_PRELOAD:+:$LD_PRELOAD}" CHORUS_SECRET="$secret" \
  CHORUS_SOCKET_IFNAME="${CHORUS_SOCKET_IFNAME:-lo}"
chorus_rc=$?
run nccl $(($(left) - 4)) || echo "1c: NCCL's run failed (reported, not counted)"

fail=0
[ $chorus_rc -ne 0 ] && { say "1c: the run over chorus exited $chorus_rc (log: ${logs##*/}/chorus.log)"; fail=1; }
for r in 0 1; do
  quiet=()
  [ "$r" = 1 ] && quiet=(--quiet)
  "$py" "$script" --compare "$logs/chorus/rank$r.json" "$logs/nccl/rank$r.json" --label "1c r$r" "${quiet[@]}" >"$logs/compare$r.txt" || fail=1
  tee -a "$tables" <"$logs/compare$r.txt"
done
say "1c: $([ $fail -eq 0 ] && echo PASS || echo FAIL) after $((SECONDS - start)) s"
exit $fail
