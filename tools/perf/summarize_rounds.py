#!/usr/bin/env python3
"""Summarizes compare_rounds.sh: the median over rounds of each per-round ratio.

Every round is one whole compare.sh run (all backends on each link, back to back), so
each round gives one ratio per size and link, taken inside that round: chorus / best
Gloo, chorus / MPI (times, as compare.sh's table), chorus busbw / iperf3 per direction
(the mean of the two opposite flows of that round, GB/s) and the 8-byte latency
ratio MPI / chorus. The table shows each ratio's median and its range over rounds,
and the median busbw per backend. A round whose compare.sh found #wrong != 0 (exit 2)
or failed is listed and left out.

usage: summarize_rounds.py DIR   (DIR/round_K/ from compare_rounds.sh)
"""
import csv
import statistics
import sys
from pathlib import Path


def human(size):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def cell(values, fmt="{:.2f}"):
    if not values:
        return "-"
    med = fmt.format(statistics.median(values))
    if len(values) == 1:
        return med
    return f"{med} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def short(backend):
    """compare.sh's column names: gloo:halving_doubling -> gloo:hd, ..."""
    for long, abbr in (("halving_doubling", "hd"), ("ring_chunked", "ring_chk"), ("ring_legacy", "ring_leg")):
        backend = backend.replace(long, abbr)
    return backend


def ratio(a, b):
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return None
    return a / b if b > 0 else None


def read_round(d):
    """{link: {"rows": {size: row}, "lat": row, "iperf": GB/s per direction or None}}"""
    iperf = {}
    ipath = d / "iperf.csv"
    if ipath.exists():
        for row in csv.DictReader(ipath.open()):
            try:
                iperf[row["link"]] = (float(row["fwd_gbits"]) + float(row["rev_gbits"])) / 2 / 8
            except (KeyError, ValueError):
                pass
    links = {}
    for t in sorted(d.glob("table_*.csv")):
        link = t.stem[len("table_"):]
        rows, lat = {}, None
        for row in csv.DictReader(t.open()):
            if row["size"] == "latency_8B_us":
                lat = row
            else:
                rows[int(row["size"])] = row
        links[link] = {"rows": rows, "lat": lat, "iperf": iperf.get(link)}
    return links


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    top = Path(sys.argv[1])
    rounds, skipped = [], []
    for d in sorted((p for p in top.glob("round_*") if p.is_dir()), key=lambda p: int(p.name.split("_")[1])):
        rc = (d / "exit_code").read_text().strip() if (d / "exit_code").exists() else "?"
        if rc != "0":
            skipped.append(f"{d.name} (compare.sh exit {rc}{': #wrong != 0' if rc == '2' else ''})")
            continue
        rounds.append(read_round(d))
    print(f"# {len(rounds)} round(s) counted from {top}; median (min-max) over rounds of per-round ratios")
    if skipped:
        print("# left out: " + ", ".join(skipped))
    if not rounds:
        sys.exit(1)
    links = sorted({link for r in rounds for link in r})
    for link in links:
        per = [r[link] for r in rounds if link in r]
        backends = [c for c in per[0]["rows"][next(iter(per[0]["rows"]))].keys()
                    if c not in ("size", "best_gloo", "best_gloo_algo", "chorus_over_best_gloo", "chorus_over_mpi")]
        print(f"\n## {link}: busbw GB/s (median over rounds) and ratios")
        head = f"{'size':>6} " + " ".join(f"{short(b):>13}" for b in backends)
        head += f" {'chorus/best_gloo':>22} {'chorus/mpi':>22} {'chorus/iperf3_dir':>22}"
        print(head)
        sizes = sorted({s for p in per for s in p["rows"]})
        for s in sizes:
            rows = [p["rows"][s] for p in per if s in p["rows"]]
            line = f"{human(s):>6} "
            for b in backends:
                v = [float(r[b]) for r in rows if r.get(b)]
                line += f" {statistics.median(v):13.3f}" if v else f" {'-':>13}"
            g = [float(r["chorus_over_best_gloo"]) for r in rows if r["chorus_over_best_gloo"] not in ("", "-")]
            m = [float(r["chorus_over_mpi"]) for r in rows if r["chorus_over_mpi"] not in ("", "-")]
            ip = [x for x in (ratio(p["rows"][s].get("chorus"), p["iperf"]) for p in per if s in p["rows"]) if x]
            line += f" {cell(g):>22} {cell(m):>22} {cell(ip):>22}"
            print(line)
        lats = [p["lat"] for p in per if p["lat"]]
        lat_line = f"{'lat8B':>6} "
        for b in backends:
            v = [float(r[b]) for r in lats if r.get(b)]
            lat_line += f" {statistics.median(v):13.1f}" if v else f" {'-':>13}"
        gl = [x for x in (ratio(min((float(r[b]) for b in backends if b.startswith("gloo") and r.get(b)), default=None),
                                r.get("chorus")) for r in lats) if x]
        mcol = next((b for b in backends if b.startswith("mpi")), "mpi")  # as compare.sh: the first MPI run
        ml = [x for x in (ratio(r.get(mcol), r.get("chorus")) for r in lats) if x]
        print(lat_line + f" {cell(gl):>22} {cell(ml):>22}   (us; ratios: other / chorus)")
        ips = [p["iperf"] for p in per if p["iperf"]]
        if ips:
            print(f"iperf3 two opposite flows, per direction: {cell(ips, '{:.3f}')} GB/s")


if __name__ == "__main__":
    main()
