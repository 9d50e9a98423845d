#!/usr/bin/env bash
# Shared by gpu_check.sh and tcp_sweep.sh (sourced; they set $bin and $libs first).
# shellcheck disable=SC2154

# stage.sh carries .gpu_bin packed (bundle.tgz): unpacked here, once, in place.
if [ -f "$bin/bundle.tgz" ]; then
  tar -C "$bin" -xzf "$bin/bundle.tgz" && rm -f "$bin/bundle.tgz" || { echo "$bin/bundle.tgz: cannot unpack" >&2; exit 2; }
fi

# Exports CHORUS_PERF_NCCL_LIB: as given, else the NCCL PyTorch ships (nvidia.nccl),
# else ldconfig's, else the bare soname; prints the path found ("" when none).
find_nccl() {
  local lib=${CHORUS_PERF_NCCL_LIB:-$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)}
  [ -n "$lib" ] && [ -e "$lib" ] || lib=$(ldconfig -p 2>/dev/null | awk '/libnccl.so.2 /{print $NF; exit}')
  export CHORUS_PERF_NCCL_LIB=${lib:-libnccl.so.2}
  echo "$lib"
}

# perf_ranks LOG LIMIT "ARGS" [ENV...]: two chorus_perf ranks on this host (ARGS word-split,
# @RANK@ in ENV replaced by the rank), each under `timeout LIMIT`, logs in LOG.rank0.log
# and LOG.rank1.log. Fails when a rank did.
perf_ranks() {
  local log=$1 limit=$2 args=$3 port=$((29600 + RANDOM % 300)) r pids=() bad=0
  shift 3
  for r in 0 1; do
    # shellcheck disable=SC2086  # ARGS is split into words on purpose
    env LD_LIBRARY_PATH="$libs" RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "${@//@RANK@/$r}" timeout "$limit" "$bin/chorus/tools/perf/chorus_perf" $args >"$log.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || bad=1; done
  return $bad
}
