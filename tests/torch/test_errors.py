"""Errors of the chorus backend: every one a RuntimeError, in bounded time,
never a hang.

* Arguments refused on the calling rank: recv from any source, sparse
  tensors (naming the op and the layout), unsupported dtypes (naming the
  dtype), a root out of range.  The group stays usable after them.
* Collectives that do not match across ranks (count, op, dtype, root,
  reduction): every rank raises within the group's timeout, naming a rank.
* A rank that dies mid-call (os._exit, SIGKILL): the survivors raise within
  their timeout, naming a rank, and still exit cleanly.
* A rank that never comes to init_process_group: the others raise within the
  init timeout.
* Work.wait(timeout) on an op that cannot complete in time returns or
  raises within the timeout.

Timeouts are small (10 s) and every bound asserted is timeout + MARGIN.
"""

import datetime
import os
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_mp  # noqa: E402

torch_mp.require_backend()

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

TIMEOUT = 10  # the process group's timeout in these tests, seconds
MARGIN = 10   # what a bound may exceed it by (process start is not in it)
RANK_RE = re.compile(r"\brank", re.I)


def _outcome(fn, limit):
    """(kind, type name, message, seconds) of fn() run with a hang guard."""
    kind, v, secs = torch_mp.call_with_timeout(fn, limit)
    if kind == "raised":
        return ("raised", type(v).__name__, str(v), secs)
    if kind == "ok":
        return ("ok", None, repr(v)[:200], secs)
    return ("hung", None, None, secs)


def _expect_runtime_error(name, out, pattern=None, bound=None):
    """Failure strings unless out is a RuntimeError (matching pattern) that
    came within bound seconds."""
    kind, tname, msg, secs = out
    if kind != "raised":
        return ["%s: expected RuntimeError, got %s (%s) after %.1fs" % (name, kind, msg,
                                                                        secs)]
    fails = []
    if tname != "RuntimeError":
        fails.append("%s: raised %s, not RuntimeError: %s" % (name, tname, msg))
    if pattern and not re.search(pattern, msg, re.I):
        fails.append("%s: message does not match /%s/: %s" % (name, pattern, msg))
    if bound is not None and secs > bound:
        fails.append("%s: took %.1fs (bound %.1fs)" % (name, secs, bound))
    return fails


# ---------------------------------------------------------------------------
# Arguments refused locally
# ---------------------------------------------------------------------------

def _sparse(n=6):
    i = torch.tensor([[0, 2, 4]])
    return torch.sparse_coo_tensor(i, torch.tensor([1.0, 2.0, 3.0]), (n,))


def _w_local_errors(ctx):
    rank, ws = ctx.rank, ctx.world_size
    fails = []
    limit = 10  # a local refusal should be immediate; 10 s is a hang
    pg = dist.distributed_c10d._get_default_group()

    # Every rank makes every call (so that a backend that communicates before
    # refusing still sees matching calls).
    cases = [
        ("recv from any source", lambda: dist.recv(torch.zeros(4)),
         r"any.?source|src|source"),
        ("irecv from any source", lambda: dist.irecv(torch.zeros(4)).wait(),
         r"any.?source|src|source"),
        ("sparse all_reduce", lambda: dist.all_reduce(_sparse()),
         r"(?=.*all_?reduce)(?=.*sparse)"),
        ("sparse broadcast", lambda: dist.broadcast(_sparse(), 0),
         r"(?=.*broadcast)(?=.*sparse)"),
        ("sparse reduce", lambda: dist.reduce(_sparse(), 0),
         r"(?=.*reduce)(?=.*sparse)"),
        ("sparse all_gather", lambda: dist.all_gather([_sparse() for _ in range(ws)],
                                                      _sparse()),
         r"(?=.*all_?gather)(?=.*sparse)"),
        ("sparse send", lambda: dist.send(_sparse(), (rank + 1) % ws)
         if ws > 1 else dist.broadcast(_sparse(), 0), r"sparse"),
        ("int16 all_reduce", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16)),
         r"int16|short"),
        ("int16 reduce", lambda: dist.reduce(torch.ones(4, dtype=torch.int16), 0),
         r"int16|short"),
        # torch 1.13's dist.all_reduce hands complex tensors to the backend as
        # their real view (torch.view_as_real); the backend itself sees
        # complex64 only when called directly:
        ("complex64 allreduce (ProcessGroup.allreduce)",
         lambda: pg.allreduce([torch.ones(4, dtype=torch.complex64)]).wait(),
         r"complex"),
        ("broadcast root out of range", lambda: dist.broadcast(torch.ones(3), ws + 3),
         r"root|rank|src"),
    ]
    for name, fn, pattern in cases:
        fails += _expect_runtime_error(name, _outcome(fn, limit), pattern, bound=limit)
        if name.startswith("recv") or name.startswith("irecv"):
            continue

    # complex SUM through dist.all_reduce: the sum of the real views.
    c = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64) * (rank + 1)
    out = _outcome(lambda: dist.all_reduce(c), limit)
    if out[0] != "ok":
        fails.append("complex64 dist.all_reduce SUM (as float32 pairs): %s %s" % out[:3:2])
    else:
        exp = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64) * (ws * (ws + 1) / 2)
        if not torch.allclose(c, exp):
            fails.append("complex64 dist.all_reduce SUM: got %s, expected %s" % (c, exp))

    # Still usable after all of that.
    t = torch.full((5,), float(rank + 1))
    out = _outcome(lambda: dist.all_reduce(t), 30)
    if out[0] != "ok":
        fails.append("all_reduce after the refused calls: %s %s %s" % out[:3])
    elif not bool((t == ws * (ws + 1) / 2).all()):
        fails.append("all_reduce after the refused calls: got %s" % t)
    return ["rank %d %s" % (rank, f) for f in fails]


@pytest.mark.parametrize("ws", [1, 2])
def test_refused_arguments(ws):
    values = torch_mp.run_ok(_w_local_errors, ws, pg_timeout=30, deadline=150)
    fails = [f for v in values for f in v]
    assert not fails, "\n".join(fails)


# ---------------------------------------------------------------------------
# Mismatched collectives
# ---------------------------------------------------------------------------

def _mismatch_call(kind, rank):
    """What rank calls in scenario kind (rank 0 and rank 1 differ)."""
    if kind == "count":  # 10 floats against 20
        return lambda: dist.all_reduce(torch.ones(10 if rank == 0 else 20))
    if kind == "op":  # all_reduce against broadcast
        if rank == 0:
            return lambda: dist.all_reduce(torch.ones(10))
        return lambda: dist.broadcast(torch.ones(10), 0)
    if kind == "dtype":  # float32 against int32, same count
        dt = torch.float32 if rank == 0 else torch.int32
        return lambda: dist.all_reduce(torch.ones(10, dtype=dt))
    if kind == "root":  # broadcast from 0 against from 1
        return lambda: dist.broadcast(torch.ones(10), rank)
    if kind == "reduce_op":  # SUM against MAX
        op = dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX
        return lambda: dist.all_reduce(torch.ones(10), op=op)
    if kind == "large_count":  # 1 Mi floats against 1 Mi + 1
        n = (1 << 20) + (0 if rank == 0 else 1)
        return lambda: dist.all_reduce(torch.ones(n))
    raise ValueError(kind)


def _w_mismatch(ctx):
    kind = ctx.kwargs["kind"]
    dist.barrier()  # both ranks connected and in step
    out = _outcome(_mismatch_call(kind, ctx.rank), TIMEOUT + MARGIN + 20)
    if out[0] == "ok" and kind == "root":
        # Both ranks think they are the root: each sends, neither receives, so
        # the call itself may complete; the mismatch must then surface in the
        # next collective (whose peer's message is the stray broadcast), as a
        # RuntimeError rather than wrong data or a hang.
        t = torch.full((10,), float(ctx.rank + 1))
        nxt = _outcome(lambda: dist.all_reduce(t), TIMEOUT + MARGIN + 20)
        if nxt[0] == "ok" and bool((t == 3.0).all()):
            return ("ok", None, "broadcast and the next all_reduce both succeeded "
                    "(the roots' mismatch went unnoticed)", out[3])
        if nxt[0] == "ok":
            return ("ok", None, "the all_reduce after the mismatched broadcast gave "
                    "wrong data: %s" % t.tolist(), out[3])
        return nxt
    return out


# Two ranks that each pass themselves as the root of a small broadcast both only send:
# chorus does not notice yet (issue 25, "every mismatch is an error on every rank").
MISMATCHES = ["count", "op", "dtype",
              pytest.param("root", marks=pytest.mark.xfail(reason="root-only mismatches go unnoticed (issue 25)")),
              "reduce_op", "large_count"]


@pytest.mark.parametrize("kind", MISMATCHES)
def test_mismatched_collective(kind):
    results = torch_mp.launch(_w_mismatch, 2, kwargs={"kind": kind}, pg_timeout=TIMEOUT,
                              deadline=TIMEOUT + MARGIN + 60)
    desc = torch_mp.describe_all(results)
    fails = []
    for r in results:
        if r.status != "ok":
            fails.append("rank %d did not report: %s" % (r.rank, r.describe()))
            continue
        fails += ["rank %d %s" % (r.rank, f) for f in _expect_runtime_error(
            "mismatched %s" % kind, r.value, RANK_RE.pattern, bound=TIMEOUT + MARGIN)]
        if r.hung_at_exit or r.teardown_error:
            fails.append("rank %d did not exit cleanly after the error" % r.rank)
    assert not fails, "\n".join(fails) + "\n\n" + desc


# ---------------------------------------------------------------------------
# A rank dies mid-call
# ---------------------------------------------------------------------------

def _w_die_mid_call(ctx):
    how, what = ctx.kwargs["how"], ctx.kwargs["what"]
    victim = ctx.world_size - 1
    rank = ctx.rank
    dist.barrier()
    if rank == victim:
        def die():
            time.sleep(1.0)
            if how == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=die, daemon=True).start()
    big = torch.ones(1 << 20)  # 4 MiB: every call is in flight a while

    def loop():
        n = 0
        while True:
            if what == "all_reduce":
                dist.all_reduce(big)
            elif what == "broadcast":
                dist.broadcast(big, victim)
            elif what == "recv":
                # The survivors wait for a message the victim never sends.
                if rank == victim:
                    time.sleep(3600)
                dist.recv(big, victim)
            n += 1

    t0 = time.time()
    out = _outcome(loop, TIMEOUT + MARGIN + 20)
    return out + (t0,)


KILLS = [("exit", "all_reduce", 3), ("sigkill", "all_reduce", 3),
         ("sigkill", "broadcast", 2), ("sigkill", "recv", 2)]


@pytest.mark.parametrize("how,what,ws", KILLS, ids=["%s-%s-ws%d" % k for k in KILLS])
def test_rank_dies_mid_call(how, what, ws):
    results = torch_mp.launch(_w_die_mid_call, ws, kwargs={"how": how, "what": what},
                              pg_timeout=TIMEOUT, deadline=TIMEOUT + MARGIN + 60)
    desc = torch_mp.describe_all(results)
    victim = results[-1]
    assert victim.status == "died", "the victim should have died:\n" + desc
    fails = []
    for r in results[:-1]:
        if r.status != "ok":
            fails.append("survivor rank %d did not report: %s" % (r.rank, r.status))
            continue
        # The call raises within the timeout of the moment the victim died
        # (1 s after the loop started).
        fails += ["rank %d %s" % (r.rank, f) for f in _expect_runtime_error(
            "%s while rank %d dies (%s)" % (what, victim.rank, how), r.value[:4],
            RANK_RE.pattern, bound=1.0 + TIMEOUT + MARGIN)]
        if r.hung_at_exit or r.teardown_error:
            fails.append("survivor rank %d did not exit cleanly after the error" % r.rank)
    assert not fails, "\n".join(fails) + "\n\n" + desc


# ---------------------------------------------------------------------------
# A rank never comes
# ---------------------------------------------------------------------------

def _init_with_unwaited_tcpstore(ctx):
    """store= a TCPStore whose master does not wait for its clients: the
    backend's creation is the only thing that waits."""
    td = datetime.timedelta(seconds=TIMEOUT)
    store = dist.TCPStore("127.0.0.1", ctx.port, None, ctx.rank == 0, timeout=td,
                          wait_for_workers=False)
    dist.init_process_group("chorus", store=store, rank=ctx.rank,
                            world_size=ctx.world_size, timeout=td)


def _w_init_missing_rank(ctx):
    method = ctx.kwargs["method"]
    if ctx.rank == ctx.world_size - 1:
        return "absent"  # never calls init_process_group
    if method == "store_tcp_nowait":
        def init():
            _init_with_unwaited_tcpstore(ctx)
    else:
        def init():
            torch_mp.init_process_group(ctx, method=method, timeout=TIMEOUT)
    t0 = time.time()
    out = _outcome(init, 2 * TIMEOUT + MARGIN + 30)
    return out + (time.time() - t0,)


# (method, world size, message pattern, bound in timeouts).  With tcp:// (as
# with store=TCPStore(world_size=n)) torch 1.13's TCPStore master first waits
# up to the timeout for every client and then goes on silently, so the
# backend's creation starts one timeout late: two timeouts in all.  With a store that
# does not wait, the backend's own wait is all there is.
INIT_CASES = [("tcp", 2, RANK_RE.pattern, 2), ("store_tcp_nowait", 2, RANK_RE.pattern, 1),
              ("store_file", 3, RANK_RE.pattern, 1)]


@pytest.mark.parametrize("method,ws,pattern,timeouts", INIT_CASES,
                         ids=["%s-ws%d" % c[:2] for c in INIT_CASES])
def test_init_with_a_missing_rank(method, ws, pattern, timeouts):
    results = torch_mp.launch(_w_init_missing_rank, ws, init=None,
                              kwargs={"method": method}, pg_timeout=TIMEOUT,
                              deadline=2 * TIMEOUT + MARGIN + 60)
    desc = torch_mp.describe_all(results)
    fails = []
    for r in results[:-1]:
        if r.status != "ok":
            fails.append("rank %d did not report: %s" % (r.rank, r.status))
            continue
        fails += ["rank %d %s" % (r.rank, f) for f in _expect_runtime_error(
            "init (%s) with rank %d absent" % (method, ws - 1), r.value[:4], pattern,
            bound=timeouts * TIMEOUT + MARGIN)]
        if r.hung_at_exit:
            fails.append("rank %d did not exit after the failed init" % r.rank)
    assert not fails, "\n".join(fails) + "\n\n" + desc


# ---------------------------------------------------------------------------
# Work.wait(timeout)
# ---------------------------------------------------------------------------

def _w_wait_timeout(ctx):
    """Rank 0 waits 1 s for a receive that rank 1 sends only 4 s later."""
    dist.barrier()
    t = torch.zeros(8)
    if ctx.rank == 0:
        w = dist.irecv(t, 1)
        out = _outcome(lambda: w.wait(datetime.timedelta(seconds=1)), 30)
        late = None
        if out[0] == "ok":  # it said "not yet": the message still arrives
            late = _outcome(lambda: w.wait(), 30)
            late = late + (t.tolist(),)
        return {"first": out, "late": late}
    time.sleep(4)
    out = _outcome(lambda: dist.send(torch.arange(8, dtype=torch.float32), 0), 30)
    return {"send": out}


def test_wait_with_timeout_returns_in_time():
    results = torch_mp.launch(_w_wait_timeout, 2, pg_timeout=60, deadline=90)
    desc = torch_mp.describe_all(results)
    r0 = results[0]
    assert r0.status == "ok", desc
    kind, tname, msg, secs = r0.value["first"]
    assert kind in ("ok", "raised"), "wait(1 s) hung:\n" + desc
    assert secs < 1 + MARGIN, "wait(1 s) took %.1fs" % secs
    if kind == "raised":  # torch's Work.wait(timeout) raises on expiry
        assert tname == "RuntimeError", (tname, msg)
    else:  # or it returned False; then the message still arrives
        assert msg == "False", "wait(1 s) returned %s before the send" % msg
        late = r0.value["late"]
        assert late[0] == "ok", late
        assert late[4] == list(map(float, range(8))), late
