"""chorus as a torch.distributed backend.

    import torch_chorus                      # registers backend "chorus"
    torch.distributed.init_process_group("chorus", ...)

Every init method torch has works (env://, tcp://, file://, store=): chorus meets its
peers in the store torch gives each group, and torch's timeout bounds every op.
"""
from datetime import timedelta

import torch
import torch.distributed as dist

from torch_chorus._C import ProcessGroupChorus  # noqa: F401  (after torch: its base class)

__all__ = ["ProcessGroupChorus", "create_process_group"]


def create_process_group(store, rank, size, timeout=timedelta(minutes=30)):
    """The backend's creator: torch calls it for the default group and each new_group."""
    return ProcessGroupChorus(store, rank, size, timeout)


if "CHORUS" not in dist.Backend._plugins:
    dist.Backend.register_backend("chorus", create_process_group)
