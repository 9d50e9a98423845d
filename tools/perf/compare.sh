#!/usr/bin/env bash
# Runs one chorus_perf sweep through several backends on 2 ranks and prints the results
# side by side (busbw per backend/algo, ratios vs the best Gloo and vs MPI), plus a PNG
# plot when gnuplot is installed. A backend whose run fails (e.g. chorus before it is
# built in) is skipped with a note; the others still compare.
#
#   tools/perf/compare.sh [options] [-- chorus_perf args]
#     --runs "LIST"     runs as backend[:algo], default
#                       "chorus gloo:ring gloo:ring_chunked gloo:halving_doubling gloo:bcube mpi"
#     --out DIR         where CSVs, logs, table and plot go (default /tmp/chorus_perf_compare)
#     --bin PATH        chorus_perf binary (default bazel-bin/tools/perf/chorus_perf)
#     --netns           run the two ranks in two network namespaces through
#                       tools/netns/run_two_nodes.sh (chorus and gloo runs; MPI runs on loopback)
#     --ifname IF       interface for data: CHORUS_SOCKET_IFNAME for chorus/gloo,
#                       --mca btl_tcp_if_include IF for MPI
#     --port N          first MASTER_PORT to use (default 29600; one per run)
#     --timeout S       seconds allowed per run (default 900)
#   Everything after `--` goes to chorus_perf, default: all_reduce -b 8 -e 64M -n 10 -w 3
#
# Example (the numbers in the report): tools/perf/compare.sh -- all_reduce -b 8 -e 256M -n 10 -w 3
set -u -o pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
runs="chorus gloo:ring gloo:ring_chunked gloo:halving_doubling gloo:bcube mpi"
out=/tmp/chorus_perf_compare
bin="$root/bazel-bin/tools/perf/chorus_perf"
netns=0
ifname=""
port=29600
run_timeout=900
perf_args=()

while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --netns) netns=1; shift ;;
    --ifname) ifname="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --timeout) run_timeout="$2"; shift 2 ;;
    --) shift; perf_args=("$@"); break ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown option '$1' (see --help)" >&2; exit 1 ;;
  esac
done
[ ${#perf_args[@]} -eq 0 ] && perf_args=(all_reduce -b 8 -e 64M -n 10 -w 3)

if [ ! -x "$bin" ]; then
  echo "compare.sh: no chorus_perf at $bin; build it with: bazel build //tools/perf:chorus_perf" >&2
  exit 1
fi
mkdir -p "$out"
rm -f "$out"/*.csv

ok_labels=()
for run in $runs; do
  backend="${run%%:*}"
  algo=""
  [ "$run" != "$backend" ] && algo="${run#*:}"
  label="${backend}${algo:+_$algo}"
  csv="$out/$label.csv"
  log="$out/$label.log"
  args=("${perf_args[@]}" --backend "$backend" --csv "$csv")
  [ -n "$algo" ] && args+=(--algo "$algo")
  echo "== $label: chorus_perf ${args[*]}" >&2
  port=$((port + 1))
  rc=0
  if [ "$backend" = mpi ]; then
    if ! command -v mpirun >/dev/null; then
      echo "   skipped: mpirun not installed (apt-get install openmpi-bin)" >&2
      continue
    fi
    mca=(--mca btl tcp,self)
    [ -n "$ifname" ] && mca+=(--mca btl_tcp_if_include "$ifname" --mca oob_tcp_if_include "$ifname")
    timeout "$run_timeout" mpirun --allow-run-as-root --oversubscribe -np 2 "${mca[@]}" \
      "$bin" "${args[@]}" >"$log" 2>&1 || rc=$?
  elif [ "$netns" = 1 ]; then
    timeout "$run_timeout" "$root/tools/netns/run_two_nodes.sh" -- "$bin" "${args[@]}" >"$log" 2>&1 || rc=$?
  else
    pids=()
    for rank in 0 1; do
      dest="$log"
      [ $rank -eq 1 ] && dest="$out/$label.rank1.log"
      RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port ${ifname:+CHORUS_SOCKET_IFNAME=$ifname} \
        timeout "$run_timeout" "$bin" "${args[@]}" >"$dest" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  fi
  if [ "$rc" -ne 0 ] || [ ! -s "$csv" ]; then
    echo "   skipped: $label failed (exit $rc); last lines of $log:" >&2
    tail -n 3 "$log" | sed 's/^/     /' >&2
    rm -f "$csv"
    continue
  fi
  ok_labels+=("$label")
  grep -E '^# Avg bus bandwidth' "$log" | sed "s/^/   /" >&2
done

if [ ${#ok_labels[@]} -eq 0 ]; then
  echo "compare.sh: every run failed; see $out/*.log" >&2
  exit 1
fi

# Side-by-side table: one row per size, out-of-place busbw and time per run.
files=()
for l in "${ok_labels[@]}"; do files+=("$out/$l.csv"); done
awk -F, -v labels="${ok_labels[*]}" -v datfile="$out/busbw.dat" '
  function fmt_ratio(a, b) { return (b > 0 && a != "") ? sprintf("%.2f", a / b) : "-" }
  BEGIN { n = split(labels, lab, " ") }
  FNR == 1 { file_idx++; next }
  {
    size = $5 + 0
    if (!(size in seen)) { seen[size] = 1; sizes[++nsizes] = size }
    bw[file_idx, size] = $11; tm[file_idx, size] = $10
  }
  END {
    # Sizes in ascending order (insertion order is ascending per file already).
    for (i = 1; i <= nsizes; i++) for (j = i + 1; j <= nsizes; j++)
      if (sizes[j] < sizes[i]) { t = sizes[i]; sizes[i] = sizes[j]; sizes[j] = t }
    for (k = 1; k <= n; k++) {
      if (lab[k] ~ /^gloo/) has_gloo = 1
      if (lab[k] == "mpi") mpi = k
      if (lab[k] == "chorus") chorus = k
    }
    printf "# busbw (GB/s, out-of-place) per backend_algo; ratios use the best gloo algo at each size\n"
    printf "%12s", "size(B)"
    for (k = 1; k <= n; k++) printf " %18s", lab[k]
    if (has_gloo) printf " %10s", "best_gloo"
    if (chorus && has_gloo) printf " %14s", "chorus/gloo"
    if (chorus && mpi) printf " %12s", "chorus/mpi"
    if (has_gloo && mpi) printf " %12s", "gloo/mpi"
    printf "\n"
    printf "# size" > datfile
    for (k = 1; k <= n; k++) printf " %s", lab[k] > datfile
    printf "\n" > datfile
    for (i = 1; i <= nsizes; i++) {
      s = sizes[i]; best = ""
      printf "%12d", s
      printf "%d", s > datfile
      for (k = 1; k <= n; k++) {
        v = ((k, s) in bw) ? bw[k, s] : ""
        printf " %18s", (v == "" ? "-" : sprintf("%.3f", v))
        printf " %s", (v == "" ? "NaN" : v) > datfile
        if (lab[k] ~ /^gloo/ && v != "" && (best == "" || v + 0 > best + 0)) best = v
      }
      printf "\n" > datfile
      if (has_gloo) printf " %10s", (best == "" ? "-" : sprintf("%.3f", best))
      cv = chorus ? bw[chorus, s] : ""; mv = mpi ? bw[mpi, s] : ""
      if (chorus && has_gloo) printf " %14s", fmt_ratio(cv, best)
      if (chorus && mpi) printf " %12s", fmt_ratio(cv, mv)
      if (has_gloo && mpi) printf " %12s", fmt_ratio(best, mv)
      printf "\n"
    }
    printf "\n# time (us, out-of-place, max over ranks)\n%12s", "size(B)"
    for (k = 1; k <= n; k++) printf " %18s", lab[k]
    printf "\n"
    for (i = 1; i <= nsizes; i++) {
      s = sizes[i]; printf "%12d", s
      for (k = 1; k <= n; k++) printf " %18s", (((k, s) in tm) ? sprintf("%.1f", tm[k, s]) : "-")
      printf "\n"
    }
  }' "${files[@]}" | tee "$out/table.txt"

if command -v gnuplot >/dev/null; then
  {
    echo "set terminal png size 1000,650 noenhanced"
    echo "set output '$out/busbw.png'"
    echo "set logscale x 2"
    echo "set xtics 4"
    echo "set format x '%.0b%BB'"
    echo "set xlabel 'message size'"
    echo "set ylabel 'bus bandwidth (GB/s)'"
    echo "set title 'chorus_perf ${perf_args[*]} (2 ranks)'"
    echo "set key top left"
    echo "set grid"
    plot="plot"
    col=2
    for l in "${ok_labels[@]}"; do
      plot="$plot '$out/busbw.dat' using 1:$col with linespoints title '$l',"
      col=$((col + 1))
    done
    echo "${plot%,}"
  } > "$out/busbw.gp"
  if gnuplot "$out/busbw.gp" 2>"$out/gnuplot.log"; then
    echo "plot: $out/busbw.png" >&2
  else
    echo "gnuplot failed: $(head -n 3 "$out/gnuplot.log")" >&2
  fi
else
  echo "(gnuplot not installed: no plot; apt-get install gnuplot-nox)" >&2
fi
