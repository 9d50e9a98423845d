"""Minimal torch.distributed example on the chorus backend: all_reduce, then broadcast.

    PYTHONPATH=/dir/with/torch_chorus torchrun --nproc_per_node 2 --redirects 2 --tee 2 examples/torch/allreduce.py

(see README.md here for the command that works with this machine's PyTorch.)
"""
import torch
import torch.distributed as dist

try:
    import torch_chorus  # noqa: F401  importing it registers the backend "chorus"
except ImportError as e:
    raise SystemExit(f"cannot import torch_chorus ({e}): put the directory holding the "
                     "torch_chorus package on PYTHONPATH (build it: tools/torch/install.sh)")


def main():
    # env:// (the default): torchrun sets MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE.
    dist.init_process_group("chorus")
    rank, world = dist.get_rank(), dist.get_world_size()

    # all_reduce (SUM, in place): rank r contributes [r, r+1, ..., r+7].
    t = torch.arange(8, dtype=torch.float32) + rank
    dist.all_reduce(t)
    # Every rank now holds sum over r of (i + r) = world*i + world*(world-1)/2.
    expected = torch.arange(8, dtype=torch.float32) * world + world * (world - 1) / 2
    if not torch.equal(t, expected):
        raise SystemExit(f"rank {rank}: all_reduce gave {t.tolist()}, expected {expected.tolist()}")
    if rank == 0:
        print(f"all_reduce over {world} ranks: {t.tolist()}")

    # broadcast (in place): rank 0's tensor overwrites everyone else's.
    b = torch.tensor([3.0, 1.0, 4.0, 1.0, 5.0]) if rank == 0 else torch.zeros(5)
    dist.broadcast(b, src=0)
    if b.tolist() != [3.0, 1.0, 4.0, 1.0, 5.0]:
        raise SystemExit(f"rank {rank}: broadcast gave {b.tolist()}")
    print(f"rank {rank}: ok (broadcast received {b.tolist()})", flush=True)

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
