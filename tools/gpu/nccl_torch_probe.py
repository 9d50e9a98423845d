#!/usr/bin/env python3
"""Does NCCL itself run two ranks on this one GPU, with an NCCL_HOSTID per rank?

PyTorch's own NCCL path and no chorus code, so that a fault of NCCL on this machine
is told apart from one in chorus_perf's use of it. Each rank all_reduces 64 KiB to
256 MiB of float32 (the inputs 1 and 2, every element checked to be 3), timing
`iters` back-to-back calls between two stream waits, as nccl-tests and chorus_perf do.
Prints one line per rank and, from rank 0, the rows "size time_us busbw #wrong".
Exit 0 when both ranks ran every size correctly.

usage: nccl_torch_probe.py [--timeout SECONDS] [--iters N]
"""
import argparse
import os
import queue
import socket
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, port, iters, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      NCCL_HOSTID="chorus_torch_probe_%d" % rank)
    rows = []
    try:
        import datetime
        import torch
        import torch.distributed as dist
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=30))
        for size in (1 << 16, 1 << 20, 1 << 24, 1 << 26, 1 << 28):
            x = torch.full((size // 4,), float(rank + 1), device="cuda")
            dist.all_reduce(x)  # warm-up, and the checked call
            torch.cuda.synchronize()
            wrong = int((x != 3).sum())
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            us = (time.perf_counter() - t0) / iters * 1e6
            rows.append("%12d %10.1f %8.2f %7d" % (size, us, size / us / 1e3, wrong))  # busbw = S/t for 2 ranks
        dist.destroy_process_group()
        out.put((rank, "ok (NCCL %s, torch %s)" % (".".join(map(str, torch.cuda.nccl.version())), torch.__version__),
                 rows))
    except BaseException as e:  # noqa: BLE001 -- every failure is the answer
        out.put((rank, "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""), rows))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, port, args.iters, out)) for r in range(2)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + args.timeout
    got = {}
    while len(got) < 2 and time.monotonic() < deadline:
        try:
            rank, verdict, rows = out.get(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            got[rank] = (verdict, rows)
        except queue.Empty:
            if all(not p.is_alive() for p in procs) and out.empty():
                break
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()) + 1)
        if p.is_alive():
            p.kill()
    ok = True
    for r in range(2):
        verdict, rows = got.get(r, ("no answer within %.0f s (exit code %s)" % (args.timeout, procs[r].exitcode), []))
        print("torch NCCL rank %d: %s" % (r, verdict))
        ok = ok and verdict.startswith("ok") and all(int(row.split()[-1]) == 0 for row in rows)
    if 0 in got and got[0][1]:
        print("# %10s %10s %8s %7s" % ("size", "time_us", "busbw", "#wrong"))
        print("\n".join(got[0][1]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
