#!/usr/bin/env bash
# Runs tools/perf/torch_bench.py (torch.distributed "chorus" vs "gloo", side by side) on
# N ranks: on loopback, or in two network namespaces joined by a veth pair.
#
#   torch_bench.sh [-n 2|4] [--netns] [--timeout S] [--pkg DIR] [--python PY] [-- bench args...]
#
#   -n N          ranks (default 2; any N >= 2 on loopback; 2 or 4 with --netns)
#   --netns       ranks in network namespaces node0 (10.77.0.1) and node1 (10.77.0.2) via
#                 tools/netns/run_two_nodes.sh (root): -n 2 one rank per namespace,
#                 -n 4 two per namespace (RANK = 2*node + local). Both backends use the
#                 veth (CHORUS_SOCKET_IFNAME = GLOO_SOCKET_IFNAME = chorus0).
#   --timeout S   stop every rank after S seconds (default 1200); exit 124
#   --pkg DIR     directory holding the torch_chorus package (__init__.py + _C.so); prepended
#                 to PYTHONPATH. Without it PYTHONPATH must already have it.
#   --python PY   interpreter (default /usr/bin/python3, the one with PyTorch here)
#   bench args    passed to torch_bench.py: --backends gloo,gloo (dry run, no torch_chorus),
#                 --collectives, --sizes 8:256M, --max-bytes, --iters, --no-ddp, ... (--help)
#
# Loopback: rank processes are started here with MASTER_ADDR=127.0.0.1, a free port,
# RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE, CHORUS_SOCKET_IFNAME=GLOO_SOCKET_IFNAME=lo.
# If a rank fails the others are stopped (after 10 s of grace) and its exit code returned:
# 0 ok, 2 torch_chorus cannot be imported (the message says how to build it), 3 wrong
# results, 124 timeout, else the failing rank's code.
set -euo pipefail

readonly PROG=torch_bench.sh
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly HERE
readonly BENCH="$HERE/torch_bench.py"
readonly TWO_NODES_RUN="$HERE/../netns/run_two_nodes.sh"

die() {
  echo "$PROG: $*" >&2
  exit 1
}

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

PY=${PYTHON:-/usr/bin/python3}

# Starts ranks FIRST..FIRST+COUNT-1 of WORLD here (the environment gives MASTER_ADDR,
# MASTER_PORT and the interface variables) and supervises them: returns 0 when all
# succeed, else the first failing rank's code; stops everything after TIMEOUT seconds (124).
run_ranks() {
  local first=$1 count=$2 world=$3 timeout_s=$4
  shift 4
  local -a pids=() rc=()
  local k r code first_fail="" exit_code=0 grace=10
  for ((k = 0; k < count; k++)); do
    r=$((first + k))
    # No setsid: the ranks stay in this process group, so whoever stops the group (Ctrl-C,
    # run_two_nodes.sh) reaches them too. They start no processes of their own.
    RANK=$r WORLD_SIZE=$world LOCAL_RANK=$k LOCAL_WORLD_SIZE=$count OMP_NUM_THREADS=1 \
      "$PY" -u "$BENCH" "$@" </dev/null &
    pids[k]=$!
    rc[k]=running
  done
  # shellcheck disable=SC2317  # used by the traps
  stop_all() {
    local sig=$1 p
    for p in "${pids[@]}"; do kill "-$sig" "$p" 2>/dev/null || true; done
  }
  trap 'stop_all KILL; exit 130' INT
  trap 'stop_all KILL; exit 143' TERM
  local deadline=$((SECONDS + timeout_s)) running=$count
  while ((running > 0)); do  # bounded by the deadline
    running=0
    for ((k = 0; k < count; k++)); do
      [[ "${rc[k]}" == running ]] || continue
      if kill -0 "${pids[k]}" 2>/dev/null; then
        running=$((running + 1))
        continue
      fi
      code=0
      wait "${pids[k]}" || code=$?
      rc[k]=$code
      if ((code != 0)) && [[ -z "$first_fail" ]]; then
        first_fail=$((first + k)) exit_code=$code
        echo "$PROG: rank $first_fail failed with exit code $code" >&2
        if ((deadline > SECONDS + grace)); then deadline=$((SECONDS + grace)); fi
      fi
    done
    ((running > 0)) || break
    if ((SECONDS >= deadline)); then
      if [[ -z "$first_fail" ]]; then
        echo "$PROG: timeout after ${timeout_s} s" >&2
        exit_code=124
      fi
      for ((k = 0; k < count; k++)); do
        if [[ "${rc[k]}" == running ]]; then echo "$PROG: rank $((first + k)) still running; stopping it" >&2; fi
      done
      stop_all TERM
      sleep 2
      stop_all KILL
      for ((k = 0; k < count; k++)); do wait "${pids[k]}" 2>/dev/null || true; done
      break
    fi
    sleep 0.2
  done
  trap - INT TERM
  return "$exit_code"
}

# Internal: the per-namespace side of --netns (run_two_nodes.sh starts it once per node with
# RANK = node index, WORLD_SIZE=2, MASTER_ADDR, MASTER_PORT, CHORUS_SOCKET_IFNAME).
if [[ "${1:-}" == --_node ]]; then
  per_node=$2 timeout_s=$3
  shift 3
  [[ "${1:-}" == -- ]] && shift
  export GLOO_SOCKET_IFNAME=$CHORUS_SOCKET_IFNAME
  node=$RANK
  run_ranks $((node * per_node)) "$per_node" $((2 * per_node)) "$timeout_s" "$@"
  exit $?
fi

nranks=2 netns=0 timeout_s=1200 pkg=""
while (($#)); do
  case "$1" in
    -n) (($# >= 2)) || die "-n: missing value"; nranks=$2; shift 2 ;;
    -n[0-9]*) nranks=${1#-n}; shift ;;
    --netns) netns=1; shift ;;
    --timeout) (($# >= 2)) || die "--timeout: missing value"; timeout_s=$2; shift 2 ;;
    --pkg) (($# >= 2)) || die "--pkg: missing value"; pkg=$2; shift 2 ;;
    --python) (($# >= 2)) || die "--python: missing value"; PY=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) break ;;  # the rest goes to torch_bench.py
  esac
done
if ! [[ "$nranks" =~ ^[0-9]+$ ]] || ((nranks < 2)); then die "-n: '$nranks' is not a rank count >= 2"; fi
if ! [[ "$timeout_s" =~ ^[0-9]+$ ]] || ((timeout_s == 0)); then die "--timeout: '$timeout_s' is not a positive integer"; fi
[[ -x "$PY" ]] || die "no interpreter '$PY' (--python)"
"$PY" -c 'import torch' 2>/dev/null || die "'$PY' cannot import torch (PyTorch is installed for /usr/bin/python3)"

if [[ -n "$pkg" ]]; then
  [[ -d "$pkg" ]] || die "--pkg: no directory '$pkg'"
  pkg=$(cd "$pkg" && pwd)
  export PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}"
fi

# Fail fast, once, with the build instructions (exit 2) rather than once per rank.
"$PY" "$BENCH" --check-import "$@" || exit $?

if ((netns)); then
  ((nranks == 2 || nranks == 4)) || die "--netns: -n 2 (one rank per namespace) or -n 4 (two per namespace)"
  [[ "$(id -u)" == 0 ]] || die "--netns needs root (network namespaces)"
  [[ -x "$TWO_NODES_RUN" ]] || die "missing $TWO_NODES_RUN"
  per_node=$((nranks / 2))
  export TORCH_BENCH_SETUP="$nranks ranks in two network namespaces joined by a veth pair, $per_node per namespace"
  export TORCH_BENCH_ONE_HOST=1  # the namespaces share this machine's CPUs
  echo "$PROG: $TORCH_BENCH_SETUP (10.77.0.1, 10.77.0.2)" >&2
  # run_two_nodes.sh prefixes every line with [node0]/[node1]: keep rank 0's report clean.
  set +e
  "$TWO_NODES_RUN" --require-netns --timeout "$timeout_s" --grace 15 -- \
    bash "$HERE/$PROG" --_node "$per_node" "$timeout_s" -- "$@" | sed -u 's/^\[node0\] //'
  rcs=("${PIPESTATUS[@]}")
  set -e
  exit "${rcs[0]}"
fi

# Loopback: a port nobody listens on (the kernel picks it; another process could take it in
# the moment before rank 0 binds it, which is rare).
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export TORCH_BENCH_SETUP="$nranks ranks on one host, loopback"
echo "$PROG: $TORCH_BENCH_SETUP (127.0.0.1:$port)" >&2
export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port CHORUS_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo
run_ranks 0 "$nranks" "$nranks" "$timeout_s" "$@"
