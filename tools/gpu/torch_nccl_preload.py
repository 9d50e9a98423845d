#!/usr/bin/env python3
"""PyTorch's own NCCL backend, run twice: over the real NCCL and over chorus's libnccl.so.2.

gpu_check.sh step 1c (tools/gpu/torch_nccl_preload.sh) runs this once plainly and once
under LD_PRELOAD=chorus's libnccl.so.2, then compares the two runs' digests with
--compare. Two ranks on GPU 0 (an NCCL_HOSTID per rank: what step 0 found lets NCCL
run two ranks on one GPU; chorus ignores it), backend "nccl", env:// on loopback.

Each rank runs all_reduce (SUM/MAX/MIN, AVG for floats; float32/float16/bfloat16/int32),
reduce, broadcast (root 1), all_gather_into_tensor, reduce_scatter_tensor,
all_to_all_single (even and uneven splits), send/recv, barrier, then 5 DDP steps of a
small MLP (each rank seeded differently, so DDP's initial broadcast matters), and checks
each result against the value computed on the CPU from the known inputs (the MLP against
full-batch SGD on the CPU). Rank r writes DIR/rankR.json: per entry its own verdict,
exact values (ints) or sums, leading values and a hash (floats); the NCCL version torch
reports; every libnccl mapped into the process (/proc/self/maps) and whether chorus's is.

--compare CHORUS.json NCCL.json (no torch needed): one line per entry. An entry fails
when the chorus run got it wrong against the CPU, raised, or differs from the NCCL run:
ints exactly; floats (sum relative to the sum of magnitudes, and the leading values)
within rtol float32 1e-5, float16 1e-3, bfloat16 1e-2; DDP losses and parameters within
1e-4. The run fails as a whole when chorus's library was not mapped (the run used NCCL),
or when destroy_process_group did not return. A missing or failed NCCL run leaves the
CPU check alone ("no NCCL reference"). Exit 0 when nothing failed.

--cpu-dry-run: Gloo on CPU tensors, to try the ops, the DDP steps and the digest where
there is no GPU (ops Gloo lacks are recorded as errors).

usage: torch_nccl_preload.py --out DIR [--timeout S] [--chorus-lib PATH] [--cpu-dry-run]
       torch_nccl_preload.py --compare CHORUS.json NCCL.json [--quiet] [--label TEXT]
"""
import argparse
import hashlib
import json
import os
import queue
import socket
import sys
import time

WORLD = 2
RTOL = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2}
DDP_RTOL = 1e-4
ATOL = 1e-6  # float16 subnormals round on an absolute grid
N = 1031  # odd, so no size is a multiple of a chunk or a vector width


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mapped_nccl_libs():
    """The files named like libnccl mapped into this process (real paths)."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and "libnccl" in os.path.basename(parts[5].strip()):
                libs.add(os.path.realpath(parts[5].strip()))
    return sorted(libs)


# ---------------------------------------------------------------- the ranks


class Rank:
    def __init__(self, torch, dist, rank, device, cuda):
        self.torch, self.dist, self.rank, self.device, self.cuda = torch, dist, rank, device, cuda
        self.entries = {}
        self.gloo = not cuda  # the dry run: Gloo lacks some ops, made of others below
        self.save = lambda running: None

    def inputs(self, tag, rank, n, dtype):
        """Rank `rank`'s input for entry `tag`: every rank can make every rank's."""
        torch = self.torch
        g = torch.Generator().manual_seed(int(hashlib.sha256(("%s/%d" % (tag, rank)).encode()).hexdigest()[:8], 16))
        if dtype == torch.int32:
            return torch.randint(-1000, 1000, (n,), generator=g, dtype=torch.int32)
        return torch.randn(n, generator=g).to(dtype)

    def record(self, name, got, want):
        """Digest of `got` (the collective's output) checked against `want` (CPU)."""
        torch = self.torch
        c = got.detach().cpu().contiguous().flatten()
        e = {"dtype": str(c.dtype).replace("torch.", ""), "numel": c.numel(),
             "sha": hashlib.sha256(c.view(torch.uint8).numpy().tobytes()).hexdigest()[:16]}
        want = want.flatten()
        if c.dtype.is_floating_point:
            d, w = c.double(), want.double()
            e["sum"], e["abs_sum"] = d.sum().item(), d.abs().sum().item()
            e["head"] = d[:8].tolist()
            err = (d - w).abs()
            e["max_err"] = err.max().item() if c.numel() else 0.0
            e["ok"] = bool((err <= ATOL + RTOL[e["dtype"]] * w.abs()).all())
        else:
            v = c.long()
            e["sum"] = int(v.sum())
            e["values"] = v.tolist() if v.numel() <= 64 else v[:16].tolist()
            e["ok"] = bool(torch.equal(v, want.long()))
        self.entries[name] = e

    def attempt(self, name, fn):
        self.save(name)  # written before each op: a crash in one still leaves the others, and its name
        try:
            fn()
        except Exception as ex:  # noqa: BLE001 -- recorded, the next op still runs
            self.entries[name] = {"ok": False, "error": "%s: %s" % (type(ex).__name__, str(ex).splitlines()[0][:300]
                                                                   if str(ex) else "")}

    def dev(self, t):
        return t.to(self.device)

    # The calls under test; under Gloo (the dry run) built of what it has, so that the
    # inputs, expected values and digests are tried too.
    def _all_reduce(self, x, op):
        dist = self.dist
        if not self.gloo or (op != "avg" and x.dtype != self.torch.bfloat16):
            return dist.all_reduce(x, op=getattr(dist.ReduceOp, op.upper()))
        y = x.float()
        dist.all_reduce(y, op=dist.ReduceOp.SUM if op == "avg" else getattr(dist.ReduceOp, op.upper()))
        x.copy_(y / WORLD if op == "avg" else y)

    def _all_gather(self, out, x):
        if not self.gloo:
            fn = getattr(self.dist, "all_gather_into_tensor", None) or self.dist._all_gather_base
            return fn(out, x)
        self.dist.all_gather(list(out.chunk(WORLD)), x)

    def _reduce_scatter(self, out, x, op):
        dist = self.dist
        if not self.gloo:
            fn = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
            return fn(out, x, op=getattr(dist.ReduceOp, op.upper()))
        y = x.clone()
        self._all_reduce(y, op)
        out.copy_(y.chunk(WORLD)[self.rank])

    # Each op: the inputs of both ranks on the CPU, the call on the device, the check.
    def all_reduce(self, op, dtype, n):
        torch, dist = self.torch, self.dist
        name = "all_reduce.%s.%s.n%d" % (op, str(dtype)[6:], n)
        ins = [self.inputs(name, r, n, dtype) for r in range(WORLD)]
        a, b = ins[0].double(), ins[1].double()
        want = {"sum": a + b, "max": torch.maximum(a, b), "min": torch.minimum(a, b), "avg": (a + b) / 2}[op]
        x = self.dev(ins[self.rank].clone())
        self._all_reduce(x, op)
        self.record(name, x, want)

    def reduce(self, dtype):
        dist = self.dist
        name = "reduce.sum.root0.%s" % str(dtype)[6:]
        ins = [self.inputs(name, r, N, dtype) for r in range(WORLD)]
        x = self.dev(ins[self.rank].clone())
        dist.reduce(x, dst=0)
        if self.rank == 0:  # a non-root's buffer is unspecified after the call
            self.record(name, x, ins[0].double() + ins[1].double())
        else:
            self.entries[name] = {"ok": True, "note": "non-root"}

    def broadcast(self, dtype):
        name = "broadcast.root1.%s" % str(dtype)[6:]
        ins = [self.inputs(name, r, N, dtype) for r in range(WORLD)]
        x = self.dev(ins[self.rank].clone())
        self.dist.broadcast(x, src=1)
        self.record(name, x, ins[1])

    def all_gather(self, dtype):
        torch, dist = self.torch, self.dist
        name = "all_gather_into_tensor.%s" % str(dtype)[6:]
        ins = [self.inputs(name, r, N, dtype) for r in range(WORLD)]
        out = self.dev(torch.zeros(WORLD * N, dtype=dtype))
        self._all_gather(out, self.dev(ins[self.rank]))
        self.record(name, out, torch.cat(ins))

    def reduce_scatter(self, op, dtype):
        torch, dist = self.torch, self.dist
        name = "reduce_scatter_tensor.%s.%s" % (op, str(dtype)[6:])
        ins = [self.inputs(name, r, WORLD * N, dtype) for r in range(WORLD)]
        out = self.dev(torch.zeros(N, dtype=dtype))
        self._reduce_scatter(out, self.dev(ins[self.rank]), op)
        total = ins[0].double() + ins[1].double()
        if op == "avg":
            total = total / WORLD
        self.record(name, out, total[self.rank * N:(self.rank + 1) * N])

    def all_to_all(self, dtype, splits):
        """splits[r][j]: what rank r sends rank j (None: equal, N each)."""
        torch, dist = self.torch, self.dist
        name = "all_to_all_single.%s.%s" % ("even" if splits is None else "uneven", str(dtype)[6:])
        sp = splits or [[N] * WORLD for _ in range(WORLD)]
        ins = [self.inputs(name, r, sum(sp[r]), dtype) for r in range(WORLD)]
        want = []
        for j in range(WORLD):  # from rank j, the part j sends to this rank
            off = sum(sp[j][:self.rank])
            want.append(ins[j][off:off + sp[j][self.rank]])
        want = torch.cat(want)
        out = self.dev(torch.zeros(want.numel(), dtype=dtype))
        kw = {}
        if splits is not None:
            kw = {"output_split_sizes": [sp[j][self.rank] for j in range(WORLD)], "input_split_sizes": sp[self.rank]}
        dist.all_to_all_single(out, self.dev(ins[self.rank]), **kw)
        self.record(name, out, want)

    def send_recv(self, dtype, src):
        """Rank src sends to the other, which checks."""
        name = "send_recv.%d_to_%d.%s" % (src, 1 - src, str(dtype)[6:])
        data = self.inputs(name, src, N, dtype)
        if self.rank == src:
            self.dist.send(self.dev(data), dst=1 - src)
            self.entries[name] = {"ok": True, "note": "sender"}
        else:
            x = self.dev(self.torch.zeros(N, dtype=dtype))
            self.dist.recv(x, src=src)
            self.record(name, x, data)

    def barrier(self):
        kw = {"device_ids": [0]} if self.cuda else {}
        self.dist.barrier(**kw)
        self.entries["barrier"] = {"ok": True}

    def ddp(self, steps=5):
        """DDP of a small MLP against full-batch SGD on the CPU from rank 0's weights."""
        torch, dist = self.torch, self.dist
        nn = torch.nn
        from torch.nn.parallel import DistributedDataParallel as DDP

        def mlp(seed):
            torch.manual_seed(seed)
            return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))

        local = 8
        g = torch.Generator().manual_seed(1234)
        xs = torch.randn(steps, WORLD * local, 16, generator=g)
        ys = torch.randn(steps, WORLD * local, 4, generator=g)
        model = DDP(mlp(self.rank).to(self.device), device_ids=[0] if self.cuda else None)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ref = mlp(0)  # rank 0's weights: what DDP broadcasts at construction
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        losses = []
        for s in range(steps):
            sl = slice(self.rank * local, (self.rank + 1) * local)
            loss = nn.functional.mse_loss(model(self.dev(xs[s, sl])), self.dev(ys[s, sl]))
            opt.zero_grad()
            loss.backward()  # DDP averages the gradients: the full batch's mean loss
            opt.step()
            losses.append(loss.item())
            ref_loss = nn.functional.mse_loss(ref(xs[s]), ys[s])
            ref_opt.zero_grad()
            ref_loss.backward()
            ref_opt.step()
        params = [p.detach().cpu().double() for p in model.module.parameters()]
        ref_params = [p.detach().double() for p in ref.parameters()]
        err = max((p - q).abs().max().item() for p, q in zip(params, ref_params))
        flat = torch.cat([p.flatten() for p in params])
        # Both ranks must hold the same weights: rank 0's, broadcast, against our own.
        theirs = self.dev(flat.float().clone())
        dist.broadcast(theirs, src=0)
        in_sync = bool(torch.equal(theirs.cpu().double(), flat.float().double()))
        self.entries["ddp.mlp.%d_steps" % steps] = {
            "ok": err <= 1e-4 and in_sync, "losses": losses, "param_sums": [p.sum().item() for p in params],
            "param_abs_sums": [p.abs().sum().item() for p in params], "max_err_vs_cpu": err,
            "in_sync_with_rank0": in_sync,
            "sha": hashlib.sha256(flat.float().numpy().tobytes()).hexdigest()[:16]}

    def run_all(self):
        torch = self.torch
        floats = [torch.float32, torch.float16, torch.bfloat16]
        for dtype in floats + [torch.int32]:
            for op in ("sum", "max", "min", "avg"):
                if op == "avg" and dtype == torch.int32:
                    continue  # ncclAvg is for floating types
                self.attempt("all_reduce.%s.%s.n%d" % (op, str(dtype)[6:], N), lambda: self.all_reduce(op, dtype, N))
        for dtype in (torch.float32, torch.bfloat16):  # beyond one chunk of chorus and NCCL
            n = (1 << 22) + 5
            self.attempt("all_reduce.sum.%s.n%d" % (str(dtype)[6:], n), lambda: self.all_reduce("sum", dtype, n))
        for dtype in (torch.float32, torch.int32):
            self.attempt("reduce.sum.root0.%s" % str(dtype)[6:], lambda: self.reduce(dtype))
            self.attempt("broadcast.root1.%s" % str(dtype)[6:], lambda: self.broadcast(dtype))
            self.attempt("all_gather_into_tensor.%s" % str(dtype)[6:], lambda: self.all_gather(dtype))
            self.attempt("reduce_scatter_tensor.sum.%s" % str(dtype)[6:], lambda: self.reduce_scatter("sum", dtype))
            self.attempt("all_to_all_single.even.%s" % str(dtype)[6:], lambda: self.all_to_all(dtype, None))
        self.attempt("reduce_scatter_tensor.avg.float32", lambda: self.reduce_scatter("avg", torch.float32))
        self.attempt("all_to_all_single.uneven.int32", lambda: self.all_to_all(torch.int32, [[3, 517], [700, 2]]))
        self.attempt("send_recv.0_to_1.float32", lambda: self.send_recv(torch.float32, 0))
        self.attempt("send_recv.1_to_0.int32", lambda: self.send_recv(torch.int32, 1))
        self.attempt("barrier", self.barrier)
        self.attempt("ddp.mlp.5_steps", self.ddp)
        if self.cuda:
            torch.cuda.synchronize()


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def note_libs(digest, chorus):
    libs = mapped_nccl_libs()
    digest["nccl_libs_mapped"] = libs
    digest["chorus_lib"] = chorus
    digest["chorus_mapped"] = chorus in libs if chorus else None
    return libs


def rank_main(rank, port, args, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD),
                      NCCL_HOSTID="chorus_torch_preload_%d" % rank)
    path = os.path.join(args.out, "rank%d.json" % rank)
    with open(os.path.join(args.out, "rank%d.pid" % rank), "w") as f:
        f.write("%d\n" % os.getpid())
    digest = {"rank": rank, "world": WORLD, "dry_run": args.cpu_dry_run, "entries": {}, "destroy": None}
    chorus = os.path.realpath(args.chorus_lib) if args.chorus_lib else None
    stage = "import torch"
    try:
        import datetime
        import torch
        import torch.distributed as dist
        digest["torch"] = torch.__version__
        cuda = not args.cpu_dry_run
        if cuda:
            torch.cuda.set_device(0)
            # The DDP check compares against the CPU: no TF32 in the GPU's matmuls.
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            v = torch.cuda.nccl.version()  # a tuple, an int in older torch
            digest["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        stage = "init_process_group"
        dist.init_process_group("gloo" if args.cpu_dry_run else "nccl", rank=rank, world_size=WORLD,
                                timeout=datetime.timedelta(seconds=args.op_timeout))
        r = Rank(torch, dist, rank, torch.device("cuda", 0) if cuda else torch.device("cpu"), cuda)
        digest["entries"] = r.entries

        note_libs(digest, chorus)  # torch's import has loaded libnccl: known if a rank dies in an op

        def save(running):
            digest["running"] = running
            write_json(path, digest)
        r.save = save
        stage = "the ops"
        r.run_all()
        digest.pop("running", None)
        stage = "destroy_process_group"
    except BaseException as e:  # noqa: BLE001 -- every failure is the answer
        digest["error"] = "%s: %s: %s" % (stage, type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
    libs = note_libs(digest, chorus)
    write_json(path, digest)  # before destroy: a hang there still leaves the results
    if "error" not in digest:
        try:
            dist.destroy_process_group()
            digest["destroy"] = "ok"
        except BaseException as e:  # noqa: BLE001
            digest["destroy"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
        write_json(path, digest)
    bad = [k for k, v in digest["entries"].items() if not v.get("ok")]
    ok = "error" not in digest and not bad and digest["destroy"] == "ok"
    out.put((rank, ok, "%s; %d entries, %d wrong or failed%s; NCCL %s; libnccl mapped: %s" % (
        digest.get("error", "ran"), len(digest["entries"]), len(bad), (" (" + ", ".join(bad[:6]) + ")") if bad else "",
        digest.get("nccl_version", "-"), " ".join(libs) or "none")))


def run(args):
    import multiprocessing as mp
    os.makedirs(args.out, exist_ok=True)
    for r in range(WORLD):
        for ext in ("json", "pid"):
            try:
                os.remove(os.path.join(args.out, "rank%d.%s" % (r, ext)))
            except FileNotFoundError:
                pass
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, port, args, out)) for r in range(WORLD)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + args.timeout
    got = {}
    while len(got) < WORLD and time.monotonic() < deadline:
        try:
            rank, rank_ok, line = out.get(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            got[rank] = (rank_ok, line)
        except queue.Empty:
            if all(not p.is_alive() for p in procs) and out.empty():
                break
    ok = True
    for r, p in enumerate(procs):
        p.join(timeout=max(0.0, deadline - time.monotonic()) + 1)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
            ok = False
        rank_ok, line = got.get(r, (False, "no answer within %.0f s" % args.timeout))
        print("rank %d: %s (exit code %s)" % (r, line, p.exitcode))
        ok = ok and rank_ok and p.exitcode == 0
    return 0 if ok else 1


# ---------------------------------------------------------------- --compare


def load(path):
    try:
        with open(path) as f:
            return json.load(f), None
    except (OSError, ValueError) as e:
        return None, "%s: %s" % (type(e).__name__, e)


def close(a, b, rtol, scale):
    return abs(a - b) <= ATOL + rtol * scale


def same_as_reference(a, b):
    """'' when entry a (chorus) matches entry b (NCCL), else why not."""
    if "values" in a:
        return "" if (a["values"], a["sum"], a.get("sha")) == (b.get("values"), b.get("sum"), b.get("sha")) else \
            "ints differ from NCCL's (sum %s vs %s)" % (a["sum"], b.get("sum"))
    if "losses" in a:
        if len(a["losses"]) != len(b.get("losses", [])) or len(a["param_sums"]) != len(b.get("param_sums", [])):
            return "DDP ran %d steps over %d tensors, NCCL's %d over %d" % (
                len(a["losses"]), len(a["param_sums"]), len(b.get("losses", [])), len(b.get("param_sums", [])))
        bad = [("loss", x, y) for x, y in zip(a["losses"], b["losses"]) if not close(x, y, DDP_RTOL, abs(y))]
        bad += [("param sum", x, y) for x, y, m in zip(a["param_sums"], b["param_sums"], a["param_abs_sums"])
                if not close(x, y, DDP_RTOL, m)]
        return "DDP differs from NCCL's beyond rtol %g: %s" % (DDP_RTOL, bad[:2]) if bad else ""
    if "sum" in a:
        rtol = RTOL.get(a.get("dtype"), 1e-5)
        if not close(a["sum"], b.get("sum", float("nan")), rtol, a.get("abs_sum", 1.0)):
            return "sum %.9g vs NCCL's %.9g (rtol %g of %.4g)" % (a["sum"], b.get("sum"), rtol, a.get("abs_sum"))
        for x, y in zip(a.get("head", []), b.get("head", [])):
            if not close(x, y, rtol, abs(y)):
                return "leading values differ from NCCL's: %s vs %s" % (a["head"][:3], b["head"][:3])
    return ""


def compare(a_path, b_path, quiet=False, label="1c"):
    """Prints the verdicts of the chorus run (a) against the CPU and the NCCL run (b)."""
    fails = 0

    def line(name, verdict, detail):
        nonlocal fails
        fails += verdict == "FAIL"
        if not quiet or verdict in ("FAIL", "WARN"):
            print("%s %-40s %-4s %s" % (label, name, verdict, detail))

    a, why = load(a_path)
    if a is None:
        line("chorus run", "FAIL", "no digest %s (%s): the run stopped before writing it, see its log" % (a_path, why))
        print("%s %-40s FAIL" % (label, "rank ?"))
        return 1
    b, why_b = load(b_path)
    ref = ""
    if b is None:
        ref = "no NCCL run digest (%s)" % why_b
    elif b.get("error"):
        ref = "the NCCL run failed (%s)" % b["error"]
    elif b.get("chorus_mapped"):
        ref = "the NCCL run had chorus's library mapped"
    if ref:
        b = None
        line("reference", "WARN", ref + ": chorus checked against the CPU only")
    dry = " (CPU dry run: Gloo, no NCCL library involved)" if a.get("dry_run") else ""
    libs = a.get("nccl_libs_mapped", [])
    if a.get("chorus_mapped"):
        line("library", "PASS", "chorus's %s mapped, NCCL version %s%s" % (a.get("chorus_lib"),
                                                                        a.get("nccl_version", "-"), dry))
    elif not a.get("dry_run"):
        line("library", "FAIL", "chorus's %s not mapped (mapped: %s): torch ran its own NCCL" % (
            a.get("chorus_lib"), " ".join(libs) or "no libnccl"))
    others = [p for p in libs if p != a.get("chorus_lib")]
    if a.get("chorus_mapped") and others:
        line("library", "WARN", "another libnccl is mapped too (%s): any ncclX chorus lacks binds to it "
             "(mixed binding: a crash risk)" % " ".join(others))
    if b is not None:
        line("reference", "INFO", "NCCL run: NCCL %s, libnccl %s" % (b.get("nccl_version", "-"),
                                                                    " ".join(b.get("nccl_libs_mapped", [])) or "-"))
    if a.get("error"):
        line("chorus run", "FAIL", a["error"])
    for name, e in sorted(a.get("entries", {}).items()):
        if e.get("error"):
            line(name, "FAIL", "raised " + e["error"])
            continue
        if not e.get("ok"):
            line(name, "FAIL", "wrong against the CPU (%s)" % (
                "max err %.3g" % e["max_err"] if "max_err" in e else "max err vs CPU %s, in sync %s" % (
                    e.get("max_err_vs_cpu"), e.get("in_sync_with_rank0")) if "losses" in e else "ints differ"))
            continue
        if "note" in e or name == "barrier":
            line(name, "PASS", e.get("note", "returned"))
            continue
        r = b["entries"].get(name) if b is not None else None
        if b is None:
            line(name, "PASS", "= CPU (no NCCL reference)")
        elif r is None or r.get("error") or not r.get("ok"):
            line(name, "PASS", "= CPU; NCCL's run: %s" % ("no entry" if r is None else r.get("error") or "wrong"))
        else:
            diff = same_as_reference(e, r)
            if diff:
                line(name, "FAIL", diff)
            else:
                line(name, "PASS", "= CPU, = NCCL%s" % (" (bit-identical)" if e.get("sha") == r.get("sha") else ""))
    missing = sorted(set(b.get("entries", {})) - set(a.get("entries", {}))) if b is not None else []
    if missing:
        line("%d entries" % len(missing), "FAIL", "in the NCCL run, missing from chorus's: %s%s" % (
            ", ".join(missing[:3]), ", ..." if len(missing) > 3 else ""))
    if a.get("destroy") != "ok" and not a.get("error"):
        if a.get("running"):
            line(a["running"], "FAIL", "the rank ended or hung in it (the digest stops there)")
        else:
            line("destroy_process_group", "FAIL", a.get("destroy") or "did not return (or was not reached)")
    print("%s %-40s %-4s %d failed" % (label, "rank %s" % a.get("rank", "?"), "FAIL" if fails else "PASS", fails))
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="folder for rank0.json and rank1.json")
    ap.add_argument("--timeout", type=float, default=60, help="seconds for the whole run")
    ap.add_argument("--op-timeout", type=float, default=30, help="init_process_group's timeout")
    ap.add_argument("--chorus-lib", help="chorus's libnccl.so.2, to tell whether it is mapped")
    ap.add_argument("--cpu-dry-run", action="store_true", help="Gloo on CPU tensors")
    ap.add_argument("--compare", nargs=2, metavar=("CHORUS_JSON", "NCCL_JSON"))
    ap.add_argument("--quiet", action="store_true", help="--compare: only failures and warnings")
    ap.add_argument("--label", default="1c", help="--compare: each line's prefix")
    args = ap.parse_args()
    if args.compare:
        return compare(args.compare[0], args.compare[1], args.quiet, args.label)
    if not args.out:
        ap.error("--out or --compare is required")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
