#!/usr/bin/env bash
# One command, one run: the same chorus_perf sweep through chorus, every Gloo all_reduce
# algorithm and Open MPI, on loopback and across two network namespaces (a veth pair,
# tools/netns/two_nodes.sh), with iperf3 on the same links in the same run, printed side
# by side (busbw per backend, chorus / best Gloo, chorus / MPI, 8-byte latency, link
# speed) and saved as CSV and PNG plots.
#
#   tools/perf/compare.sh [options] [-- chorus_perf sweep args]
#     --out DIR         results (default /tmp/chorus_perf_compare): table.txt, results.csv
#                       (every line of every run), table_<link>.csv (side by side),
#                       iperf.csv, busbw_<link>.png, logs/
#     --links "LIST"    of loopback, netns (default "loopback netns"; netns needs root and
#                       is skipped with the reason where namespaces cannot be made)
#     --np4             also 4 ranks on loopback
#     --runs "LIST"     backend[:algo] (default "chorus gloo:ring gloo:ring_chunked
#                       gloo:halving_doubling gloo:bcube gloo:ring_legacy mpi"); for mpi
#                       the suffix is the BTL: mpi:tcp, mpi:shm (both may be listed)
#     --mpi-btl tcp|shm Open MPI's transports for plain "mpi": tcp (default): --mca btl
#                       tcp,self; shm: its shared memory, --mca btl vader,self on loopback,
#                       vader,tcp,self across the namespaces (vader within a namespace, TCP
#                       between them: with one rank per namespace that is TCP alone)
#     --bin PATH        chorus_perf to use (default: bazel build -c opt, then
#                       bazel-out/k8-opt/bin/tools/perf/chorus_perf)
#     --iperf-seconds S per iperf3 measurement (default 5; 0 skips iperf3)
#     --latency-iters N iterations of the separate 8-byte run (default 200)
#     --small-iters N   sizes up to --small-max are measured again with N iterations
#                       (default 50; 0: no second run) and the table shows those: one
#                       hiccup of a busy machine swamps a 5-iteration mean of 20 us calls
#     --small-max SIZE  (default 1M)
#     --timeout S       limit per run (default 600)
#     --bind core|none  core (default): every backend's rank r runs on core r % ncores,
#                       as mpirun binds 2 ranks by default; none: no binding anywhere
#   Sweep default: all_reduce -b 16 -e 256M -f 4 -n 5 -w 2 (float32 sum: 16 B .. 256 MiB
#   by 4). The 8-byte latency is its own run (-b 8 -e 8, more iterations), appended to
#   the same arguments.
#
# Binding is the same for every backend: mpirun runs with --bind-to none and, with
# --bind core, each of its ranks pins itself with taskset like the others (mpirun's own
# default across the namespaces would put both ranks on core 0: each "host" binds its
# one rank to its first core, and both namespaces share the same cores).
# Launching: chorus and gloo ranks get torchrun's variables (RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT; in the namespaces CHORUS_SOCKET_IFNAME=chorus0 too); MPI runs
# through mpirun --mca btl tcp,self (--mpi-btl) --mca mpi_yield_when_idle 1 (without it the
# ranks of a "2-node" job spin and, on a small machine, a latency becomes a scheduler timeslice).
# In the namespaces chorus ranks are two hosts (two_nodes.sh exec sets CHORUS_HOSTID per node);
# on loopback they are one host, and chorus picks its own transport there.
# Across the namespaces mpirun runs in node0 and starts node1's daemon through a
# plm_rsh_agent that enters node1's namespace instead of ssh.
# busbw is the out-of-place one (nccl-tests' first column); time is the max over ranks.
# A run that fails is skipped with its last log lines; a run with #wrong != 0 is kept,
# marked "!" in the table, and the script exits 2.
set -uo pipefail  # no -e: a failed run is skipped, the rest still run

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
two_nodes="$root/tools/netns/two_nodes.sh"

out=/tmp/chorus_perf_compare
links="loopback netns"
np4=0
runs="chorus gloo:ring gloo:ring_chunked gloo:halving_doubling gloo:bcube gloo:ring_legacy mpi"
bin=""
iperf_s=5
lat_iters=200
small_iters=50
small_max=1M
run_timeout=600
bind=core
mpi_btl=tcp
sweep=()

die() { echo "compare.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --links) links="$2"; shift 2 ;;
    --np4) np4=1; shift ;;
    --runs) runs="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --iperf-seconds) iperf_s="$2"; shift 2 ;;
    --latency-iters) lat_iters="$2"; shift 2 ;;
    --small-iters) small_iters="$2"; shift 2 ;;
    --small-max) small_max="$2"; shift 2 ;;
    --timeout) run_timeout="$2"; shift 2 ;;
    --bind) bind="$2"; shift 2 ;;
    --mpi-btl) mpi_btl="$2"; shift 2 ;;
    --) shift; sweep=("$@"); break ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[ ${#sweep[@]} -eq 0 ] && sweep=(all_reduce -b 16 -e 256M -f 4 -n 5 -w 2)
for v in "$iperf_s" "$lat_iters" "$small_iters" "$run_timeout"; do
  [[ "$v" =~ ^[0-9]+$ ]] || die "'$v' is not a non-negative integer"
done
[[ "$bind" == core || "$bind" == none ]] || die "--bind: '$bind' is not core or none"
[[ "$mpi_btl" == tcp || "$mpi_btl" == shm ]] || die "--mpi-btl: '$mpi_btl' is not tcp or shm"
for run in $runs; do
  case "$run" in
    mpi | mpi:tcp | mpi:shm) ;;
    mpi:*) die "--runs: '$run': an mpi run takes :tcp or :shm (its BTL), not an algorithm" ;;
  esac
done
ncpu=$(nproc)
for l in $links; do [[ "$l" == loopback || "$l" == netns ]] || die "--links: '$l' is not loopback or netns"; done

if [ -z "$bin" ]; then
  echo "== building chorus_perf (bazel build -c opt //tools/perf:chorus_perf)" >&2
  (cd "$root" && bazel build -c opt //tools/perf:chorus_perf >"/tmp/compare_build.$$.log" 2>&1) ||
    { tail -n 20 "/tmp/compare_build.$$.log" >&2; rm -f "/tmp/compare_build.$$.log"; die "build failed"; }
  rm -f "/tmp/compare_build.$$.log"
  bin="$root/bazel-out/k8-opt/bin/tools/perf/chorus_perf"
fi
[ -x "$bin" ] || die "no chorus_perf at $bin"
mkdir -p "$out/logs"
rm -f "$out"/logs/* "$out"/*.csv "$out"/*.png "$out"/*.dat "$out"/*.gp "$out"/table.txt

# ---------------------------------------------------------------- namespaces
export CHORUS_NETNS_TAG="cmp$$"
netns_up=0
cleanup() {
  local pid
  for pid in $(jobs -p); do kill "$pid" 2>/dev/null || true; done
  if [ "$netns_up" = 1 ]; then "$two_nodes" down >/dev/null 2>&1 || echo "compare.sh: namespace teardown failed" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

link_list=()
for l in $links; do
  if [ "$l" = netns ]; then
    if why=$("$two_nodes" check 2>&1) && "$two_nodes" up 2 >/dev/null; then
      netns_up=1
      link_list+=(netns2)
    else
      echo "compare.sh: skipping the namespace link: ${why:-two_nodes.sh up failed}" >&2
    fi
  else
    link_list+=(loopback2)
    [ "$np4" = 1 ] && link_list+=(loopback4)
  fi
done
[ ${#link_list[@]} -gt 0 ] || die "no link to measure"

# How mpirun (in node0) starts its daemons in the other namespaces (see the script).
agent="$(dirname "$two_nodes")/mpi_rsh_agent.sh"

# A loopback port nobody listens on.
free_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 12000))  # below Linux's ephemeral range: no connect() takes it meanwhile
    [ -z "$(ss -Hltn "sport = :$p" 2>/dev/null)" ] && { echo "$p"; return; }
  done
  echo 29555
}
netns_port=29600  # private to the namespaces; one per run so no TIME_WAIT is met

# pin R: the command prefix that binds rank R (nothing with --bind none).
pin() { [ "$bind" = core ] && echo "taskset -c $(($1 % ncpu))"; }

# launch LINK NP LOG -- chorus_perf args  (non-MPI backends)
launch() {
  local link=$1 np=$2 log=$3
  shift 4
  local pids=() rc=0 r port
  if [ "$link" = netns2 ]; then
    netns_port=$((netns_port + 1))
    for r in 0 1; do
      # shellcheck disable=SC2046  # pin prints a command prefix, split on purpose
      timeout "$run_timeout" "$two_nodes" exec "$r" env RANK=$r WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 \
        MASTER_PORT=$netns_port CHORUS_SOCKET_IFNAME=chorus0 $(pin "$r") "$bin" "$@" >"$log.rank$r" 2>&1 &
      pids+=($!)
    done
  else
    port=$(free_port)
    for ((r = 0; r < np; r++)); do
      # shellcheck disable=SC2046  # pin prints a command prefix, split on purpose
      RANK=$r WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        timeout "$run_timeout" $(pin "$r") "$bin" "$@" >"$log.rank$r" 2>&1 &
      pids+=($!)
    done
  fi
  for p in "${pids[@]}"; do
    local c=0
    wait "$p" || c=$?
    [ "$c" -ne 0 ] && [ "$rc" -eq 0 ] && rc=$c
  done
  cp "$log.rank0" "$log"
  return "$rc"
}

# btls LINK tcp|shm: the --mca btl list (shm: vader between the ranks of one host, which
# the namespaces are not; TCP between hosts).
btls() {
  case "$2" in
    tcp) echo tcp,self ;;
    shm) if [ "$1" = netns2 ]; then echo vader,tcp,self; else echo vader,self; fi ;;
  esac
}

# launch_mpi LINK NP LOG tcp|shm -- chorus_perf args
launch_mpi() {
  local link=$1 np=$2 log=$3 btl=$4
  shift 5
  command -v mpirun >/dev/null || { echo "mpirun not installed (apt-get install openmpi-bin)" >"$log"; return 127; }
  local mca=(--mca btl "$(btls "$link" "$btl")" --mca mpi_yield_when_idle 1 --bind-to none)
  # Each rank pins itself the way launch() pins the others.
  local prog=("$bin")
  [ "$bind" = core ] && prog=(/bin/sh -c "exec taskset -c \$((OMPI_COMM_WORLD_RANK % $ncpu)) \"\$0\" \"\$@\"" "$bin")
  if [ "$link" = netns2 ]; then
    timeout "$run_timeout" "$two_nodes" exec 0 mpirun --allow-run-as-root -np 2 --host 10.77.0.1:1,10.77.0.2:1 \
      --mca plm_rsh_agent "$agent" "${mca[@]}" --mca btl_tcp_if_include chorus0 --mca oob_tcp_if_include chorus0 \
      "${prog[@]}" "$@" >"$log" 2>&1
  else
    timeout "$run_timeout" mpirun --allow-run-as-root --oversubscribe -np "$np" "${mca[@]}" "${prog[@]}" "$@" >"$log" 2>&1
  fi
}

# ---------------------------------------------------------------- iperf3
# wait_listen K|"" PORT: until a server listens (K: in node K's namespace).
wait_listen() {
  local k=$1 port=$2
  for _ in $(seq 50); do
    if [ -n "$k" ]; then
      [ -n "$("$two_nodes" exec "$k" ss -Hltn "sport = :$port" 2>/dev/null)" ] && return 0
    else
      [ -n "$(ss -Hltn "sport = :$port" 2>/dev/null)" ] && return 0
    fi
    sleep 0.1
  done
  return 1
}

# reap PID...: waits for them, at most 10 s, then kills what is left (a server whose
# client never came would wait forever).
reap() {
  local pid
  for _ in $(seq 100); do
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && { sleep 0.1; continue 2; }; done
    break
  done
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
}

# The receiver's Gbit/s from an iperf3 -f g client log, "" if none.
gbits() { awk '/receiver/ { for (i = 1; i <= NF; i++) if ($i == "Gbits/sec") v = $(i - 1) } END { print v }' "$1"; }

# iperf_link LINK: one flow node0 -> node1, then two opposite flows at once.
iperf_link() {
  local link=$1 log="$out/logs/iperf_$1"
  local a0=127.0.0.1 a1=127.0.0.1 n0=() n1=() k0="" k1="" pa pb
  if [ "$link" = netns2 ]; then
    a0=10.77.0.1 a1=10.77.0.2 n0=("$two_nodes" exec 0) n1=("$two_nodes" exec 1) k0=0 k1=1 pa=5301 pb=5302
  else
    pa=$(free_port)
    pb=$(free_port)
    [ "$pb" = "$pa" ] && pb=$((pa + 1))
  fi
  local s1 s0 c0 c1
  "${n1[@]}" iperf3 -s -1 -B "$a1" -p "$pa" >"$log.srv1" 2>&1 &
  s1=$!
  wait_listen "$k1" "$pa" || { echo "   iperf3 server did not start on $link" >&2; reap "$s1"; return 1; }
  timeout $((iperf_s + 20)) "${n0[@]}" iperf3 -c "$a1" -B "$a0" -p "$pa" -t "$iperf_s" -f g >"$log.oneway" 2>&1
  reap "$s1"
  local one; one=$(gbits "$log.oneway")
  if [ -z "$one" ]; then
    echo "   iperf3 one-way on $link gave no result: $(tail -n 1 "$log.oneway" 2>/dev/null)" >&2
    return 1
  fi
  "${n1[@]}" iperf3 -s -1 -B "$a1" -p "$pa" >"$log.srv1" 2>&1 &
  s1=$!
  "${n0[@]}" iperf3 -s -1 -B "$a0" -p "$pb" >"$log.srv0" 2>&1 &
  s0=$!
  if ! wait_listen "$k1" "$pa" || ! wait_listen "$k0" "$pb"; then
    echo "   iperf3 servers did not start on $link" >&2
    reap "$s1" "$s0"
    return 1
  fi
  timeout $((iperf_s + 20)) "${n0[@]}" iperf3 -c "$a1" -B "$a0" -p "$pa" -t "$iperf_s" -f g >"$log.fwd" 2>&1 &
  c0=$!
  timeout $((iperf_s + 20)) "${n1[@]}" iperf3 -c "$a0" -B "$a1" -p "$pb" -t "$iperf_s" -f g >"$log.rev" 2>&1 &
  c1=$!
  wait "$c0" "$c1"
  reap "$s1" "$s0"
  local fwd rev; fwd=$(gbits "$log.fwd"); rev=$(gbits "$log.rev")
  echo "$link,${one:-},${fwd:-},${rev:-}" >>"$out/iperf.csv"
  echo "   iperf3 $link: one flow ${one:-?} Gbit/s; two opposite flows ${fwd:-?} + ${rev:-?} Gbit/s" >&2
}

# ---------------------------------------------------------------- runs
echo "link,nranks,label,kind,backend,algo,coll,size,type,redop,oop_time_us,oop_busbw,oop_wrong,ip_time_us,ip_busbw,ip_wrong" \
  >"$out/results.csv"
echo "link,oneway_gbits,fwd_gbits,rev_gbits" >"$out/iperf.csv"
status=0
start=$SECONDS
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for link in "${link_list[@]}"; do
  np=${link#loopback}; np=${np#netns}
  echo "== link $link ($np ranks)" >&2
  if [ "$iperf_s" -gt 0 ] && [ "$np" = 2 ]; then
    if command -v iperf3 >/dev/null; then
      iperf_link "$link" || iperf_link "$link" || true  # once more on a loaded machine
    else
      echo "   iperf3 not installed: skipped" >&2
    fi
  fi
  for run in $runs; do
    backend="${run%%:*}"
    algo=""
    [ "$run" != "$backend" ] && algo="${run#*:}"
    label="$run"
    file="${link}_${backend}${algo:+_$algo}"
    extra=(--backend "$backend")
    btl=$mpi_btl
    if [ "$backend" = mpi ]; then
      [ -n "$algo" ] && btl=$algo  # mpi:tcp, mpi:shm: the BTL, not an algorithm
    elif [ -n "$algo" ]; then
      extra+=(--algo "$algo")
    fi
    kinds="sweep latency"
    [ "$small_iters" -gt 0 ] && kinds="sweep small latency"
    for kind in $kinds; do
      args=("${sweep[@]}" "${extra[@]}")
      [ "$kind" = small ] && args+=(-e "$small_max" -n "$small_iters" -w 10)
      [ "$kind" = latency ] && args+=(-b 8 -e 8 -n "$lat_iters" -w 20)
      csv="$out/logs/$file.$kind.csv"
      log="$out/logs/$file.$kind.log"
      args+=(--csv "$csv")
      t0=$SECONDS
      rc=0
      if [ "$backend" = mpi ]; then
        launch_mpi "$link" "$np" "$log" "$btl" -- "${args[@]}" || rc=$?
      else
        launch "$link" "$np" "$log" -- "${args[@]}" || rc=$?
      fi
      if [ ! -s "$csv" ] || { [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ]; }; then
        echo "   $label $kind: skipped, exit $rc; last lines of $log:" >&2
        tail -n 3 "$log" | sed 's/^/     /' >&2
        rm -f "$csv"
        continue
      fi
      [ "$rc" -eq 2 ] && { status=2; echo "   $label $kind: WRONG RESULTS (see $log)" >&2; }
      echo "   $label $kind: $((SECONDS - t0)) s $(grep -E '^# Avg bus bandwidth' "$log" | tr -s ' ')" >&2
      tail -n +2 "$csv" | awk -F, -v pre="$link,$np,$label,$kind" 'BEGIN { OFS = "," }
        { print pre, $1, $2, $3, $5, $7, $8, $10, $12, $13, $14, $16, $17 }' >>"$out/results.csv"
    done
  done
done
echo "== measured in $((SECONDS - start)) s" >&2
# Other work on the machine shows in every number (most on the blocking libraries' small
# sizes): say how busy it was.
host_line="$(hostname), $ncpu cores, ranks bound: $bind, mpi: --mpi-btl $mpi_btl, load average $load_start at start, $(cut -d' ' -f1-3 /proc/loadavg) at end, $((SECONDS - start)) s"

# ---------------------------------------------------------------- table
# One block per link: busbw per run (out of place), the best gloo, chorus / best gloo,
# chorus / mpi; then the 8-byte latency row and the link's iperf3 numbers.
awk -F, -v runs="$runs" -v outdir="$out" -v sweep="${sweep[*]}" -v host="$host_line" \
  -v small="$( [ "$small_iters" -gt 0 ] && echo "$small_iters")" -v smallmax="$small_max" '
  # busbw ratios from the times (same size, same factor): exact where busbw rounds to 0.
  function r2(ta, tb) { return (ta != "" && tb != "" && ta + 0 > 0) ? sprintf("%.2f", tb / ta) : "-" }
  BEGIN {
    nr = split(runs, run, " ")
    # The ratio columns use the first chorus run and the first MPI run listed.
    for (k = nr; k >= 1; k--) { if (run[k] ~ /^chorus/) crun = run[k]; if (run[k] ~ /^mpi/) mrun = run[k] }
  }
  FILENAME ~ /iperf.csv$/ { if (FNR > 1) { one[$1] = $2; fwd[$1] = $3; rev[$1] = $4 }; next }
  FNR == 1 { next }
  {
    link = $1
    if (!(link in seenlink)) { seenlink[link] = 1; links[++nl] = link; np[link] = $2 }
    if ($4 == "latency") { lat[link, $3] = $11; latw[link, $3] = $13 + $16; next }
    s = $8 + 0
    if (!((link, s) in seensize)) { seensize[link, s] = 1; sizes[link, ++ns[link]] = s }
    # The "small" run (more iterations) replaces the sweep at its sizes, whatever the order.
    if ($13 + $16 > 0) wrong[link, $3, s] += $13 + $16
    if ($4 == "sweep" && ((link, $3, s) in fromsmall)) next
    if ($4 == "small") fromsmall[link, $3, s] = 1
    bw[link, $3, s] = $12; tm[link, $3, s] = $11
  }
  END {
    printf "# chorus_perf %s, float32 sum unless given; busbw GB/s (out of place, nccl-tests 2(n-1)/n);\n", sweep
    printf "# %s\n", host
    printf "# best_gloo = the best gloo algorithm at that size; chorus/x > 1: chorus is faster (time_x / time_chorus);\n"
    if (small != "") printf "# sizes up to %s: from a second run with %s iterations (-w 10)\n", smallmax, small
    printf "# lat8B = time of an 8-byte all_reduce (separate run, more iterations); \"!\" = #wrong > 0; \"-\" = no result\n"
    for (li = 1; li <= nl; li++) {
      link = links[li]
      tcsv = outdir "/table_" link ".csv"; dat = outdir "/busbw_" link ".dat"
      printf "\n## %s, %d ranks\n", (link ~ /^netns/ ? "two network namespaces (veth)" : "loopback"), np[link]
      printf "%10s", "size(B)"; printf "size" > tcsv; printf "# size" > dat
      for (k = 1; k <= nr; k++) { printf " %12s", short(run[k]); printf ",%s", run[k] > tcsv; printf " %s", run[k] > dat }
      printf " %10s %11s %10s\n", "best_gloo", "chorus/gloo", "chorus/mpi"
      printf ",best_gloo,best_gloo_algo,chorus_over_best_gloo,chorus_over_mpi\n" > tcsv; printf "\n" > dat
      n = ns[link]
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
        if (sizes[link, j] < sizes[link, i]) { t = sizes[link, i]; sizes[link, i] = sizes[link, j]; sizes[link, j] = t }
      for (i = 1; i <= n; i++) {
        s = sizes[link, i]; best = ""; tbest = ""; bestalg = ""
        printf "%10s", human(s); printf "%d", s > tcsv; printf "%d", s > dat
        for (k = 1; k <= nr; k++) {
          v = ((link, run[k], s) in bw) ? bw[link, run[k], s] : ""
          mark = (v != "" && wrong[link, run[k], s] > 0) ? "!" : ""
          printf " %12s", (v == "" ? "-" : sprintf("%.4f%s", v, mark))
          printf ",%s", v > tcsv; printf " %s", (v == "" ? "NaN" : v) > dat
          t = ((link, run[k], s) in tm) ? tm[link, run[k], s] : ""
          if (run[k] ~ /^gloo/ && t != "" && (tbest == "" || t + 0 < tbest + 0)) { best = v; tbest = t; bestalg = run[k] }
        }
        c = ((link, crun, s) in tm) ? tm[link, crun, s] : ""
        m = ((link, mrun, s) in tm) ? tm[link, mrun, s] : ""
        printf " %10s %11s %10s\n", (best == "" ? "-" : sprintf("%.4f", best)), r2(c, tbest), r2(c, m)
        printf ",%s,%s,%s,%s\n", best, bestalg, r2(c, tbest), r2(c, m) > tcsv; printf "\n" > dat
      }
      printf "%10s", "lat8B(us)"; lbest = ""
      for (k = 1; k <= nr; k++) {
        v = ((link, run[k]) in lat) ? lat[link, run[k]] : ""
        printf " %12s", (v == "" ? "-" : sprintf("%.1f%s", v, latw[link, run[k]] > 0 ? "!" : ""))
        if (run[k] ~ /^gloo/ && v != "" && (lbest == "" || v + 0 < lbest + 0)) lbest = v
      }
      c = ((link, crun) in lat) ? lat[link, crun] : ""
      m = ((link, mrun) in lat) ? lat[link, mrun] : ""
      printf " %10s %11s %10s\n", (lbest == "" ? "-" : sprintf("%.1f", lbest)), r2(c, lbest), r2(c, m)
      printf "latency_8B_us" > tcsv
      for (k = 1; k <= nr; k++) printf ",%s", (((link, run[k]) in lat) ? lat[link, run[k]] : "") > tcsv
      printf "\n" > tcsv
      if (link in one)
        printf "iperf3 (same link, same run): one flow %s Gbit/s = %.2f GB/s; two opposite flows %s + %s Gbit/s = %.2f + %.2f GB/s\n",
               one[link], one[link] / 8, fwd[link], rev[link], fwd[link] / 8, rev[link] / 8
      close(tcsv); close(dat)
    }
  }
  function short(r) { sub(/halving_doubling/, "hd", r); sub(/ring_chunked/, "ring_chk", r); sub(/ring_legacy/, "ring_leg", r); return r }
  function human(s) {
    if (s >= 1073741824 && s % 1073741824 == 0) return (s / 1073741824) "G"
    if (s >= 1048576 && s % 1048576 == 0) return (s / 1048576) "M"
    if (s >= 1024 && s % 1024 == 0) return (s / 1024) "K"
    return s
  }' "$out/iperf.csv" "$out/results.csv" | tee "$out/table.txt"

# ---------------------------------------------------------------- plots
if command -v gnuplot >/dev/null; then
  for link in "${link_list[@]}"; do
    dat="$out/busbw_$link.dat"
    [ -s "$dat" ] || continue
    gp="$out/busbw_$link.gp"
    {
      echo "set terminal png size 1100,700 noenhanced"
      echo "set output '$out/busbw_$link.png'"
      echo "set logscale x 2"
      echo "set format x '%.0b%BB'"
      first=$(awk '!/^#/ { print $1; exit }' "$dat")
      echo "set xtics ${first:-1}, 4"
      echo "set xlabel 'message size'"
      echo "set ylabel 'bus bandwidth (GB/s)'"
      echo "set title 'all_reduce busbw, $link: ${sweep[*]}'"
      echo "set key top left opaque box"
      echo "set offsets graph 0, graph 0, graph 0.45, graph 0"  # headroom for the key
      echo "set grid"
      plot="plot"
      col=2
      for run in $runs; do
        plot="$plot '$dat' using 1:$col with linespoints title '$run',"
        col=$((col + 1))
      done
      # The link's speed per direction with both directions busy: what a 2-rank ring can reach.
      rev=$(awk -F, -v l="$link" '$1 == l && $3 != "" { printf "%.3f", ($3 < $4 ? $3 : $4) / 8 }' "$out/iperf.csv")
      [ -n "$rev" ] && plot="$plot $rev with lines dashtype 2 lw 2 title 'iperf3, 2 opposite flows (per flow)',"
      echo "${plot%,}"
    } >"$gp"
    if gnuplot "$gp" 2>"$out/logs/gnuplot_$link.log"; then
      echo "plot: $out/busbw_$link.png" >&2
    else
      echo "gnuplot failed for $link: $(head -n 3 "$out/logs/gnuplot_$link.log")" >&2
    fi
  done
else
  echo "(gnuplot not installed: no plot; apt-get install gnuplot-nox)" >&2
fi
echo "results: $out/table.txt, $out/results.csv, $out/table_<link>.csv, $out/iperf.csv" >&2
exit "$status"
