#!/usr/bin/env bash
# Soft-RoCE baseline numbers: boots the VM once (run.sh) and runs guest_perftest.sh in it:
# ib_write_bw (4..64 MiB by default) and ib_write_lat (8 B..4 KiB), server and client in
# the same guest on rxe0. Prints a whitespace-separated table; '#' lines are comments.
# With --out DIR, also writes DIR/rdma_perftest.csv.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: tools/rdma_vm/perftest.sh [--sizes LIST] [--lat-sizes LIST] [--bw-iters N] [--lat-iters N]
                                 [--out DIR] [--timeout SECONDS]
  --sizes LIST      ib_write_bw message sizes, comma-separated, suffix K/M/G = KiB/MiB/GiB
                    (default 4M,8M,16M,32M,64M)
  --lat-sizes LIST  ib_write_lat sizes (default 8,16,32,...,4K)
  --bw-iters N      iterations per bandwidth run (default 5, minimum 5)
  --lat-iters N     iterations per latency run (default 1000)
  --out DIR         also write DIR/rdma_perftest.csv (DIR is created if missing)
  --timeout SECONDS bound on the whole VM (default 300)
USAGE
}
die_usage() { echo "perftest.sh: $*" >&2; usage >&2; exit 2; }

to_bytes() {  # 4M -> 4194304
  local v=$1 n mult=1
  [[ "$v" =~ ^([1-9][0-9]*)([kKmMgG]?)(i?[bB]?)$ ]] || return 1
  n=${BASH_REMATCH[1]}
  case "${BASH_REMATCH[2]}" in
    k|K) mult=1024 ;; m|M) mult=$((1024 * 1024)) ;; g|G) mult=$((1024 * 1024 * 1024)) ;;
  esac
  echo $((n * mult))
}
size_list() {  # "4M,8M" or "4M 8M" -> "4194304,8388608"
  local list=() s b
  for s in ${1//,/ }; do
    b=$(to_bytes "$s") || die_usage "bad size '$s' (use e.g. 4096, 64K, 4M)"
    list+=("$b")
  done
  [ ${#list[@]} -gt 0 ] || die_usage "empty size list"
  (IFS=,; echo "${list[*]}")
}

bw=4M,8M,16M,32M,64M lat=8,16,32,64,128,256,512,1K,2K,4K bw_iters=5 lat_iters=1000 out='' timeout_s=300
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --sizes|--lat-sizes|--bw-iters|--lat-iters|--out|--timeout)
      [ $# -ge 2 ] || die_usage "$1 needs a value" ;;
    *) die_usage "unknown argument '$1'" ;;
  esac
  case "$1" in
    --sizes) bw=$2 ;;
    --lat-sizes) lat=$2 ;;
    --bw-iters) bw_iters=$2 ;;
    --lat-iters) lat_iters=$2 ;;
    --out) out=$2 ;;
    --timeout) timeout_s=$2 ;;
  esac
  shift 2
done
bw=$(size_list "$bw")
lat=$(size_list "$lat")
[[ "$bw_iters" =~ ^[0-9]+$ ]] && [ "$bw_iters" -ge 5 ] || die_usage "--bw-iters must be an integer >= 5"
[[ "$lat_iters" =~ ^[0-9]+$ ]] && [ "$lat_iters" -ge 5 ] || die_usage "--lat-iters must be an integer >= 5"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
run_args=(--timeout "$timeout_s")
guest_args=(--bw-sizes "$bw" --lat-sizes "$lat" --bw-iters "$bw_iters" --lat-iters "$lat_iters")
if [ -n "$out" ]; then
  mkdir -p "$out" || die_usage "cannot create --out $out"
  out=$(cd "$out" && pwd -P)
  run_args+=(--out "$out")
  guest_args+=(--csv "$out/rdma_perftest.csv")
fi
# Run from this folder: the guest script is found relative to the working folder,
# which stays visible in the guest even when it lies under /tmp.
cd "$here"
start=$(date +%s.%N)
rc=0
"$here/run.sh" "${run_args[@]}" -- bash ./guest_perftest.sh "${guest_args[@]}" || rc=$?
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
echo "# whole run (boot, tests, power-off): ${elapsed} s; exit $rc"
exit "$rc"
