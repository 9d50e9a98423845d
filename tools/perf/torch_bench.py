#!/usr/bin/python3
"""torch.distributed benchmark: the "chorus" backend (torch_chorus) against "gloo", side by side.

Every rank runs this script (tools/perf/torch_bench.sh launches them; any launcher that
sets MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE will do). Both backends live in the
same processes: the default group uses the first backend of --backends (chorus), a second
group over the same ranks the second one (gloo), and a third gloo group, used only by the
harness (gathering timings and error counts), keeps that traffic off the measured groups.

Collectives (all_reduce SUM float32, broadcast from --root 0): for each size, --rounds
rounds, each the first backend then the second: warm-up calls (--warmup in the first
round, 1 later), then timed calls, each timed alone (perf_counter around the blocking
call). Before each call its buffer is re-filled (all_reduce is in place; broadcast's
receivers are zeroed) and after it the whole output is compared with the expected values,
both outside the timed window. A row's time is the largest over ranks of each rank's
median call time (the slowest rank counts, as in nccl-tests); #wrong counts the wrong
elements over every call (warm-up included) and every rank (0 expected). busbw as
nccl-tests: all_reduce S/t * 2(n-1)/n, broadcast S/t (1e9 B/s). Large sizes get fewer
calls (about --bytes-budget / size).

DDP: one MLP (--ddp-layers Linear layers --ddp-width wide, ~50M parameters by default),
copied into one DistributedDataParallel model per backend (each on its own group, same
seed, same data), trained in alternating steps; a step is zero_grad + forward + backward
(the gradient all-reduces) + SGD step, timed on each rank, the slowest rank counts, mean
over --ddp-steps after --ddp-warmup. A "local" row (same model, no DDP, no communication)
gives the compute floor. At the end every replica must equal rank 0's bit for bit.

Exit: 0 ok; 2 a backend cannot be imported (torch_chorus not found: says how to build it);
3 wrong results or replicas that differ; 1 any other error.
"""

import argparse
import copy
import datetime
import math
import os
import platform
import re
import resource
import statistics
import sys
import time

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}

INSTALL_HINT = """\
torch_bench: cannot import torch_chorus ({err}).
  PYTHONPATH (or --pkg DIR) must name a directory that holds the torch_chorus package:
  torch_chorus/__init__.py and the built torch_chorus/_C.so. To build and install it
  (into the system Python, or with --target DIR somewhere PYTHONPATH then names):
      tools/torch/install.sh [--target DIR]
  or by hand, from the repository root:
      bazel build //torch_chorus:all
      mkdir -p /tmp/tbpkg/torch_chorus
      ln -sf $PWD/torch_chorus/*.py $PWD/bazel-bin/torch_chorus/_C.so /tmp/tbpkg/torch_chorus/
      tools/perf/torch_bench.sh --pkg /tmp/tbpkg ...   (or PYTHONPATH=/tmp/tbpkg)
  (use the system interpreter, /usr/bin/python3: it is the one with PyTorch)"""


def parse_bytes(text):
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size like 8, 4K, 256M, 1G")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def parse_sizes(text):
    """'MIN:MAX[:FACTOR]' (geometric; MAX itself is added when the ladder misses it) or 'A,B,C'."""
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise argparse.ArgumentTypeError(f"--sizes '{text}': use MIN:MAX[:FACTOR] or A,B,C")
        lo, hi = parse_bytes(parts[0]), parse_bytes(parts[1])
        factor = int(parts[2]) if len(parts) == 3 else 4
        if lo < 4 or hi < lo or factor < 2:
            raise argparse.ArgumentTypeError(f"--sizes '{text}': need 4 <= MIN <= MAX, FACTOR >= 2")
        sizes, s = [], lo
        while s <= hi:  # bounded: s grows by factor >= 2 each turn
            sizes.append(s)
            s *= factor
        if sizes[-1] != hi:
            sizes.append(hi)
        return sizes
    sizes = sorted({parse_bytes(p) for p in text.split(",") if p.strip()})
    if not sizes or sizes[0] < 4:
        raise argparse.ArgumentTypeError(f"--sizes '{text}': sizes must be >= 4 bytes")
    return sizes


def human(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="torch_bench.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Environment: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE (env://). "
               "Launch with tools/perf/torch_bench.sh -n 2|4 [--netns].")
    p.add_argument("--pkg", metavar="DIR", help="directory holding the torch_chorus package "
                   "(prepended to sys.path; else PYTHONPATH must have it)")
    p.add_argument("--backends", default="chorus,gloo",
                   help="the two backends compared, A,B: A is the default group, B a new_group "
                        "over the same ranks; ratios are A/B (default chorus,gloo; gloo,gloo "
                        "for a dry run without torch_chorus)")
    p.add_argument("--collectives", default="all_reduce,broadcast",
                   help="comma list of all_reduce, broadcast, or 'none' (default both)")
    p.add_argument("--sizes", type=parse_sizes, default=parse_sizes("8:256M:4"),
                   help="MIN:MAX[:FACTOR] in bytes, geometric (MAX added if the ladder misses "
                        "it), or a list A,B,C; suffixes K M G (default 8:256M:4)")
    p.add_argument("--max-bytes", type=parse_bytes, default=None,
                   help="drop sizes above this (e.g. 16M for a quick run)")
    p.add_argument("--iters", type=int, default=60,
                   help="timed calls per row and backend for small sizes (default 60); fewer "
                        "for large ones: about --bytes-budget / size, at least --min-iters")
    p.add_argument("--rounds", type=int, default=3,
                   help="the timed calls are split into this many rounds, A then B in each "
                        "(default 3), so that slow drifts hit both backends alike")
    p.add_argument("--min-iters", type=int, default=3, help="timed calls at the largest sizes (default 3)")
    p.add_argument("--bytes-budget", type=parse_bytes, default=parse_bytes("512M"),
                   help="bytes per row and backend that set the timed calls of large sizes "
                        "(default 512M: 256 MiB gets --min-iters calls)")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed calls before each row's first round (default 3; 1 from 16 MiB "
                        "up); 1 before each later round (none from 16 MiB up)")
    p.add_argument("--root", type=int, default=0, help="broadcast root (default 0)")
    p.add_argument("--ddp", dest="ddp", action="store_true", default=True, help="run the DDP step (default)")
    p.add_argument("--no-ddp", dest="ddp", action="store_false", help="skip the DDP step")
    p.add_argument("--ddp-width", type=int, default=2048, help="MLP width (default 2048)")
    p.add_argument("--ddp-layers", type=int, default=12,
                   help="Linear layers (default 12: 50.4M parameters at width 2048)")
    p.add_argument("--ddp-batch", type=int, default=8, help="per-rank batch (default 8)")
    p.add_argument("--ddp-steps", type=int, default=10, help="timed steps per backend (default 10)")
    p.add_argument("--ddp-warmup", type=int, default=3, help="untimed steps per backend (default 3)")
    p.add_argument("--no-local", dest="local", action="store_false", default=True,
                   help="skip the DDP row without communication")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads per rank (default 1: ranks share few cores)")
    p.add_argument("--timeout", type=float, default=600,
                   help="seconds for set-up and for any one collective (init_process_group's timeout)")
    p.add_argument("--check-import", action="store_true",
                   help="only check that the backends can be imported (exit 0 or 2); no ranks needed")
    p.add_argument("--out", metavar="FILE", help="rank 0 also writes the Markdown report here")
    p.add_argument("--corrupt-for-test", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    a = p.parse_args(argv)
    a.backends = [b.strip() for b in a.backends.split(",") if b.strip()]
    if len(a.backends) != 2:
        p.error("--backends: name exactly two, e.g. chorus,gloo")
    colls = [c.strip() for c in a.collectives.split(",") if c.strip()]
    a.collectives = [] if colls == ["none"] else colls
    for c in a.collectives:
        if c not in ("all_reduce", "broadcast"):
            p.error(f"--collectives: unknown '{c}' (all_reduce, broadcast, none)")
    if a.max_bytes is not None:
        a.sizes = [s for s in a.sizes if s <= a.max_bytes]
    a.sizes = [s - s % 4 for s in a.sizes]  # whole float32 elements
    if a.collectives and not a.sizes:
        p.error("no sizes left (--sizes / --max-bytes)")
    for name in ("iters", "rounds", "min_iters", "ddp_steps", "ddp_width", "ddp_layers", "ddp_batch", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.warmup < 0 or a.ddp_warmup < 0:
        p.error("warm-up counts must be >= 0")
    return a


def import_backends(args):
    """Imports what the backends need; exits 2 with build instructions if torch_chorus is missing."""
    if args.pkg:
        sys.path.insert(0, os.path.abspath(args.pkg))
    if "chorus" in args.backends:
        try:
            import torch_chorus  # noqa: F401  (registers the "chorus" backend)
        except Exception as e:  # ImportError, or an OSError from loading _C.so
            print(INSTALL_HINT.format(err=f"{type(e).__name__}: {e}"),
                  file=sys.stderr)
            sys.exit(2)
        return torch_chorus
    return None


class Bench:
    def __init__(self, args):
        import torch
        import torch.distributed as dist
        self.torch, self.dist, self.args = torch, dist, args
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.t_start = time.monotonic()
        self.load_start = os.getloadavg()[0]
        timeout = datetime.timedelta(seconds=args.timeout)
        a, b = args.backends
        dist.init_process_group(a, timeout=timeout)  # env://
        self.groups = [dist.group.WORLD, dist.new_group(backend=b, timeout=timeout)]
        self.ctrl = dist.new_group(backend="gloo", timeout=timeout)
        # Labels: "gloo,gloo" becomes gloo(A), gloo(B).
        self.labels = list(args.backends) if a != b else [f"{a}(A)", f"{b}(B)"]

    # -- harness traffic, on the ctrl group only ------------------------------------
    def max_over_ranks(self, values):
        t = self.torch.tensor(values, dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, group=self.ctrl)
        return t.tolist()

    def sum_over_ranks(self, value):
        t = self.torch.tensor([value], dtype=self.torch.int64)
        self.dist.all_reduce(t, group=self.ctrl)
        return int(t.item())

    # -- was the machine busy with something else? (every rank on this host only) -----
    @staticmethod
    def _machine_cpu():
        """CPU seconds the machine spent in user+nice+system (/proc/stat; not irq/softirq,
        where loopback traffic is often counted), or None off Linux."""
        try:
            with open("/proc/stat") as f:
                v = f.readline().split()
            return (int(v[1]) + int(v[2]) + int(v[3])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    @staticmethod
    def _own_cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    @staticmethod
    def _kthreads_cpu():
        """CPU seconds of kernel threads (ksoftirqd, kworkers: network processing for the
        ranks' own traffic lands there), so that it is not blamed on other processes."""
        total, hz = 0, os.sysconf("SC_CLK_TCK")
        try:
            pids = [d for d in os.listdir("/proc") if d.isdigit()]
        except OSError:
            return 0.0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # gone meanwhile
            if int(fields[6]) & 0x00200000:  # PF_KTHREAD
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / hz

    def cpu_mark(self):
        self.dist.barrier(group=self.ctrl)
        if self.rank == 0:
            return (time.monotonic(), self._machine_cpu(), self._own_cpu(), self._kthreads_cpu())
        return (time.monotonic(), None, self._own_cpu(), None)

    def cpu_other(self, mark):
        """(CPU s other processes used since `mark`, CPU s of kernel threads, CPU s available),
        or None: the machine's busy time less the ranks' and the kernel threads' (so only
        when every rank runs on this machine)."""
        end = self.cpu_mark()
        t = self.torch.tensor([end[2] - mark[2]], dtype=self.torch.float64)
        self.dist.all_reduce(t, group=self.ctrl)
        one_host = int(os.environ.get("LOCAL_WORLD_SIZE", "0")) == self.world or \
            os.environ.get("TORCH_BENCH_ONE_HOST") == "1"
        if self.rank != 0 or mark[1] is None or end[1] is None or not one_host:
            return None
        kthreads = end[3] - mark[3]
        other = (end[1] - mark[1]) - t.item() - kthreads
        return max(0.0, other), kthreads, (end[0] - mark[0]) * (os.cpu_count() or 1)

    def progress(self, msg):
        if self.rank == 0 and not self.args.quiet:
            print(f"[{time.monotonic() - self.t_start:7.1f} s] {msg}", file=sys.stderr, flush=True)

    # -- collectives --------------------------------------------------------------
    def pattern(self, count, rank):
        """Small integers 1..7, (i + 3 rank) % 7 + 1 at index i: sums are exact in float32."""
        return self.periodic(self.torch.tensor([float((i + 3 * rank) % 7 + 1) for i in range(7)]), count)

    def periodic(self, period, count):
        """`period` (7 values) repeated over `count` elements (a copy: fast, unlike % on indices)."""
        torch = self.torch
        out = torch.empty(count, dtype=torch.float32)
        whole = count - count % 7
        block = out[:whole].view(-1, 7)
        block.copy_(period.expand_as(block))
        out[whole:] = period[: count - whole]
        return out

    def expected(self, coll, count):
        torch = self.torch
        if coll == "all_reduce":
            period = torch.zeros(7)
            for r in range(self.world):
                period += torch.tensor([float((i + 3 * r) % 7 + 1) for i in range(7)])
            return self.periodic(period, count)
        return self.pattern(count, self.args.root)

    def count_wrong(self, out, exp):
        """Elements of `out` that differ from `exp` (NaN included): torch.equal first, as
        counting is slow in this torch build and is only needed when something is wrong."""
        torch = self.torch
        if torch.equal(out, exp):
            return 0
        return int(torch.count_nonzero(torch.ne(out, exp)).item())

    def iterations(self, nbytes):
        """(warm-up calls in the first round, in later rounds, timed calls per round, rounds)."""
        a = self.args
        iters = max(a.min_iters, min(a.iters, a.bytes_budget // nbytes))
        rounds = max(1, min(a.rounds, iters))
        per_round = max(1, iters // rounds)
        if nbytes >= (16 << 20):  # large calls: one warm-up, and none between rounds
            return min(a.warmup, 1), 0, per_round, rounds
        return a.warmup, min(a.warmup, 1), per_round, rounds

    def timed_calls(self, coll, bufs, group, warmup, iters):
        """warmup + iters calls; each refilled before and checked after (outside the timed
        window). Returns (times of the timed calls, wrong elements over all calls)."""
        dist, a = self.dist, self.args
        src, buf, exp = bufs
        corrupt = a.corrupt_for_test and group is self.groups[0] and self.rank == self.world - 1
        is_root = self.rank == a.root
        times, wrong = [], 0
        for i in range(warmup + iters):
            if coll == "all_reduce":
                buf.copy_(src)  # in place: start from this rank's input again
                t0 = time.perf_counter()
                dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=group)
                t1 = time.perf_counter()
            else:
                if not is_root:
                    buf.zero_()  # 0 never occurs in the pattern: a missed byte shows
                t0 = time.perf_counter()
                dist.broadcast(buf, src=a.root, group=group)
                t1 = time.perf_counter()
            if corrupt:
                buf[-1] = -1.0  # the harness's own test: this element must be counted wrong
            wrong += self.count_wrong(buf, exp)
            if i >= warmup:
                times.append(t1 - t0)
        return times, wrong

    def bench_collectives(self):
        rows = []
        a = self.args
        torch = self.torch
        for coll in a.collectives:
            for nbytes in a.sizes:
                count = nbytes // 4
                exp = self.expected(coll, count)
                if coll == "all_reduce":
                    src = self.pattern(count, self.rank)
                    buf = torch.empty_like(src)
                else:  # the root's buffer holds the data (and must stay as it is)
                    src = None
                    buf = exp.clone() if self.rank == a.root else torch.zeros(count)
                warmup, rewarm, per_round, rounds = self.iterations(nbytes)
                times, wrong = ([], []), [0, 0]
                for rnd in range(rounds):  # A then B, alternating, `rounds` times
                    for k, group in enumerate(self.groups):
                        self.dist.barrier(group=self.ctrl)
                        t, w = self.timed_calls(coll, (src, buf, exp), group,
                                                warmup if rnd == 0 else rewarm, per_round)
                        times[k].extend(t)
                        wrong[k] += w
                del src, buf, exp
                row = {"coll": coll, "bytes": nbytes, "count": count}
                factor = 2 * (self.world - 1) / self.world if coll == "all_reduce" else 1.0
                for k in (0, 1):
                    # Each rank's median call time; the slowest rank's counts (nccl-tests
                    # takes the maximum over ranks too).
                    t = self.max_over_ranks([statistics.median(times[k])])[0]
                    row[k] = {"t": t, "wrong": self.sum_over_ranks(wrong[k]), "iters": len(times[k]),
                              "busbw": nbytes / t * factor / 1e9}
                self.progress(f"{coll} {human(nbytes)}: " + ", ".join(
                    f"{self.labels[k]} {row[k]['t'] * 1e6:.1f} us (#wrong {row[k]['wrong']})" for k in (0, 1)))
                rows.append(row)
        return rows

    # -- DDP ----------------------------------------------------------------------
    def bench_ddp(self):
        torch, a = self.torch, self.args
        from torch.nn.parallel import DistributedDataParallel as DDP
        nn = torch.nn
        torch.manual_seed(1234)  # same on every rank; DDP broadcasts rank 0's anyway
        layers = []
        for i in range(a.ddp_layers):
            layers.append(nn.Linear(a.ddp_width, a.ddp_width))
            if i + 1 < a.ddp_layers:
                layers.append(nn.ReLU())
        base = nn.Sequential(*layers)
        nparams = sum(p.numel() for p in base.parameters())
        g = torch.Generator().manual_seed(99 + self.rank)  # each rank its own data
        x = torch.randn(a.ddp_batch, a.ddp_width, generator=g)
        y = torch.randn(a.ddp_batch, a.ddp_width, generator=g)
        loss_fn = nn.MSELoss()

        entries = []  # (label, model, optimizer, is_ddp)
        for k, group in enumerate(self.groups):
            m = DDP(copy.deepcopy(base), process_group=group)
            entries.append((self.labels[k], m, torch.optim.SGD(m.parameters(), lr=1e-3), True))
        if a.local:
            m = copy.deepcopy(base)
            entries.append(("local (no comm)", m, torch.optim.SGD(m.parameters(), lr=1e-3), False))
        del base

        times = [[] for _ in entries]
        last_loss = [math.nan for _ in entries]
        for step in range(a.ddp_warmup + a.ddp_steps):
            for e, (label, model, opt, _) in enumerate(entries):  # alternate the models
                self.dist.barrier(group=self.ctrl)
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model(x), y)
                loss.backward()  # DDP all-reduces the gradients here
                opt.step()
                t1 = time.perf_counter()
                last_loss[e] = loss.item()
                if step >= a.ddp_warmup:
                    times[e].append(t1 - t0)
            self.progress(f"ddp step {step + 1}/{a.ddp_warmup + a.ddp_steps}" +
                          ("" if step >= a.ddp_warmup else " (warm-up)"))

        results = []
        for e, (label, model, opt, is_ddp) in enumerate(entries):
            slowest = self.max_over_ranks(times[e])
            flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
            diff = None
            if is_ddp:
                ref = flat.clone()
                self.dist.broadcast(ref, src=0, group=self.ctrl)
                diff = self.sum_over_ranks(self.count_wrong(flat, ref))
            results.append({"label": label, "mean": statistics.mean(slowest),
                            "median": statistics.median(slowest), "loss": last_loss[e],
                            "replica_diff": diff, "flat": flat if is_ddp else None, "ddp": is_ddp})
        # How far the two backends' models drifted apart (reduction order differs: tiny).
        f0, f1 = results[0]["flat"], results[1]["flat"]
        drift = float((f0 - f1).abs().max().item())
        for r in results:
            r.pop("flat")
        return {"params": nparams, "results": results, "drift": drift}

    # -- report -------------------------------------------------------------------
    def report(self, rows, ddp):
        a, torch = self.args, self.torch
        A, B = self.labels
        lines = []
        ifname = os.environ.get("CHORUS_SOCKET_IFNAME", "?")
        gifname = os.environ.get("GLOO_SOCKET_IFNAME", "(gloo's default)")
        lines.append(f"### torch.distributed: {A} vs {B}, {self.world} ranks")
        lines.append("")
        lines.append(f"- torch {torch.__version__}, Python {platform.python_version()}, "
                     f"{os.cpu_count()} CPUs on {platform.node()}; torch threads per rank: {a.threads}; "
                     f"1-min load average {self.load_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end "
                     f"(the benchmark's own ranks included); {time.monotonic() - self.t_start:.0f} s")
        busy = []
        for part, v in self.other_cpu.items():
            if v is not None:
                busy.append(f"{part}: other processes {v[0]:.0f} of {v[2]:.0f} CPU-s available "
                            f"({100 * v[0] / max(v[2], 1e-9):.0f}%), kernel threads {v[1]:.0f}")
        if busy:
            worst = max(v[0] / max(v[2], 1e-9) for v in self.other_cpu.values() if v is not None)
            lines.append("- CPU used beside the ranks (the machine's busy time less the ranks' own): "
                         + "; ".join(busy) +
                         (" — **the machine was busy with something else: timings are disturbed**"
                          if worst > 0.20 else " (up to ~10% is accounting noise: /proc/stat is "
                                                "sampled at ticks)"))
        setup = os.environ.get("TORCH_BENCH_SETUP", "launched by hand")
        lines.append(f"- {setup}; MASTER_ADDR={os.environ.get('MASTER_ADDR')}, CHORUS_SOCKET_IFNAME={ifname}, "
                     f"GLOO_SOCKET_IFNAME={gifname}; default group {a.backends[0]}, "
                     f"second group new_group(backend=\"{a.backends[1]}\") on the same ranks")
        if rows:
            lines.append(f"- float32; all_reduce SUM (in place), broadcast from rank {a.root}; "
                         f"{A} then {B} in each of {a.rounds} rounds per size; time = each rank's median "
                         "call time, the slowest rank's; busbw (GB/s, 1e9) as nccl-tests: "
                         "all_reduce S/t·2(n−1)/n, broadcast S/t; #wrong = wrong output elements over "
                         "all calls and ranks (every call's output checked); "
                         f"ratio = {A} time / {B} time (< 1: {A} faster)")
            lines.append("")
            lines.append(f"| collective | size | count | iters | {A} µs | {A} busbw | {A} #wrong "
                         f"| {B} µs | {B} busbw | {B} #wrong | {A}/{B} time |")
            lines.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
            for r in rows:
                x, y = r[0], r[1]
                lines.append(
                    f"| {r['coll']} | {human(r['bytes'])} | {r['count']} | {x['iters']} "
                    f"| {x['t'] * 1e6:.1f} | {x['busbw']:.3f} | {x['wrong']} "
                    f"| {y['t'] * 1e6:.1f} | {y['busbw']:.3f} | {y['wrong']} "
                    f"| {x['t'] / y['t']:.2f} |")
        if ddp:
            lines.append("")
            lines.append(f"DDP step: MLP {a.ddp_layers} × Linear({a.ddp_width}, {a.ddp_width}), "
                         f"{ddp['params'] / 1e6:.1f}M parameters ({ddp['params'] * 4 / 2**20:.0f} MiB of "
                         f"gradients all-reduced per step), batch {a.ddp_batch} per rank, SGD; "
                         f"zero_grad+forward+backward+step, slowest rank per step, "
                         f"{a.ddp_steps} steps after {a.ddp_warmup} warm-up, models alternating")
            lines.append("")
            lines.append("| model | mean step ms | median step ms | last loss (rank 0) | replicas equal |")
            lines.append("|---|--:|--:|--:|---|")
            for r in ddp["results"]:
                eq = "—" if r["replica_diff"] is None else (
                    "yes" if r["replica_diff"] == 0 else f"NO ({r['replica_diff']} values differ)")
                lines.append(f"| {r['label']} | {r['mean'] * 1e3:.1f} | {r['median'] * 1e3:.1f} "
                             f"| {r['loss']:.6f} | {eq} |")
            r0, r1 = ddp["results"][0], ddp["results"][1]
            lines.append(f"| **{A}/{B}** | **{r0['mean'] / r1['mean']:.2f}** "
                         f"| **{r0['median'] / r1['median']:.2f}** | | |")
            lines.append("")
            lines.append(f"Largest |{A} parameter − {B} parameter| after training: {ddp['drift']:.3g} "
                         "(the backends may sum in different orders)")
        return "\n".join(lines) + "\n"

    def run(self):
        a = self.args
        self.progress(f"{self.world} ranks, backends {a.backends}, sizes {human(a.sizes[0])}.."
                      f"{human(a.sizes[-1])}" if a.sizes else "")
        self.other_cpu = {}
        mark = self.cpu_mark()
        rows = self.bench_collectives() if a.collectives else []
        if rows:
            self.other_cpu["collectives"] = self.cpu_other(mark)
        mark = self.cpu_mark()
        ddp = self.bench_ddp() if a.ddp else None
        if ddp:
            self.other_cpu["DDP"] = self.cpu_other(mark)
        bad = sum(r[k]["wrong"] for r in rows for k in (0, 1))
        if ddp:
            bad += sum(r["replica_diff"] or 0 for r in ddp["results"])
        if self.rank == 0:
            text = self.report(rows, ddp)
            sys.stdout.write(text)
            sys.stdout.flush()
            if a.out:
                with open(a.out, "w") as f:
                    f.write(text)
        self.dist.barrier(group=self.ctrl)
        self.dist.destroy_process_group()
        if bad:
            if self.rank == 0:
                print(f"torch_bench: WRONG RESULTS: {bad} wrong values (see #wrong / replicas)",
                      file=sys.stderr, flush=True)
            return 3
        return 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import_backends(args)
    if args.check_import:
        return 0
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE") if v not in os.environ]
    if missing:
        print(f"torch_bench: {', '.join(missing)} not set: launch with tools/perf/torch_bench.sh "
              "(or torchrun / chorusrun)", file=sys.stderr)
        return 1
    import torch
    torch.set_num_threads(args.threads)
    return Bench(args).run()


if __name__ == "__main__":
    sys.exit(main())
