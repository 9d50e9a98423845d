"""Registration of the "chorus" backend and init_process_group with every
init method torch has: tcp://, file://, env:// and an explicit store=
(TCPStore, FileStore).  Each run checks the default group with a few ops."""

import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_mp  # noqa: E402

torch_mp.require_backend()

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def test_backend_is_registered():
    import torch_chorus  # noqa: F401

    assert "CHORUS" in dist.Backend._plugins
    assert dist.Backend("chorus") == "chorus"
    assert dist.Backend("CHORUS") == "chorus"
    # Importing twice must not register twice (register_backend asserts).
    import importlib

    importlib.reload(torch_chorus)
    assert "CHORUS" in dist.Backend._plugins


def _w_sanity(ctx):
    """A few ops on the default group; returns a list of failure strings."""
    rank, ws = ctx.rank, ctx.world_size
    fails = []

    def check(name, ok, msg=""):
        if not ok:
            fails.append("rank %d %s: %s" % (rank, name, msg))

    check("is_initialized", dist.is_initialized())
    check("get_backend", dist.get_backend() == "chorus", dist.get_backend())
    check("get_rank", dist.get_rank() == rank, dist.get_rank())
    check("get_world_size", dist.get_world_size() == ws, dist.get_world_size())
    t = torch.arange(6, dtype=torch.float32) * (rank + 1)
    dist.all_reduce(t)
    m = torch_mp.compare(t, torch.arange(6, dtype=torch.float32) * (ws * (ws + 1) // 2))
    check("all_reduce", m is None, m)
    b = torch.full((5,), float(rank), dtype=torch.float64)
    dist.broadcast(b, ws - 1)
    m = torch_mp.compare(b, torch.full((5,), float(ws - 1), dtype=torch.float64))
    check("broadcast", m is None, m)
    outs = [torch.zeros(2, dtype=torch.int64) for _ in range(ws)]
    dist.all_gather(outs, torch.tensor([rank, 10 * rank]))
    m = torch_mp.compare_lists(outs, [torch.tensor([r, 10 * r]) for r in range(ws)])
    check("all_gather", m is None, m)
    dist.barrier()
    if ws > 1:
        x = torch.full((3,), float(rank))
        if rank == 0:
            dist.send(x, 1)
        elif rank == 1:
            src = dist.recv(x, 0)
            check("recv returns the source", src == 0, src)
            check("recv", bool((x == 0).all()), x)
    dist.barrier()
    return fails


# (init method, world size): every method on 2 ranks, tcp and env on more.
CASES = [("tcp", 1), ("tcp", 3), ("file", 2), ("env", 3), ("store_tcp", 2),
         ("store_file", 2), ("file", 4)]


@pytest.mark.parametrize("method,ws", CASES, ids=["%s-ws%d" % c for c in CASES])
def test_init_method(method, ws):
    values = torch_mp.run_ok(_w_sanity, ws, init=method, pg_timeout=60, deadline=120)
    fails = [f for v in values for f in v]
    assert not fails, "\n".join(fails)


def _w_reinit(ctx):
    """destroy_process_group, then init again (another port's worth of
    store: the file method, as the first used tcp)."""
    fails = _w_sanity(ctx)
    dist.destroy_process_group()
    torch_mp.init_process_group(ctx, method="file")
    return fails + _w_sanity(ctx)


def test_destroy_and_init_again():
    values = torch_mp.run_ok(_w_reinit, 2, init="tcp", pg_timeout=60, deadline=120)
    fails = [f for v in values for f in v]
    assert not fails, "\n".join(fails)


def _w_late_rank(ctx):
    """Rank ``ctx.args[0]`` joins 1.5 s after the others, whose set-up waits on torch's
    store run past several polls of the abort key (a timed-out wait must not
    leave torch's TCPStore client out of step)."""
    import time

    store = dist.TCPStore("127.0.0.1", ctx.port, ctx.world_size, ctx.rank == 0,
                          timeout=datetime.timedelta(seconds=60))
    if ctx.rank == ctx.args[0]:
        time.sleep(1.5)
    dist.init_process_group("chorus", store=store, rank=ctx.rank,
                            world_size=ctx.world_size,
                            timeout=datetime.timedelta(seconds=60))
    return _w_sanity(ctx)


@pytest.mark.parametrize("late", [0, 2])
def test_a_late_rank_is_waited_for(late):
    values = torch_mp.run_ok(_w_late_rank, 3, init=None, args=(late,), deadline=120)
    fails = [f for v in values for f in v]
    assert not fails, "\n".join(fails)
