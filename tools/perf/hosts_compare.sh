#!/usr/bin/env bash
# chorus against Open MPI on H "hosts" of L ranks each, the hosts being network namespaces
# (tools/netns/two_nodes.sh: a veth pair between two of them), side by side:
#   chorus           chorus's automatic choice: shared memory within a namespace, TCP
#                    between them (the selector may pick the hierarchical all_reduce)
#   chorus_flat_tcp  CHORUS_TRANSPORT=tcp CHORUS_ALGO=ring: the flat ring over TCP between
#                    every pair (chorus before it had shared memory)
#   mpi              Open MPI, --mca btl vader,tcp,self: its shared memory within a
#                    namespace, TCP between them
#   chorus_algo=A    chorus as above with CHORUS_ALGO=A (any algorithm name: hierarchical,
#                    chain, ring, ...), to weigh one algorithm against another
# all through the same chorus_perf binary, in alternating rounds.
#
#   tools/perf/hosts_compare.sh [options] [-- chorus_perf collective and sweep args]
#     --placement HxL   H hosts (namespaces) of L ranks each (default 2x2; 2x1 too; H > 2
#                       puts the namespaces on a bridge)
#     --rounds N        rounds (default 1); each round runs every variant once, the order
#                       rotating by one per round, so that the machine's noise spreads
#                       evenly; the table shows the median over rounds
#     --variants "LIST" of chorus chorus_flat_tcp mpi chorus_algo=A (default: the first three)
#     --out DIR         results (default /tmp/chorus_hosts_compare): table.txt, table.csv
#                       (the table), results.csv (every line of every run), logs/
#     --bin PATH        chorus_perf to use (default: bazel build -c opt
#                       //tools/perf:chorus_perf, then bazel-out/k8-opt/bin/tools/perf/chorus_perf)
#     --timeout S       limit per run, every run under timeout(1) (default 600)
#   Sweep default: all_reduce -b 1M -e 256M -f 4 -n 5 -w 2 (float32 sum).
#
# Needs root (network namespaces); where namespaces cannot be made it says why and exits 3.
# The namespaces get a tag of their own (CHORUS_NETNS_TAG=hc<pid>) and are always removed.
# Nothing is pinned: both namespaces share the machine's cores.
# chorus ranks: rank r runs in namespace r / L with RANK, WORLD_SIZE, LOCAL_RANK,
# LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR=10.77.0.1, MASTER_PORT (a new one per run),
# CHORUS_SOCKET_IFNAME=chorus0; two_nodes.sh exec gives each namespace its CHORUS_HOSTID.
# MPI: mpirun in node0, --host 10.77.0.1:L,10.77.0.2:L,..., the other namespaces' daemons
# started by tools/netns/mpi_rsh_agent.sh (as compare.sh does),
# --mca btl vader,tcp,self --mca btl_tcp_if_include chorus0 --mca oob_tcp_if_include chorus0
# --mca mpi_yield_when_idle 1 --bind-to none.
# Table: busbw (GB/s, out of place, median over rounds), chorus/chorus_flat_tcp,
# chorus/mpi and chorus/A (> 1: chorus faster; median time of the other / median time of chorus),
# #wrong (summed over variants, rounds and both modes; "!" marks the variant), and the
# algorithm chorus chose per size (its footer); the footer's lines follow the table.
# Exit: 0 ok, 1 a run failed (the table shows the rest), 2 wrong results (before 1),
# 3 no namespaces.
set -uo pipefail  # no -e: a failed run is skipped, the rest still run

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
two_nodes="$root/tools/netns/two_nodes.sh"
prog=hosts_compare.sh

out=/tmp/chorus_hosts_compare
placement=2x2
rounds=1
variants="chorus chorus_flat_tcp mpi"
bin=""
run_timeout=600
sweep=()

die() { echo "$prog: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --placement) [ $# -ge 2 ] || die "--placement: missing value"; placement="$2"; shift 2 ;;
    --rounds) [ $# -ge 2 ] || die "--rounds: missing value"; rounds="$2"; shift 2 ;;
    --variants) [ $# -ge 2 ] || die "--variants: missing value"; variants="$2"; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out: missing value"; out="$2"; shift 2 ;;
    --bin) [ $# -ge 2 ] || die "--bin: missing value"; bin="$2"; shift 2 ;;
    --timeout) [ $# -ge 2 ] || die "--timeout: missing value"; run_timeout="$2"; shift 2 ;;
    --) shift; sweep=("$@"); break ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[ ${#sweep[@]} -eq 0 ] && sweep=(all_reduce -b 1M -e 256M -f 4 -n 5 -w 2)
[[ "$placement" =~ ^([0-9]+)x([0-9]+)$ ]] || die "--placement: '$placement' is not HxL (e.g. 2x2)"
hosts=${BASH_REMATCH[1]}
local_n=${BASH_REMATCH[2]}
((hosts >= 2 && hosts <= 200)) || die "--placement: $hosts hosts: the hosts are namespaces, 2 to 200 of them"
((local_n >= 1)) || die "--placement: at least one rank per host"
nranks=$((hosts * local_n))
[[ "$rounds" =~ ^[0-9]+$ ]] && ((rounds >= 1)) || die "--rounds: '$rounds' is not a positive integer"
[[ "$run_timeout" =~ ^[0-9]+$ ]] && ((run_timeout >= 1)) || die "--timeout: '$run_timeout' is not a positive integer"
vlist=()
for v in $variants; do
  case "$v" in
    chorus | chorus_flat_tcp | mpi | chorus_algo=?*) vlist+=("$v") ;;
    *) die "--variants: '$v' is not chorus, chorus_flat_tcp, mpi or chorus_algo=ALGORITHM" ;;
  esac
done
[ ${#vlist[@]} -gt 0 ] || die "--variants: none given"
for a in "${sweep[@]}"; do
  case "$a" in
    --backend* | --csv* | --algo*) die "'$a' after --: the variants set the backend, the algorithm and the CSV" ;;
  esac
done
command -v python3 >/dev/null || die "python3 is needed for the table"
if [[ " ${vlist[*]} " == *" mpi "* ]] && ! command -v mpirun >/dev/null; then
  die "mpirun not found (apt-get install openmpi-bin), or leave mpi out with --variants"
fi

# Namespaces first: without them there is nothing to measure.
export CHORUS_NETNS_TAG="hc$$"
if ! why=$("$two_nodes" check 2>&1); then
  echo "$prog: cannot make network namespaces here, nothing measured: $why" >&2
  echo "$prog: (this needs root and iproute2; see tools/netns/README.md)" >&2
  exit 3
fi

if [ -z "$bin" ]; then
  echo "== building chorus_perf (bazel build -c opt //tools/perf:chorus_perf)" >&2
  build_log=$(mktemp /tmp/hosts_compare_build.XXXXXX)
  (cd "$root" && timeout 3600 bazel build -c opt //tools/perf:chorus_perf >"$build_log" 2>&1) ||
    { tail -n 20 "$build_log" >&2; rm -f "$build_log"; die "build failed (or pass --bin PATH)"; }
  rm -f "$build_log"
  bin="$root/bazel-out/k8-opt/bin/tools/perf/chorus_perf"
fi
[ -x "$bin" ] || die "no chorus_perf at $bin"
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
mkdir -p "$out/logs" || die "cannot create $out/logs"
out="$(cd "$out" && pwd)"
rm -f "$out"/logs/* "$out"/results.csv "$out"/table.csv "$out"/table.txt

# ---------------------------------------------------------------- namespaces
netns_up=0
cleanup() {
  local pid
  for pid in $(jobs -p); do kill "$pid" 2>/dev/null || true; done
  if [ "$netns_up" = 1 ]; then
    "$two_nodes" down >/dev/null 2>&1 || echo "$prog: namespace teardown failed (CHORUS_NETNS_TAG=$CHORUS_NETNS_TAG)" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
netns_up=1  # before up: a half-made layout is removed too
"$two_nodes" up "$hosts" >"$out/logs/netns_up.log" 2>&1 || { cat "$out/logs/netns_up.log" >&2; die "two_nodes.sh up $hosts failed"; }

addr() { echo "10.77.0.$(($1 + 1))"; }

# How mpirun (in node0) starts its daemons in the other namespaces (see the script).
agent="$(dirname "$two_nodes")/mpi_rsh_agent.sh"

mpi_hosts=""
for ((k = 0; k < hosts; k++)); do mpi_hosts="$mpi_hosts${mpi_hosts:+,}$(addr "$k"):$local_n"; done

port=29700  # private to the namespaces; a new one per run so no TIME_WAIT is met

# run_chorus LOG CSV [ENV...]: one sweep over H*L chorus ranks; rank 0's output in LOG.
run_chorus() {
  local log=$1 csv=$2 pids=() rc=0 r p c
  shift 2
  port=$((port + 1))
  for ((r = 0; r < nranks; r++)); do
    local node=$((r / local_n))
    local csvarg=()
    [ "$r" = 0 ] && csvarg=(--csv "$csv")
    timeout "$run_timeout" "$two_nodes" exec "$node" env "$@" RANK=$r WORLD_SIZE=$nranks LOCAL_RANK=$((r % local_n)) \
      LOCAL_WORLD_SIZE="$local_n" GROUP_RANK=$node MASTER_ADDR=10.77.0.1 MASTER_PORT=$port CHORUS_SOCKET_IFNAME=chorus0 \
      "$bin" "${sweep[@]}" --backend chorus "${csvarg[@]}" >"$log.rank$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    c=0
    wait "$p" || c=$?
    [ "$c" -ne 0 ] && { [ "$rc" -eq 0 ] || [ "$rc" -eq 2 ]; } && rc=$c  # a failure outranks "wrong"
  done
  cp "$log.rank0" "$log"
  return "$rc"
}

# run_mpi LOG CSV: the same sweep through mpirun in node0.
run_mpi() {
  local log=$1 csv=$2
  timeout "$run_timeout" "$two_nodes" exec 0 mpirun --allow-run-as-root -np "$nranks" --host "$mpi_hosts" \
    --mca plm_rsh_agent "$agent" --mca btl vader,tcp,self --mca btl_tcp_if_include chorus0 \
    --mca oob_tcp_if_include chorus0 --mca mpi_yield_when_idle 1 --bind-to none \
    "$bin" "${sweep[@]}" --backend mpi --csv "$csv" >"$log" 2>&1
}

# ---------------------------------------------------------------- rounds
echo "round,position,variant,exit,size,count,type,redop,oop_time_us,oop_busbw,oop_wrong,ip_time_us,ip_busbw,ip_wrong" \
  >"$out/results.csv"
status=0
start=$SECONDS
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
nv=${#vlist[@]}
echo "== $placement ($nranks ranks, $hosts namespaces), $rounds round(s): ${sweep[*]}" >&2
for ((round = 1; round <= rounds; round++)); do
  for ((i = 0; i < nv; i++)); do
    v=${vlist[$(((i + round - 1) % nv))]}
    log="$out/logs/r${round}_$v.log"
    csv="$out/logs/r${round}_$v.csv"
    t0=$SECONDS
    rc=0
    case "$v" in
      chorus) run_chorus "$log" "$csv" || rc=$? ;;
      chorus_flat_tcp) run_chorus "$log" "$csv" CHORUS_TRANSPORT=tcp CHORUS_ALGO=ring || rc=$? ;;
      mpi) run_mpi "$log" "$csv" || rc=$? ;;
      chorus_algo=*) run_chorus "$log" "$csv" CHORUS_ALGO="${v#chorus_algo=}" || rc=$? ;;
    esac
    what="exit $rc"
    [ "$rc" = 124 ] && what="timed out after $run_timeout s"
    if [ ! -s "$csv" ] || { [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ]; }; then
      [ "$status" = 0 ] && status=1
      echo "   round $round $v: FAILED, $what, $((SECONDS - t0)) s; last lines of $log*:" >&2
      for f in "$log" "$log".rank*; do [ -f "$f" ] && tail -n 3 "$f" | sed "s|^|     $(basename "$f"): |" >&2; done
      continue
    fi
    if [ "$rc" -eq 2 ]; then
      status=2  # wrong results outrank a failed run
      echo "   round $round $v: WRONG RESULTS (see $log)" >&2
    fi
    echo "   round $round $v: $((SECONDS - t0)) s" >&2
    tail -n +2 "$csv" | awk -F, -v pre="$round,$((i + 1)),$v,$rc" 'BEGIN { OFS = "," }
      { print pre, $5, $6, $7, $8, $10, $12, $13, $14, $16, $17 }' >>"$out/results.csv"
  done
done
elapsed=$((SECONDS - start))
echo "== measured in $elapsed s" >&2
host_line="$(hostname), $(nproc) cores, nothing pinned, load average $load_start at start, $(cut -d' ' -f1-3 /proc/loadavg) at end, $elapsed s"

# ---------------------------------------------------------------- table
python3 - "$out" "$placement" "$rounds" "${vlist[*]}" "${sweep[*]}" "$host_line" <<'EOF' | tee "$out/table.txt"
import csv, glob, os, re, statistics, sys

out, placement, rounds, variants, sweep, host = sys.argv[1:7]
variants = variants.split()
t, bw, wrong, wrong_by = {}, {}, {}, {}  # (variant, size) -> lists; size -> total; (variant, size) -> total
sizes = set()
with open(os.path.join(out, "results.csv")) as f:
    for row in csv.DictReader(f):
        v, s = row["variant"], int(row["size"])
        sizes.add(s)
        t.setdefault((v, s), []).append(float(row["oop_time_us"]))
        bw.setdefault((v, s), []).append(float(row["oop_busbw"]))
        w = int(row["oop_wrong"] or 0) + int(row["ip_wrong"] or 0)
        wrong[s] = wrong.get(s, 0) + w
        wrong_by[(v, s)] = wrong_by.get((v, s), 0) + w

# chorus's footer: "# all_reduce of N float32 (B B) on n ranks: <algo> (<why>)", rank 0, per size.
algo, footer = {}, []
foot_re = re.compile(r"^# \S+ of \d+ \S+ \((\d+) B\) on \d+ ranks: (\S+)(?: \((.*)\))?$")
for path in sorted(glob.glob(os.path.join(out, "logs", "r*_chorus.log")),
                   key=lambda p: int(re.search(r"/r(\d+)_", p).group(1))):
    lines = []
    for line in open(path, errors="replace"):
        m = foot_re.match(line.strip())
        if m:
            a = algo.setdefault(int(m.group(1)), [])
            if m.group(2) not in a:
                a.append(m.group(2))
            lines.append(line.rstrip("\n"))
    if lines:
        footer = ["# " + os.path.basename(path) + ":"] + lines  # the last round's, in full

def human(s):
    for unit, name in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if s >= unit and s % unit == 0:
            return "%d%s" % (s // unit, name)
    return str(s)

def med(x):
    return statistics.median(x) if x else None

def ratio(s, other):
    tc, to = med(t.get(("chorus", s), [])), med(t.get((other, s), []))
    return "%.2f" % (to / tc) if tc and to is not None else "-"

ratios = [o for o in variants if "chorus" in variants and (o in ("chorus_flat_tcp", "mpi") or o.startswith("chorus_algo="))]
rname = {"chorus_flat_tcp": "chorus/flat_tcp", "mpi": "chorus/mpi"}
rname.update({o: "chorus/" + o[len("chorus_algo="):] for o in ratios if o.startswith("chorus_algo=")})
print("# hosts_compare.sh %s (%s namespaces x %s ranks): chorus_perf %s; %s round(s)" %
      (placement, *placement.split("x"), sweep, rounds))
print("# %s" % host)
print("# busbw GB/s, out of place, median over rounds; chorus/x = median time of x / median time of chorus"
      " (> 1: chorus faster)")
print("# chorus: automatic; chorus_flat_tcp: CHORUS_TRANSPORT=tcp CHORUS_ALGO=ring; mpi: Open MPI, btl vader,tcp,self")
print("# #wrong: wrong elements over variants, rounds and both modes (\"!\": that variant); \"-\": no result")
hdr = "%8s" % "size" + "".join(" %15s" % v.replace("chorus_algo=", "chorus:") for v in variants) + "".join(" %15s" % rname[o] for o in ratios) + \
      " %7s  %s" % ("#wrong", "chorus algo" if "chorus" in variants else "")
print(hdr.rstrip())
rows = []
for s in sorted(sizes):
    cells, crow = [], [s]
    for v in variants:
        b = med(bw.get((v, s), []))
        mark = "!" if wrong_by.get((v, s), 0) else ""
        cells.append(" %15s" % ("-" if b is None else "%.4f%s" % (b, mark)))
        crow.append("" if b is None else "%.4f" % b)
    for o in ratios:
        r = ratio(s, o)
        cells.append(" %15s" % r)
        crow.append("" if r == "-" else r)
    a = "/".join(algo.get(s, [])) if "chorus" in variants else ""
    print(("%8s" % human(s) + "".join(cells) + " %7d  %s" % (wrong.get(s, 0), a or ("-" if "chorus" in variants else ""))).rstrip())
    rows.append(crow + [wrong.get(s, 0), a])
if footer:
    print("# chorus's choice per size (footer of rank 0):")
    for line in footer:
        print(line)
with open(os.path.join(out, "table.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["size"] + ["%s_busbw" % v for v in variants] + ["chorus_over_%s" % o for o in ratios] +
               ["wrong", "chorus_algo"])
    w.writerows(rows)
EOF
echo "results: $out/table.txt, $out/table.csv, $out/results.csv, logs in $out/logs" >&2
exit "$status"
