"""The few collectives the trainer uses outside the model wrappers; each is the identity in a single process.

NCCL reduces only GPU tensors, so values travel on the process's device and come back on the CPU.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce(tensor: torch.Tensor, device: str, op: str = "sum") -> torch.Tensor:
    """The element-wise sum (or 'max' / 'min') of tensor over all ranks."""
    if not active():
        return tensor
    reduce_op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op]
    work = tensor.to(device).clone()
    dist.all_reduce(work, op=reduce_op)
    return work.to(tensor.device)


def all_gather_object(value: Any) -> list[Any]:
    """Every rank's value, indexed by rank."""
    if not active():
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def broadcast_object(value: Any) -> Any:
    """Rank 0's value on every rank."""
    if not active():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    if active():
        dist.barrier()


def rank() -> int:
    """This process's rank (0 in a single process)."""
    return dist.get_rank() if active() else 0
