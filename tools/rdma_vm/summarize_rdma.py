#!/usr/bin/env python3
"""Summarizes compare_rdma.sh's log: chorus over RDMA against perftest, per size.

Every round ("# rep N") measured everything, so each round gives one ratio per row
(chorus / perftest, from that round); the table shows the median ratio, the range of
the per-round ratios, and the median bandwidths (MB/s = 10^6 B/s). Baselines:
  send/recv one way   vs ib_write_bw (BW average)
  send/recv both ways vs ib_write_bw -b (BW average, per direction = sum / 2)
  all_reduce busbw    vs ib_write_bw -b per direction (2 ranks: busbw = bytes / time)
A chorus row with #wrong != 0 is reported and not counted.

usage: summarize_rdma.py COMPARE_LOG
"""
import re
import statistics
import sys
from collections import defaultdict

MIB = 1048576 / 1e6  # MiB/s -> MB/s


def parse(lines):
    rep, section = 0, None
    base = defaultdict(dict)  # (kind, size) -> {rep: MB/s}
    ours = defaultdict(dict)  # (kind, size) -> {rep: MB/s}
    lat = defaultdict(list)  # label -> [us] over rounds
    wrong = []
    for line in lines:
        line = line.rstrip("\n")
        body = re.sub(r"^\[rank 0\] ?", "", line)
        if m := re.match(r"# rep (\d+)", line):
            rep = int(m.group(1))
        elif line.startswith("# chorus send/recv one way"):
            section = "uni_poll" if "POLL_US=0" not in line else "uni"
        elif line.startswith("# chorus send/recv both ways"):
            section = "bidir"
        elif line.startswith("# chorus all_reduce"):
            section = "allreduce"
        f = line.split()
        if len(f) >= 10 and f[0] == "ib_write_bw" and f[-1] == "ok":
            base[("uni", int(f[1]))][rep] = float(f[4]) * MIB
        elif len(f) >= 10 and f[0] == "ib_write_bw_bidir" and f[-1] == "ok":
            base[("bidir", int(f[1]))][rep] = float(f[4]) * MIB / 2
        elif len(f) >= 10 and f[0] == "ib_write_lat" and f[-1] == "ok":
            lat[f"ib_write_lat {f[1]} B, typical"].append(float(f[7]))
        if not line.startswith("[rank 0]") or section is None:
            continue
        if m := re.search(r"8-byte latency \(half round trip\): median ([\d.]+) us", body):
            how = {"uni": "engine sleeps at once", "uni_poll": "engine polls 200 us first"}.get(section)
            if how:  # the -d run measures only a few round trips
                lat[f"chorus 8 B half round trip (median), {how}"].append(float(m.group(1)))
            continue
        g = body.split()
        if not g or not g[0].isdigit():
            continue
        size = int(g[0])
        if section in ("uni", "bidir", "uni_poll") and len(g) == 5:
            mbps = size * int(g[1]) / float(g[2])
            if g[4] != "0":
                wrong.append(f"rep {rep} send/recv {section} {size} B: #wrong {g[4]}")
            elif section != "uni_poll":
                ours[(section, size)][rep] = mbps
        elif section == "allreduce" and len(g) == 13:
            for label, t, w in (("oop", g[5], g[8]), ("inplace", g[9], g[12])):
                if w != "0":
                    wrong.append(f"rep {rep} all_reduce {label} {size} B: #wrong {w}")
                else:
                    ours[("allreduce_" + label, size)][rep] = size / float(t)
    return base, ours, lat, wrong


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as fh:
        base, ours, lat, wrong = parse(fh)
    rows = [("uni", "send/recv one way", "ib_write_bw"),
            ("bidir", "send/recv both ways", "ib_write_bw -b /dir"),
            ("allreduce_oop", "all_reduce out-of-place", "ib_write_bw -b /dir"),
            ("allreduce_inplace", "all_reduce in-place", "ib_write_bw -b /dir")]
    print(f"{'benchmark':<24} {'bytes':>9} {'rounds':>6} {'chorus MB/s':>12} {'perftest MB/s':>14}  "
          f"{'baseline':<20} {'ratio':>6}  {'ratio range':>11}")
    for kind, name, bname in rows:
        bkind = "uni" if kind == "uni" else "bidir"
        for size in sorted({s for (k, s) in ours if k == kind}):
            mine, theirs = ours[(kind, size)], base.get((bkind, size), {})
            both = sorted(set(mine) & set(theirs))
            if not both:
                print(f"{name:<24} {size:>9} {0:>6}  (no round with both measurements)")
                continue
            ratios = [mine[r] / theirs[r] for r in both]
            print(f"{name:<24} {size:>9} {len(both):>6} {statistics.median(mine[r] for r in both):>12.1f} "
                  f"{statistics.median(theirs[r] for r in both):>14.1f}  {bname:<20} "
                  f"{statistics.median(ratios):>6.2f}  {min(ratios):.2f}-{max(ratios):.2f}")
    for k, v in lat.items():
        print(f"# latency: {k}: {statistics.median(v):.1f} us (median of {len(v)} round(s): "
              f"{', '.join(f'{x:.1f}' for x in v)})")
    for w in wrong:
        print(f"# WRONG RESULTS: {w}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
