"""Wrapping a model for the chosen strategy, and reading/writing full state dicts whatever the wrapper.

ddp   DistributedDataParallel: every rank holds the whole model and optimizer; gradients are all-reduced.
zero1 DDP + ZeroRedundancyOptimizer: optimizer state sharded across ranks.
zero2 FSDP (fully_shard) with reshard_after_forward=False: SHARD_GRAD_OP, gradients and optimizer state sharded.
fsdp  FSDP (fully_shard) with reshard_after_forward=True: FULL_SHARD, parameters sharded too.
A single process trains the bare model whatever the strategy (there is nobody to share with).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from schemas.vocabulary import FSDP_STRATEGIES
from trainer import collectives


@dataclass
class Wrapped:
    """The model as the loop calls it, the bare model inside, and the optimizer."""

    model: nn.Module
    inner: nn.Module
    optimizer: torch.optim.Optimizer
    strategy: str


def wrap(model: nn.Module, strategy: str, device: str, learning_rate: float, weight_decay: float) -> Wrapped:
    """Move the model to device and wrap it for strategy; build AdamW (sharded where the strategy says)."""
    model = model.to(device)
    distributed = collectives.active()
    adamw: dict[str, Any] = {"lr": learning_rate, "weight_decay": weight_decay, "betas": (0.9, 0.95)}
    if not distributed:
        return Wrapped(model, model, torch.optim.AdamW(model.parameters(), **adamw), strategy)
    if strategy not in FSDP_STRATEGIES:
        from torch.nn.parallel import DistributedDataParallel as DDP

        device_ids = [torch.device(device).index] if device.startswith("cuda") else None
        ddp = DDP(model, device_ids=device_ids, bucket_cap_mb=64)
        if strategy == "zero1":
            from torch.distributed.optim import ZeroRedundancyOptimizer

            optimizer: torch.optim.Optimizer = ZeroRedundancyOptimizer(
                ddp.parameters(), optimizer_class=torch.optim.AdamW, **adamw
            )
        else:
            optimizer = torch.optim.AdamW(ddp.parameters(), **adamw)
        return Wrapped(ddp, model, optimizer, strategy)
    from torch.distributed.fsdp import fully_shard

    reshard = strategy == "fsdp"
    for block in _shard_units(model):
        fully_shard(block, reshard_after_forward=reshard)
    fully_shard(model, reshard_after_forward=reshard)
    return Wrapped(model, model, torch.optim.AdamW(model.parameters(), **adamw), strategy)


@contextlib.contextmanager
def gradient_sync(wrapped: Wrapped, enabled: bool) -> Iterator[None]:
    """Forward and backward inside run with (enabled) or without gradient synchronisation across processes.

    Accumulating micro-steps run without it and keep their gradients local; the last micro-step of an optimizer step
    runs with it and reduces the sum once. DDP (and ZeRO-1, which is DDP underneath) use no_sync(); FSDP
    (fully_shard) turns set_requires_gradient_sync off and back on; a single process has nothing to synchronise.
    """
    if enabled or not collectives.active():
        yield
        return
    model = wrapped.model
    if wrapped.strategy in FSDP_STRATEGIES:
        from torch.distributed.fsdp import FSDPModule

        if not isinstance(model, FSDPModule):
            raise TypeError(f"--strategy={wrapped.strategy}: expected a fully_shard model, got {type(model).__name__}")
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
        return
    from torch.nn.parallel import DistributedDataParallel as DDP

    if not isinstance(model, DDP):
        raise TypeError(
            f"--strategy={wrapped.strategy}: expected a DistributedDataParallel model, got {type(model).__name__}"
        )
    with model.no_sync():
        yield


def _shard_units(model: nn.Module) -> list[nn.Module]:
    """Transformer blocks are sharded one by one (so only one block is gathered at a time); an MLP as a whole."""
    blocks = getattr(model, "blocks", None)
    return list(blocks) if isinstance(blocks, nn.ModuleList) else []


def _sharded(wrapped: Wrapped) -> bool:
    return wrapped.strategy in FSDP_STRATEGIES and collectives.active()


def _cpu(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


def full_state(wrapped: Wrapped) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model, optimizer) full state dicts on rank 0's CPU; other ranks may get empty dicts. Collective.

    FSDP goes through torch.distributed.checkpoint's state-dict API (gathering shards to rank 0); under DDP every
    rank already holds everything, and ZeroRedundancyOptimizer consolidates its shards on rank 0.
    """
    if _sharded(wrapped):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        return get_state_dict(
            wrapped.model, wrapped.optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
    main = not collectives.active() or dist.get_rank() == 0
    if wrapped.strategy == "zero1" and collectives.active():
        from torch.distributed.optim import ZeroRedundancyOptimizer

        if not isinstance(wrapped.optimizer, ZeroRedundancyOptimizer):
            raise TypeError(
                f"--strategy=zero1: expected a ZeroRedundancyOptimizer, got {type(wrapped.optimizer).__name__}"
            )
        wrapped.optimizer.consolidate_state_dict(to=0)
    if not main:
        return {}, {}
    return _cpu(wrapped.inner.state_dict()), wrapped.optimizer.state_dict()


def load_full_state(wrapped: Wrapped, model_state: dict[str, Any], optim_state: dict[str, Any]) -> None:
    """Load full state dicts (every rank passes the same ones) into the wrapped model and optimizer."""
    if _sharded(wrapped):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        set_state_dict(
            wrapped.model,
            wrapped.optimizer,
            model_state_dict=model_state,
            optim_state_dict=optim_state,
            options=StateDictOptions(full_state_dict=True),
        )
        return
    wrapped.inner.load_state_dict(model_state)
    wrapped.optimizer.load_state_dict(optim_state)


def model_weights(wrapped: Wrapped) -> dict[str, torch.Tensor]:
    """The full model state on rank 0's CPU (empty elsewhere under FSDP). Collective."""
    if _sharded(wrapped):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(wrapped.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return _tensors(full)
    return _cpu(wrapped.inner.state_dict())


def _tensors(state: Mapping[str, object]) -> dict[str, torch.Tensor]:
    """A full model state dict, checked to hold only tensors (torch types it as holding any state value)."""
    tensors: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"model state {name!r}: expected a tensor, got {type(value).__name__}")
        tensors[name] = value
    return tensors


def local_weights_digest(wrapped: Wrapped) -> str | None:
    """sha256 of this rank's own full copy of the weights (None under FSDP, where no rank holds them all)."""
    if _sharded(wrapped):
        return None
    digest = hashlib.sha256()
    for name, tensor in sorted(wrapped.inner.state_dict().items()):
        digest.update(name.encode())
        digest.update(_raw_bytes(tensor))
    return digest.hexdigest()


def _raw_bytes(tensor: torch.Tensor) -> bytes:
    """The tensor's bytes in memory order (a copy; numpy is not needed)."""
    flat = tensor.detach().to("cpu").contiguous()
    size = flat.numel() * flat.element_size()
    return ctypes.string_at(flat.data_ptr(), size) if size else b""
