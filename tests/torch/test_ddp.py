"""DistributedDataParallel over chorus against DDP over Gloo.

In one run per world size, every rank trains the same small model (an MLP
with a BatchNorm, so that buffers are broadcast every step) for a few steps,
once with DDP on the chorus default group and once on a Gloo group, from the
same start (each rank initialises its model from a different seed: DDP must
broadcast rank 0's) and with the same per-rank data, in three
configurations (default buckets; one bucket per parameter with gradients as
bucket views; find_unused_parameters with a head that is used every other
step).  Then:

* the replicas are identical on every rank: exact equality of the flattened
  parameters, gathered over Gloo;
* chorus's parameters and buffers match Gloo's within ATOL on every rank
  (only the order of the gradient sums may differ).
"""

import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_mp  # noqa: E402

torch_mp.require_backend()

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

ATOL = 1e-5
STEPS = 5

CONFIGS = {
    "default": dict(),
    "tiny_buckets": dict(bucket_cap_mb=0.0001, gradient_as_bucket_view=True),
    "find_unused": dict(find_unused_parameters=True),
}


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.bn = torch.nn.BatchNorm1d(32)
        self.fc2 = torch.nn.Linear(32, 4)
        self.extra = torch.nn.Linear(32, 4)  # used on even steps only

    def forward(self, x, use_extra=True):
        h = torch.relu(self.bn(self.fc1(x)))
        out = self.fc2(h)
        if use_extra:
            out = out + self.extra(h)
        return out


def _flat(model):
    """(parameters, buffers), each flattened to one float64 tensor."""
    return (torch.cat([p.detach().reshape(-1).double() for p in model.parameters()]),
            torch.cat([b.detach().reshape(-1).double() for b in model.buffers()]))


def _train(rank, pg, config):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(1000 + rank)  # different start per rank: DDP syncs rank 0's
    model = Net()
    ddp = DDP(model, process_group=pg, **CONFIGS[config])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(77 + rank)  # per-rank data
    for step in range(STEPS):
        x = torch.randn(8, 16, generator=g)
        y = torch.randn(8, 4, generator=g)
        use_extra = config != "find_unused" or step % 2 == 0
        loss = torch.nn.functional.mse_loss(ddp(x, use_extra=use_extra), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return _flat(model)


def _w_ddp(ctx):
    rank, ws = ctx.rank, ctx.world_size
    gloo = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=60))
    out = {}
    for config in CONFIGS:
        ch = _train(rank, None, config)  # the default group: chorus
        gl = _train(rank, gloo, config)
        fails = []
        # Parameters are the same on every rank.  (Buffers are not: DDP
        # broadcasts rank 0's at the start of each forward, which then updates
        # the BatchNorm statistics from the rank's own batch.)
        for name, flat in (("chorus", ch[0]), ("gloo", gl[0])):
            gathered = [torch.empty_like(flat) for _ in range(ws)]
            dist.all_gather(gathered, flat, group=gloo)
            for r in range(ws):
                if not torch.equal(gathered[r], gathered[0]):
                    d = (gathered[r] - gathered[0]).abs().max().item()
                    fails.append("%s: rank %d's replica differs from rank 0's (max abs "
                                 "diff %g)" % (name, r, d))
        diff = (ch[0] - gl[0]).abs().max().item()
        if not diff <= ATOL:
            fails.append("rank %d: chorus and gloo parameters differ by %g (atol %g)"
                         % (rank, diff, ATOL))
        bdiff = (ch[1] - gl[1]).abs().max().item()
        if not bdiff <= ATOL:
            fails.append("rank %d: chorus and gloo buffers differ by %g (atol %g)"
                         % (rank, bdiff, ATOL))
        out[config] = {"fails": fails, "diff": diff}
    return out


@pytest.mark.parametrize("ws", [2, 3])
def test_ddp_matches_gloo(ws):
    values = torch_mp.run_ok(_w_ddp, ws, pg_timeout=60, deadline=240)
    fails = ["%s: %s" % (config, f) for v in values for config, o in v.items()
             for f in o["fails"]]
    assert not fails, "\n".join(sorted(set(fails)))
