"""Wrapping a model for the chosen strategy, and reading/writing full state dicts whatever the wrapper.

ddp   DistributedDataParallel: every rank holds the whole model and optimizer; gradients are all-reduced.
zero1 DDP + ZeroRedundancyOptimizer: optimizer state sharded across ranks.
zero2 FSDP (fully_shard) with reshard_after_forward=False: SHARD_GRAD_OP, gradients and optimizer state sharded.
fsdp  FSDP (fully_shard) with reshard_after_forward=True: FULL_SHARD, parameters sharded too.
A single process trains the bare model whatever the strategy (there is nobody to share with).
With tensor or pipeline parallelism (a device mesh), trainer/model_parallel.py splits the model and says how each
strategy's data parallelism is done on the mesh's dp dimension.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import hashlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from schemas.vocabulary import FSDP_STRATEGIES
from trainer import collectives

if TYPE_CHECKING:
    from trainer.distributed import MeshPlace
    from trainer.model_parallel import Pipeline


@dataclass
class Wrapped:
    """The model as the loop calls it, the bare model inside, and the optimizer."""

    model: nn.Module
    inner: nn.Module
    optimizer: torch.optim.Optimizer
    strategy: str
    mesh: MeshPlace | None = None
    """This process's place in the device mesh, under tensor or pipeline parallelism; None otherwise."""
    pipeline: Pipeline | None = None
    """This process's pipeline stage and schedule, under pipeline parallelism; model is then the stage's module."""


def wrap(
    model: nn.Module,
    strategy: str,
    device: str,
    learning_rate: float,
    weight_decay: float,
    implementation: Mapping[str, Any] | None = None,
    mesh: MeshPlace | None = None,
    micro_batches: int = 1,
) -> Wrapped:
    """Move the model to device and wrap it for strategy; build AdamW (sharded where the strategy says), in the
    implementation given (trainer/speed.py SpeedSettings.adamw_options: fused or foreach; default PyTorch's).
    With a mesh the model is split for its tensor and pipeline parallelism (micro_batches per pipeline step)."""
    adamw: dict[str, Any] = {"lr": learning_rate, "weight_decay": weight_decay, "betas": (0.9, 0.95)}
    adamw.update(implementation or {})
    if mesh is not None:
        from trainer.model_parallel import parallelize

        module, pipeline = parallelize(model, mesh, strategy, device, micro_batches)
        adamw.update(adamw_implementation(module, implementation))
        return Wrapped(module, module, torch.optim.AdamW(module.parameters(), **adamw), strategy, mesh, pipeline)
    model = model.to(device)
    distributed = collectives.active()
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
    for block in block_units(model):
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
    if wrapped.mesh is not None and not isinstance(model, _fsdp_module()):
        yield  # gradients stay local until finish_gradients reduces them once per optimizer step
        return
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


def adamw_implementation(model: nn.Module, implementation: Mapping[str, Any] | None) -> dict[str, Any]:
    """AdamW's implementation options for this model: the ones given, except where the model mixes DTensor and
    plain parameters (tensor parallelism without FSDP: the layer norms and embeddings stay plain), which the
    multi-tensor (foreach) and fused kernels do not take in one call; those run the per-parameter loop."""
    from torch.distributed.tensor import DTensor

    kinds = {isinstance(param, DTensor) for param in model.parameters()}
    if len(kinds) > 1:
        return {"foreach": False, "fused": False}
    return dict(implementation or {})


def _fsdp_module() -> type:
    from torch.distributed.fsdp import FSDPModule

    return FSDPModule


def finish_gradients(wrapped: Wrapped) -> None:
    """What the gradients need after the last micro-step and before clipping: under a mesh, the dp all-reduce of
    ddp / zero1 and the tied embedding's sum over the first and last pipeline stage; nothing otherwise (DDP and FSDP
    reduced them in the backward pass). Collective."""
    if wrapped.mesh is None:
        return
    from trainer.model_parallel import reduce_gradients

    fsdp = isinstance(wrapped.model, _fsdp_module())
    reduce_gradients(wrapped.model, wrapped.mesh, all_reduce_dp=not fsdp)


def clip_gradients(wrapped: Wrapped, max_norm: float) -> None:
    """Clip the global gradient norm to max_norm (over every process's share of the model). Collective."""
    if wrapped.mesh is None:
        torch.nn.utils.clip_grad_norm_(wrapped.model.parameters(), max_norm)
        return
    from trainer.model_parallel import clip_gradients as clip_on_mesh

    clip_on_mesh(wrapped.model, wrapped.mesh, max_norm)


def block_units(model: nn.Module) -> list[nn.Module]:
    """Transformer blocks are sharded (and compiled, trainer/speed.py) one by one, so only one block is gathered
    at a time; an MLP as a whole (no units)."""
    blocks = getattr(model, "blocks", None)
    return list(blocks) if isinstance(blocks, nn.ModuleList) else []


def sharded(wrapped: Wrapped) -> bool:
    """Whether no rank holds the whole model (FSDP across processes, or tensor or pipeline parallelism)."""
    return (wrapped.strategy in FSDP_STRATEGIES and collectives.active()) or wrapped.mesh is not None


def _cpu(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


def full_state(wrapped: Wrapped) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model, optimizer) full state dicts keyed by parameter name on rank 0's CPU (what a checkpoint holds,
    whatever the strategy); other ranks may get empty dicts. Collective.

    FSDP and DDP go through torch.distributed.checkpoint's state-dict API (gathering shards to rank 0);
    ZeroRedundancyOptimizer consolidates its shards on rank 0.
    """
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    if _zero1(wrapped):
        optim = _zero1_consolidated(wrapped)
        return (_cpu(wrapped.inner.state_dict()) if dist.get_rank() == 0 else {}), optim
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    # Copies: on the CPU the state-dict API hands back the live tensors themselves, which the next step changes.
    model = copy.deepcopy(get_model_state_dict(wrapped.model, options=options))
    # An optimizer without state yet gives none: the state-dict API would create it by taking a step.
    if not wrapped.optimizer.state:
        return model, {}
    return model, copy.deepcopy(get_optimizer_state_dict(wrapped.model, wrapped.optimizer, options=options))


def sharded_state(wrapped: Wrapped) -> dict[str, Any]:
    """This rank's part of the model and optimizer state ({"model", "optim"}, keyed by parameter name) for
    torch.distributed.checkpoint, which reshards it on load. Collective.

    The state-dict API gives FSDP's shards as DTensors and DDP's full tensors (written once, whoever holds them).
    ZeroRedundancyOptimizer is not one it knows: its shards are consolidated on rank 0, which alone contributes
    the optimizer state, in the same name-keyed form.
    """
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    if _zero1(wrapped):
        optim = _zero1_consolidated(wrapped)
        return {"model": get_model_state_dict(wrapped.model), "optim": optim}
    model, optim = get_state_dict(wrapped.model, wrapped.optimizer)
    return {"model": model, "optim": optim}


def load_sharded_state(
    wrapped: Wrapped,
    load: Callable[[dict[str, Any]], None],
    upgrade: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
) -> None:
    """Fill the model and optimizer from a checkpoint: load(state) fills sharded_state()'s templates in place
    (whatever the number of processes and strategy that wrote it). Collective.

    upgrade(name, tensor), when given, rewrites each tensor of a checkpoint of an earlier format (the model's and
    the optimizer's, keyed by parameter name) before it is set. A reordering may cross the shards, so the state is
    then read whole into CPU tensors on every process (the model and its AdamW moments in full on each host, once,
    for the first resume of an earlier trainer's line) and set through the state-dict API's full-state path, which
    keeps each process's part.

    Under ZeRO-1 every rank loads the whole optimizer state for the moment of loading (ZeroRedundancyOptimizer
    takes the whole state and keeps its partition)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    if _zero1(wrapped):
        state = {"model": get_model_state_dict(wrapped.model), "optim": _adamw_template(wrapped)}
        load(state)
        if upgrade is not None:
            _upgrade(state, upgrade)
        set_model_state_dict(wrapped.model, state["model"])
        wrapped.optimizer.load_state_dict(_by_index(state["optim"], _names(wrapped)))
        return
    template: dict[str, Any] = sharded_state(wrapped)
    options = None
    if upgrade is not None:
        template = _whole(template)
        options = StateDictOptions(full_state_dict=True)
    load(template)
    if upgrade is not None:
        _upgrade(template, upgrade)
    set_state_dict(
        wrapped.model,
        wrapped.optimizer,
        model_state_dict=template["model"],
        optim_state_dict=template["optim"],
        options=options,
    )


def _whole(state: Any) -> Any:
    """A state's template with every tensor (a DTensor shard, or a device tensor) replaced by an empty CPU tensor of
    its whole shape, which torch.distributed.checkpoint fills whole."""
    if isinstance(state, torch.Tensor):
        return torch.empty(state.shape, dtype=state.dtype)
    if isinstance(state, dict):
        return {key: _whole(value) for key, value in state.items()}
    if isinstance(state, list):
        return [_whole(value) for value in state]
    return copy.deepcopy(state)


def _upgrade(state: dict[str, Any], upgrade: Callable[[str, torch.Tensor], torch.Tensor]) -> None:
    """Apply upgrade to the whole model state's tensors and to the optimizer state's tensors of a parameter's shape
    (AdamW's moments, not its step count), in place."""
    model = state["model"]
    for name, tensor in model.items():
        model[name] = upgrade(name, tensor)
    for name, entry in state["optim"].get("state", {}).items():
        shape = model[name].shape
        for key, value in entry.items():
            if isinstance(value, torch.Tensor) and value.shape == shape:
                entry[key] = upgrade(name, value)


def _zero1(wrapped: Wrapped) -> bool:
    return wrapped.strategy == "zero1" and collectives.active() and wrapped.mesh is None


def _names(wrapped: Wrapped) -> list[str]:
    """Parameter names in the optimizer's global index order (the order ZeroRedundancyOptimizer numbers them)."""
    return [name for name, _ in wrapped.inner.named_parameters()]


def _zero1_consolidated(wrapped: Wrapped) -> dict[str, Any]:
    """ZeroRedundancyOptimizer's whole state on rank 0, keyed by parameter name; {} elsewhere. Collective."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    optimizer = wrapped.optimizer
    if not isinstance(optimizer, ZeroRedundancyOptimizer):
        raise TypeError(f"--strategy=zero1: expected a ZeroRedundancyOptimizer, got {type(optimizer).__name__}")
    optimizer.consolidate_state_dict(to=0)
    if dist.get_rank() != 0:
        return {}
    by_index = optimizer.state_dict()
    names = _names(wrapped)
    return {
        "state": {names[index]: dict(value) for index, value in by_index["state"].items()},
        "param_groups": [
            {**group, "params": [names[index] for index in group["params"]]} for group in by_index["param_groups"]
        ],
    }


def _adamw_template(wrapped: Wrapped) -> dict[str, Any]:
    """The whole AdamW state of the model, zeros of the right shapes, keyed by parameter name (what a checkpoint's
    optimizer state is read into)."""
    params = dict(wrapped.inner.named_parameters())
    name_of = {id(param): name for name, param in params.items()}
    groups = [
        {**{k: v for k, v in group.items() if k != "params"}, "params": [name_of[id(p)] for p in group["params"]]}
        for group in wrapped.optimizer.param_groups
    ]
    state = {
        name: {
            "step": torch.zeros((), dtype=torch.float32),
            "exp_avg": torch.zeros_like(param),
            "exp_avg_sq": torch.zeros_like(param),
        }
        for name, param in params.items()
    }
    return {"state": state, "param_groups": groups}


def _by_index(by_name: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """A name-keyed optimizer state back in torch's index-keyed form (indices in names' order)."""
    index = {name: i for i, name in enumerate(names)}
    return {
        "state": {index[name]: value for name, value in by_name["state"].items()},
        "param_groups": [
            {**group, "params": [index[name] for name in group["params"]]} for group in by_name["param_groups"]
        ],
    }


def model_weights(wrapped: Wrapped) -> dict[str, torch.Tensor]:
    """The full model state on rank 0's CPU (empty elsewhere under FSDP and model parallelism). Collective."""
    if wrapped.mesh is not None:
        from trainer.model_parallel import stage_weights

        return stage_weights(wrapped.model, wrapped.mesh)
    if sharded(wrapped):
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
    if sharded(wrapped):
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
