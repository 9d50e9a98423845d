"""Small DistributedDataParallel training loop on CPU, backend chorus (default) or any other.

    PYTHONPATH=/dir/with/torch_chorus torchrun --nproc_per_node 2 --redirects 2 --tee 2 examples/torch/ddp.py [chorus|gloo]

(see README.md here for the command that works with this machine's PyTorch.)
Each rank trains on its own synthetic batch; DDP averages the gradients over the ranks,
so after every step all replicas hold the same parameters, which the end checks.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    backend = sys.argv[1] if len(sys.argv) > 1 else "chorus"
    if backend == "chorus":
        try:
            import torch_chorus  # noqa: F401  registers the backend "chorus"
        except ImportError as e:
            raise SystemExit(f"cannot import torch_chorus ({e}): put the directory holding the "
                             "torch_chorus package on PYTHONPATH (build it: tools/torch/install.sh)")
    dist.init_process_group(backend)  # env://, from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts rank 0's)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    # Synthetic regression task y = x . w_true, a different slice of data on each rank.
    g = torch.Generator().manual_seed(100 + rank)
    w_true = torch.linspace(-1, 1, 32)
    for step in range(20):
        x = torch.randn(64, 32, generator=g)
        y = (x @ w_true).unsqueeze(1)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # DDP all-reduces (averages) the gradients here
        opt.step()
        if rank == 0 and (step % 5 == 0 or step == 19):
            print(f"[{backend}] step {step:2d}  loss {loss.item():.4f}", flush=True)

    # Every replica must equal rank 0's, bit for bit.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    differ = torch.tensor([int(torch.ne(flat, ref).sum())])
    dist.all_reduce(differ)
    if differ.item():
        raise SystemExit(f"rank {rank}: replicas differ in {differ.item()} parameters")
    if rank == 0:
        print(f"[{backend}] {world} replicas equal after 20 steps")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
