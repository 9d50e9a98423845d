#!/usr/bin/env bash
# Checks the selector's cost model against reality: for each placement, collective and
# size, the time of every algorithm forced (CHORUS_ALGO) and of the automatic choice,
# beside the model's prediction for each, in one table. It answers two things per row:
# did the automatic choice take the best forced algorithm (or one within 10% of it),
# and how far is each prediction from what was measured.
#
#   tools/perf/cost_model_check.sh [--out DIR] [--bin PATH] [--placements "1x2 1x4 2x1 2x2"]
#                                  [--colls "all_reduce broadcast all_gather reduce reduce_scatter"] [--rounds N]
#                                  [--simulate "FLAGS"] [--sim PATH] [--analyze]
#                                  [-- chorus_perf sweep args (default -b 8 -e 64M -f 8 -n 10 -w 3 -I 4M)]
#
# The variants run in turn, --rounds times (default 2), and each time is the median of
# its rounds, so that a busy moment does not land on one variant only. A forced
# algorithm that cannot run a case (hierarchical on one host, recursive doubling
# all_gather on 3 ranks) is left out of that row.
#
# Placement HxL: H hosts of L ranks each. One host is loopback (shared memory between
# its ranks); two hosts are the two network namespaces of tools/netns/two_nodes.sh
# (TCP over a veth between them, shared memory within each), which needs root.
# Output: DIR/table.txt (also printed) and DIR/rows.csv; DIR/predicted.txt (also printed)
# and DIR/predicted.csv: per forced algorithm and size, predicted against measured µs
# and the error (what tools/simulate predicts at scale, checked where it can run:
# e.g. --placements "1x2 1x4 1x8" --colls all_reduce); logs in DIR/logs.
#
# --simulate "FLAGS" also asks tools/simulate for every measured row, with FLAGS (links
# measured here, e.g. "--inter-latency-us 5 --inter-gbps 3.5"), the placement's hosts
# and its ranks a core on this machine: DIR/simulated.txt and .csv, and per placement how
# many predictions fall within 25% of the measured times (--sim: a simulate binary, else
# built). --analyze reads the logs already in DIR instead of running anything.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
out=/tmp/chorus_cost_model_check
bin=""
placements="1x2 1x4 2x1 2x2"
colls="all_reduce broadcast all_gather"
rounds=2
sim_flags=""
sim=""
simulate=0
analyze=0
while (($#)); do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --placements) placements=$2; shift 2 ;;
    --colls) colls=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --simulate) sim_flags=$2; simulate=1; shift 2 ;;
    --sim) sim=$2; shift 2 ;;
    --analyze) analyze=1; shift ;;
    --) shift; break ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "cost_model_check.sh: unknown flag '$1'" >&2; exit 2 ;;
  esac
done
sweep=("$@")
((${#sweep[@]})) || sweep=(-b 8 -e 64M -f 8 -n 10 -w 3 -I 4M)
if ((!analyze)) && [[ -z "$bin" ]]; then
  (cd "$ROOT" && bazel build -c opt //tools/perf:chorus_perf >/dev/null 2>&1)
  bin="$ROOT/bazel-out/k8-opt/bin/tools/perf/chorus_perf"
fi
mkdir -p "$out/logs"
export CHORUS_NETNS_TAG="cmc$$"
two_nodes="$ROOT/tools/netns/two_nodes.sh"
netns_up=0
cleanup() { ((netns_up)) && "$two_nodes" down >/dev/null 2>&1 || true; }
trap cleanup EXIT

# The algorithms CHORUS_ALGO can force for a collective (algos/selector.cc, Supports).
forced_for() {
  case "$1" in
    all_reduce) echo "ring recursive_doubling rabenseifner tree hierarchical" ;;
    broadcast) echo "tree chain scatter_allgather dissemination hierarchical" ;;
    all_gather) echo "ring recursive_doubling hierarchical" ;;
    reduce) echo "tree hierarchical" ;;
    reduce_scatter) echo "ring hierarchical" ;;
  esac
}

# run PLACEMENT COLL ALGO LOG: one chorus_perf sweep over H*L ranks, ALGO "" = automatic.
run() {
  local hosts=${1%x*} local_n=${1#*x} coll=$2 algo=$3 log=$4
  local n=$((hosts * local_n)) port=$((20000 + RANDOM % 20000)) pids=() r
  for ((r = 0; r < n; r++)); do
    local node=$((r / local_n))
    local env=("RANK=$r" "WORLD_SIZE=$n" "LOCAL_RANK=$((r % local_n))" "MASTER_PORT=$port" "CHORUS_ALGO=$algo")
    if ((hosts > 1)); then
      env+=(MASTER_ADDR=10.77.0.1 CHORUS_SOCKET_IFNAME=chorus0)
      timeout 600 "$two_nodes" exec "$node" env "${env[@]}" "$bin" "$coll" "${sweep[@]}" >"$log.$r" 2>&1 &
    else
      env "${env[@]}" MASTER_ADDR=127.0.0.1 timeout 600 "$bin" "$coll" "${sweep[@]}" >"$log.$r" 2>&1 &
    fi
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  cp "$log.0" "$log"
  return $rc
}

for placement in $placements; do
  ((analyze)) && break
  if [[ ${placement%x*} -gt 1 && $netns_up -eq 0 ]]; then
    if ! why=$("$two_nodes" check 2>&1); then
      echo "skipping $placement: $why"
      continue
    fi
    "$two_nodes" up >/dev/null
    netns_up=1
  fi
  for coll in $colls; do
    for ((round = 1; round <= rounds; round++)); do
      for algo in "" $(forced_for "$coll"); do
        log="$out/logs/${placement}_${coll}_${algo:-auto}_r${round}.log"
        if run "$placement" "$coll" "$algo" "$log"; then
          echo "  $placement $coll ${algo:-auto} round $round: ok"
        else
          echo "  $placement $coll ${algo:-auto} round $round: failed (see $log.*)"
        fi
      done
    done
  done
done

# The simulator's predictions for each placement, as one CSV per placement.
if ((simulate)); then
  if [[ -z "$sim" ]]; then
    (cd "$ROOT" && bazel build -c opt //tools/simulate:simulate >/dev/null 2>&1)
    sim="$ROOT/bazel-out/k8-opt/bin/tools/simulate/simulate"
  fi
  range=()
  for ((i = 0; i < ${#sweep[@]}; i++)); do
    case "${sweep[$i]}" in -b | -e | -f) range+=("${sweep[$i]}" "${sweep[$((i + 1))]}") ;; esac
  done
  cores=$(nproc)
  for placement in $placements; do
    hosts=${placement%x*} local_n=${placement#*x}
    n=$((hosts * local_n))
    per_core=$(awk -v n="$n" -v c="$cores" 'BEGIN { print (n > c ? n / c : 1) }')
    intra=shm
    [[ "${CHORUS_TRANSPORT:-}" == tcp ]] && intra=tcp
    # shellcheck disable=SC2086 # FLAGS are words for the simulator
    "$sim" --csv --ranks "$n" --ranks-per-host "$local_n" --ranks-per-core "$per_core" --intra "$intra" \
      --colls "$(tr ' ' , <<<"$colls")" "${range[@]}" $sim_flags >"$out/sim_$placement.csv"
  done
fi

python3 - "$out" "$simulate" <<'EOF'
import csv, glob, os, re, sys
out, simulate = sys.argv[1], sys.argv[2] == "1"
rows = {}  # (placement, coll, size) -> {variant: (us, chosen, predictions)}
import statistics
runs = {}  # (placement, coll, size, variant) -> [(us, chosen, predictions)] over rounds
for path in glob.glob(os.path.join(out, "logs", "*.log")):
    m = re.match(r"(\d+x\d+)_(all_reduce|broadcast|all_gather|reduce_scatter|reduce)_(.+)_r\d+\.log$", os.path.basename(path))
    if not m:
        continue
    placement, coll, variant = m.groups()
    times, why = [], []  # in size order: the table's rows, the footer's explanations
    for line in open(path, errors="replace"):
        f = line.split()
        if len(f) >= 13 and f[0].isdigit():
            times.append((int(f[0]), float(f[5])))
        w = re.match(r"# \S+ of \d+ \S+ \(\d+ B\) on \d+ ranks: (\S+) \((.*)\)$", line.strip())
        if w:
            why.append((w.group(1), dict((a, float(t)) for a, t in re.findall(r"(\w+) ([\d.]+) us", w.group(2)))))
    for i, (size, us) in enumerate(times):
        runs.setdefault((placement, coll, size, variant), []).append((us, why[i] if i < len(why) else None))
for (placement, coll, size, variant), rs in runs.items():
    chosen = next((w for _, w in rs if w), None)
    # A forced algorithm that did not run (the selector fell back) is no candidate.
    if variant != "auto" and (chosen is None or chosen[0] != variant):
        continue
    rows.setdefault((placement, coll, size), {})[variant] = (statistics.median(us for us, _ in rs), chosen)
table, csv_rows = [], []
hdr = "%-6s %-10s %10s %-20s %9s %-20s %9s %7s  %s" % ("place", "coll", "bytes", "auto", "auto_us", "best_forced", "best_us",
                                                     "right", "prediction error per algorithm (pred/measured)")
table.append(hdr)
within = total = 0
pvm = []  # placement, coll, bytes, algorithm, predicted, measured, error %
for (placement, coll, size) in sorted(rows, key=lambda k: (k[0], k[1], k[2])):
    v = rows[(placement, coll, size)]
    forced = {a: t for a, t in v.items() if a != "auto"}
    if "auto" not in v or not forced:
        continue
    auto_us, auto_why = v["auto"]
    best = min(forced, key=lambda a: forced[a][0])
    best_us = forced[best][0]
    chosen = auto_why[0] if auto_why else "?"
    # Right: auto took the best forced algorithm (its time then differs from that run's by
    # noise only), or one whose time is within 10% of it.
    ok = chosen == best or auto_us <= 1.10 * best_us
    total += 1
    within += ok
    preds = auto_why[1] if auto_why else {}
    errs = " ".join("%s %.2f" % (a, preds[a] / forced[a][0]) for a in sorted(forced) if a in preds and forced[a][0] > 0)
    pvm += [[placement, coll, size, a, preds[a], forced[a][0], 100.0 * (preds[a] - forced[a][0]) / forced[a][0]]
            for a in sorted(forced) if a in preds and forced[a][0] > 0]
    table.append("%-6s %-10s %10d %-20s %9.1f %-20s %9.1f %7s  %s" % (placement, coll, size, chosen, auto_us, best, best_us,
                                                                  "yes" if ok else "NO", errs))
    csv_rows.append([placement, coll, size, chosen, auto_us, best, best_us, ok, errs])
table.append("auto took the best forced algorithm, or one within 10%% of it: %d of %d rows" % (within, total))
open(os.path.join(out, "table.txt"), "w").write("\n".join(table) + "\n")
with open(os.path.join(out, "rows.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["placement", "collective", "bytes", "auto_choice", "auto_us", "best_forced", "best_us", "within_10pct",
                "prediction_over_measured"])
    w.writerows(csv_rows)
print("\n".join(table))


def write_against_measured(name, rows_out, tail=()):
    """DIR/NAME.txt (printed) and .csv: per forced algorithm and size, NAME_us beside the measured time."""
    col = name + "_us"
    lines = ["%-6s %-10s %10s %-20s %12s %12s %8s" % ("place", "coll", "bytes", "forced", col, "measured_us", "error")]
    lines += ["%-6s %-10s %10d %-20s %12.1f %12.1f %7.0f%%" % tuple(r) for r in rows_out]
    lines += list(tail)
    open(os.path.join(out, name + ".txt"), "w").write("\n".join(lines) + "\n")
    with open(os.path.join(out, name + ".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["placement", "collective", "bytes", "algorithm", col, "measured_us", "error_pct"])
        w.writerows(rows_out)
    print("\n" + "\n".join(lines))


write_against_measured("predicted", pvm)
if simulate:
    # tools/simulate's prediction of each forced algorithm's measured time.
    sim = {}  # (placement, coll, bytes, algorithm) -> predicted us
    for path in glob.glob(os.path.join(out, "sim_*.csv")):
        placement = os.path.basename(path)[4:-4]
        for r in csv.DictReader(open(path)):
            for key, v in r.items():
                if key.endswith("_us") and key not in ("chosen_us", "bw_lb_us", "lat_lb_us") and v:
                    sim[(placement, r["collective"], int(r["bytes"]), key[:-3])] = float(v)
    srows, count = [], {}
    for (placement, coll, size), v in sorted(rows.items()):
        for a, (us, _) in sorted(v.items()):
            p = sim.get((placement, coll, size, a))
            if a == "auto" or p is None or us <= 0:
                continue
            srows.append([placement, coll, size, a, p, us, 100.0 * (p - us) / us])
            c = count.setdefault(placement, [0, 0])
            c[0] += abs(p - us) <= 0.25 * us
            c[1] += 1
    write_against_measured("simulated", srows, ["simulated within 25%% of measured on %s: %d of %d" % (p, c[0], c[1])
                                                for p, c in sorted(count.items())])
EOF
