"""torch_chorus on CUDA tensors: two ranks on the one GPU (device 0), every op on
float32/float16/bfloat16/int32, in and out of place, checked against the expected
values and against Gloo on the same inputs copied to the CPU; async ops and stream
order (launched on a side stream, waited, used); a few DDP steps of a small model on
chorus against the same on Gloo (CPU) from one seed. Prints a PASS/FAIL table; exit 1
on any FAIL. Run by tools/gpu/torch_gpu.sh after torch_build.sh.

    PYTHONPATH=DEST python3 tools/gpu/torch_gpu_check.py [--device cpu]

--device cpu runs the same checks on CPU tensors (no stream checks): how the script is
tested where there is no GPU.
"""
import argparse
import os
import socket
import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32]
N = 1000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def data(rank, n, dtype, device, salt=0):
    """Small integers: exact in every dtype and in every sum of two ranks."""
    return ((torch.arange(n) * (salt + 3) + rank * 5 + salt) % 17 + 1).to(dtype).to(device)


class Checks:
    def __init__(self, rank):
        self.rank = rank
        self.rows = []

    def run(self, name, fn):
        try:
            detail = fn()
            self.rows.append((name, "PASS", detail or ""))
        except Exception as e:  # every check reports; none stops the others
            msg = f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
            self.rows.append((name, "FAIL", msg))
            if os.environ.get("TORCH_GPU_CHECK_TRACE"):
                traceback.print_exc()
        # Progress in the log, for a run stopped before the table.
        print(f"rank{self.rank}> {name}: {self.rows[-1][1].lower()} {self.rows[-1][2]}", flush=True)


def same(got, want, what):
    got = got.cpu()
    want = want.cpu().to(got.dtype)
    if got.is_floating_point():
        ok = torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2)
    else:
        ok = torch.equal(got, want)
    if not ok:
        diff = (got.float() - want.float()).abs()
        raise AssertionError(f"{what}: max diff {diff.max().item()} at {int(diff.argmax())}")


def gloo_same(got, fn, gloo, what):
    """Runs fn on Gloo (CPU tensors) and compares; a dtype Gloo lacks is skipped."""
    try:
        want = fn(gloo)
    except RuntimeError as e:
        return f"gloo n/a ({str(e)[:60]})"
    same(got, want, what + " vs gloo")
    return "= gloo"


def collectives(c, dev, dtype, gloo):
    r, n = dist.get_rank(), dist.get_world_size()
    t = str(dtype).replace("torch.", "")

    def ref_sum(salt=0):
        return sum(data(k, N, dtype, "cpu", salt).double() for k in range(n))

    def all_reduce():
        x = data(r, N, dtype, dev)
        dist.all_reduce(x)
        same(x, ref_sum(), "sum")

        def g(pg):
            y = data(r, N, dtype, "cpu")
            dist.all_reduce(y, group=pg)
            return y
        return gloo_same(x, g, gloo, "all_reduce")

    def all_reduce_max_strided():
        base = data(r, 2 * N, dtype, dev).view(N // 10, 20)
        x = base[:, ::2]  # not contiguous: a staging tensor and a copy back
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        want = torch.stack([data(k, 2 * N, dtype, "cpu").view(N // 10, 20)[:, ::2] for k in range(n)]).amax(0)
        same(x, want, "max strided")
        same(base[:, 1::2], data(r, 2 * N, dtype, "cpu").view(N // 10, 20)[:, 1::2], "untouched half")

    def broadcast():
        x = data(r, N, dtype, dev, 1)
        dist.broadcast(x, src=1)
        same(x, data(1, N, dtype, "cpu", 1), "broadcast from 1")

        def g(pg):
            y = data(r, N, dtype, "cpu", 1)
            dist.broadcast(y, src=1, group=pg)
            return y
        return gloo_same(x, g, gloo, "broadcast")

    def reduce():
        x = data(r, N, dtype, dev, 2)
        dist.reduce(x, dst=0)
        if r == 0:
            same(x, ref_sum(2), "reduce to 0")

    def all_gather():
        x = data(r, N, dtype, dev, 3)
        outs = [torch.empty(N, dtype=dtype, device=dev) for _ in range(n)]
        dist.all_gather(outs, x)
        for k in range(n):
            same(outs[k], data(k, N, dtype, "cpu", 3), f"all_gather part {k}")
        flat = torch.empty(n * N, dtype=dtype, device=dev)
        dist.all_gather_into_tensor(flat, x)
        same(flat, torch.cat([data(k, N, dtype, "cpu", 3) for k in range(n)]), "all_gather_into_tensor")

    def reduce_scatter():
        ins = [data(r, N, dtype, dev, 4 + k) for k in range(n)]
        out = torch.empty(N, dtype=dtype, device=dev)
        dist.reduce_scatter(out, ins)
        same(out, sum(data(k, N, dtype, "cpu", 4 + r).double() for k in range(n)), "reduce_scatter")
        flat = torch.cat(ins)
        out2 = torch.empty(N, dtype=dtype, device=dev)
        dist.reduce_scatter_tensor(out2, flat)
        same(out2, out, "reduce_scatter_tensor")

    def all_to_all():
        x = data(r, n * N, dtype, dev, 6)
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x)
        want = torch.cat([data(k, n * N, dtype, "cpu", 6)[r * N:(r + 1) * N] for k in range(n)])
        same(out, want, "all_to_all_single")

        def g(pg):
            y = torch.empty(n * N, dtype=dtype)
            dist.all_to_all_single(y, data(r, n * N, dtype, "cpu", 6), group=pg)
            return y
        vs_gloo = gloo_same(out, g, gloo, "all_to_all_single")
        # split sizes: rank k sends k+1+p rows to p
        send_splits = [r + 1 + p for p in range(n)]
        recv_splits = [k + 1 + r for k in range(n)]
        y = data(r, sum(send_splits), dtype, dev, 7)
        out = torch.empty(sum(recv_splits), dtype=dtype, device=dev)
        dist.all_to_all_single(out, y, recv_splits, send_splits)
        parts = []
        for k in range(n):
            src = data(k, sum(k + 1 + p for p in range(n)), dtype, "cpu", 7)
            off = sum(k + 1 + p for p in range(r))
            parts.append(src[off:off + k + 1 + r])
        same(out, torch.cat(parts), "all_to_all_single with splits")
        return vs_gloo

    def send_recv():
        x = data(r, N, dtype, dev, 8)
        if r == 0:
            dist.send(x, dst=1, tag=3)
            y = torch.empty_like(x)
            dist.recv(y, src=1, tag=4)
            same(y, data(0, N, dtype, "cpu", 8) * 2, "recv from 1 (what it got, doubled)")
        else:
            y = torch.empty_like(x)
            dist.recv(y, src=0, tag=3)
            same(y, data(0, N, dtype, "cpu", 8), "recv from 0")
            dist.send(y * 2, dst=0, tag=4)

    c.run(f"all_reduce sum {t}", all_reduce)
    c.run(f"all_reduce max strided {t}", all_reduce_max_strided)
    c.run(f"broadcast {t}", broadcast)
    c.run(f"reduce {t}", reduce)
    c.run(f"all_gather (+into_tensor) {t}", all_gather)
    c.run(f"reduce_scatter (+tensor) {t}", reduce_scatter)
    c.run(f"all_to_all_single (+splits) {t}", all_to_all)
    c.run(f"send/recv {t}", send_recv)


def other_ops(c, dev, gloo):
    r, n = dist.get_rank(), dist.get_world_size()

    def avg():
        x = data(r, N, torch.float32, dev)
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        same(x, sum(data(k, N, torch.float32, "cpu") for k in range(n)) / n, "avg")

    def band():
        x = data(r, N, torch.int32, dev)
        dist.all_reduce(x, op=dist.ReduceOp.BAND)
        want = data(0, N, torch.int32, "cpu")
        for k in range(1, n):
            want = want & data(k, N, torch.int32, "cpu")
        same(x, want, "band")

    def coalesced():
        xs = [data(r, N, torch.float32, dev, s) for s in range(3)]
        dist.all_reduce_coalesced(xs)
        for s in range(3):
            same(xs[s], sum(data(k, N, torch.float32, "cpu", s) for k in range(n)), f"coalesced {s}")

    def barrier():
        dist.barrier()

    def mixed():
        x = torch.ones(4, device=dev)
        outs = [torch.empty(4, device="cpu"), torch.empty(4, device="cpu")]
        try:
            dist.all_gather(outs, x)
        except RuntimeError as e:
            if "chorus" in str(e) and ("cpu" in str(e) or "CPU" in str(e)):
                return "raised: " + str(e)[:80]
            raise
        raise AssertionError("mixed CPU/CUDA tensors did not raise")

    c.run("all_reduce avg float32", avg)
    c.run("all_reduce band int32", band)
    c.run("all_reduce_coalesced float32", coalesced)
    c.run("barrier", barrier)
    if dev != "cpu":
        c.run("mixed cpu/cuda raises", mixed)


def streams(c, dev):
    r, n = dist.get_rank(), dist.get_world_size()
    big = 1 << 22

    def side_stream():
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            x = torch.full((big,), float(r + 1), device=dev)
            w = dist.all_reduce(x, async_op=True)
        w.wait()  # the current (default) stream waits for the op on s
        y = x * 2  # queued behind it, no host sync in between
        want = 2.0 * sum(k + 1 for k in range(n))
        got = y.sum().item() / big
        if abs(got - want) > 1e-3:
            raise AssertionError(f"after wait(): mean {got}, want {want}")
        torch.cuda.synchronize()
        if not w.is_completed():
            raise AssertionError("is_completed() false after synchronize")

    def chained():
        x = torch.full((big,), float(r), device=dev)
        works = []
        for _ in range(4):
            x.add_(1)
            works.append(dist.all_reduce(x, async_op=True))
        for w in works:
            w.wait()
        # x: ((((r+1)*s + n)*n ... computed on the host
        vals = [float(k) for k in range(n)]
        for _ in range(4):
            vals = [sum(v + 1 for v in vals)] * n
        got = x[::4096].mean().item()
        if abs(got - vals[0]) > 1e-3 * abs(vals[0]):
            raise AssertionError(f"chained: {got}, want {vals[0]}")

    def future():
        x = torch.full((1024,), float(r + 1), device=dev)
        fut = dist.all_reduce(x, async_op=True).get_future()
        doubled = fut.then(lambda f: f.value()[0] * 2).wait()
        same(doubled, torch.full((1024,), 2.0 * sum(k + 1 for k in range(n))), "future.then")

    c.run("async on a side stream, wait(), use", side_stream)
    c.run("four async all_reduce chained on one stream", chained)
    c.run("get_future().then()", future)


def ddp(c, dev, gloo):
    r = dist.get_rank()

    def run():
        def model():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))

        def train(m, pg, device):
            ids = [0] if device != "cpu" else None
            d = torch.nn.parallel.DistributedDataParallel(m.to(device), device_ids=ids, process_group=pg)
            opt = torch.optim.SGD(d.parameters(), lr=0.1)
            g = torch.Generator().manual_seed(100 + r)
            for _ in range(5):
                x = torch.randn(16, 32, generator=g).to(device)
                y = torch.randn(16, 8, generator=g).to(device)
                opt.zero_grad()
                torch.nn.functional.mse_loss(d(x), y).backward()
                opt.step()
            return torch.cat([p.detach().reshape(-1).cpu() for p in d.parameters()])

        mine = train(model(), None, dev)
        ref = train(model(), gloo, "cpu")
        everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(everyone, mine, group=gloo)
        for k, p in enumerate(everyone):
            if not torch.equal(p, mine):
                raise AssertionError(f"rank {k}'s replica differs from rank {r}'s")
        diff = (mine - ref).abs().max().item()
        if diff > 1e-4:
            raise AssertionError(f"chorus vs gloo: parameters differ by {diff}")
        return f"max |chorus - gloo| {diff:.2e}"

    c.run("DDP 5 steps: replicas equal, = gloo", run)


def rank_main(rank, world, port, device, timeout, results):
    import torch_chorus  # noqa: F401  (registers "chorus")
    c = Checks(rank)
    try:
        if device != "cpu":
            torch.cuda.set_device(0)
            dev = "cuda:0"
        else:
            dev = "cpu"
        dist.init_process_group("chorus", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout))
        gloo = dist.new_group(backend="gloo")
        for dtype in DTYPES:
            collectives(c, dev, dtype, gloo)
        other_ops(c, dev, gloo)
        if dev != "cpu":
            streams(c, dev)
        ddp(c, dev, gloo)
        dist.barrier(group=gloo)
        dist.destroy_process_group()
    except Exception as e:
        c.rows.append(("set-up / teardown", "FAIL", f"{type(e).__name__}: {e}"[:300]))
    results.put((rank, c.rows))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--timeout", type=int, default=60, help="seconds: torch's timeout for each group")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("torch_gpu_check: no CUDA device")
        return 2
    import torch_chorus
    print(f"# torch {torch.__version__}, CUDA {torch.version.cuda}, torch_chorus {torch_chorus.__file__}"
          f" (built against {torch_chorus._C.torch_version})")
    world = 2
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, world, port, args.device, args.timeout, results))
             for r in range(world)]
    for p in procs:
        p.start()
    rows = {}
    for _ in range(world):
        try:
            rank, got = results.get(timeout=args.timeout * 4)
            rows[rank] = got
        except Exception:
            break
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    failed = 0
    print(f"{'check':48} {'rank 0':6} {'rank 1':6}  detail")
    names = [n for n, _, _ in rows.get(0, rows.get(1, []))]
    for i, name in enumerate(names):
        verdicts = []
        detail = ""
        for r in range(world):
            got = rows.get(r)
            row = got[i] if got and i < len(got) else (name, "MISSING", "")
            verdicts.append(row[1])
            if row[1] != "PASS" or not detail:
                detail = row[2] if row[2] else detail
        failed += any(v != "PASS" for v in verdicts)
        print(f"{name:48} {verdicts[0]:6} {verdicts[1]:6}  {detail}")
    if len(rows) != world:
        print(f"only ranks {sorted(rows)} reported (exit codes {[p.exitcode for p in procs]})")
        failed += 1
    print(f"== torch_gpu_check: {'PASS' if failed == 0 and names else 'FAIL'} ({len(names)} checks, {failed} failed)")
    return 0 if failed == 0 and names else 1


if __name__ == "__main__":
    sys.exit(main())
