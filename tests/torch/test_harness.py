"""Tests of the multi-process harness itself (torch_mp), on the Gloo backend:
they need torch but not torch_chorus, so that the harness is known to report
results, exceptions, dead ranks and hangs (killing them) before the chorus
tests rely on it."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_mp  # noqa: E402

torch_mp.require_torch()

import pytest  # noqa: E402


def _w_gloo_allreduce(ctx):
    import torch
    import torch.distributed as dist

    t = torch.full((4,), float(ctx.rank + 1))
    dist.all_reduce(t)
    return {"rank": dist.get_rank(), "ws": dist.get_world_size(), "sum": t.tolist(),
            "backend": dist.get_backend()}


def test_values_come_back_from_every_rank():
    values = torch_mp.run_ok(_w_gloo_allreduce, 3, backend="gloo", deadline=60)
    assert [v["rank"] for v in values] == [0, 1, 2]
    for v in values:
        assert v["ws"] == 3
        assert v["backend"] == "gloo"
        assert v["sum"] == [6.0] * 4


def _w_raise_on_rank1(ctx):
    if ctx.rank == 1:
        raise ValueError("boom from rank 1")
    return "fine"


def _w_exit_on_rank1(ctx):
    if ctx.rank == 1:
        os._exit(7)
    return "fine"


def _w_hang_and_block(ctx):
    # Rank 0 returns; rank 1 hangs in Python; rank 2 blocks inside Gloo (C++)
    # in an all_reduce that rank 1 never joins, with a process-group timeout
    # far beyond the harness deadline.
    import torch
    import torch.distributed as dist

    if ctx.rank == 1:
        while True:
            time.sleep(1)
    if ctx.rank == 2:
        dist.all_reduce(torch.ones(3))
    return "fine"


def test_exception_and_dead_rank_are_reported():
    # No torch needed in the children: these only exercise the harness.
    res = torch_mp.launch(_w_raise_on_rank1, 2, init=None, need_torch=False,
                          import_backend=False, deadline=60)
    assert res[0].status == "ok" and res[0].value == "fine"
    assert res[1].status == "error" and res[1].exc_type == "ValueError"
    assert "boom from rank 1" in res[1].exc_msg and "ValueError" in res[1].traceback
    with pytest.raises(torch_mp.HarnessFailure, match="boom from rank 1"):
        torch_mp.run_ok(_w_raise_on_rank1, 2, init=None, need_torch=False,
                        import_backend=False, deadline=60)

    res = torch_mp.launch(_w_exit_on_rank1, 2, init=None, need_torch=False,
                          import_backend=False, deadline=60)
    assert res[0].status == "ok"
    assert res[1].status == "died" and res[1].exitcode == 7


def test_hung_ranks_are_killed_at_the_deadline():
    deadline = 20
    t0 = time.time()
    res = torch_mp.launch(_w_hang_and_block, 3, backend="gloo", pg_timeout=600,
                          deadline=deadline)
    took = time.time() - t0
    desc = torch_mp.describe_all(res)
    # Rank 0 reported, but is never released (rank 1 never reports): killed.
    assert res[0].status == "ok" and res[0].hung_at_exit, desc
    assert res[1].status == "timeout" and res[2].status == "timeout", desc
    assert [r.exitcode for r in res] == [-9, -9, -9], desc
    assert took < torch_mp.scaled(deadline) + 15, took
    with pytest.raises(torch_mp.HarnessFailure, match="did not exit"):
        raise torch_mp.HarnessFailure(desc)
