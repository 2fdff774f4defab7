"""Model parallelism for GPT models over the (pp, dp, tp) device mesh (trainer/distributed.py device_mesh), with
PyTorch's own APIs.

Tensor parallelism (torch.distributed.tensor.parallel.parallelize_module), per block: ColwiseParallel on the
attention's qkv and the MLP's first linear, RowwiseParallel on the attention's proj and the MLP's second linear
(Megatron's split: one all-reduce after attention and one after the MLP in the forward pass, and their mirrors in
the backward pass). The qkv rows are head-major (trainer/models/gpt.py), so each process holds whole heads.
Sequence parallelism is off: the residual stream between blocks stays replicated across the tensor-parallel group.
Splitting it along the sequence would make the embeddings, the final norm and the tied logits sequence-sharded
DTensors too, which the tied output (the logits reuse the embedding matrix, also held unsplit by the last pipeline
stage) does not allow without gathering the sequence again; the layer norms are cheap next to the matrices.

Pipeline parallelism (torch.distributed.pipelining): the model is cut by hand into GPTStage modules
(trainer/models/gpt_stage.py; parameter names unchanged) and run by Schedule1F1B, whose micro-batches are the
gradient accumulation steps; with fewer micro-batches than stages 1F1B does not apply and ScheduleGPipe runs them
(a larger bubble; the start log says so). The loss is computed on the last stage; the step's figures are broadcast
from it over the pipeline group. The tied embedding: the first and last stage each hold `wte.weight`, equal at the
start, and sum their gradients over a group of the two before each optimizer step (Megatron's way), so the copies
take the same update. The gradient norm for clipping is over every stage, the duplicate counted once.

Data parallelism over the dp dimension:
- fsdp / zero2: fully_shard (FSDP2) per block and on the root, on the dp mesh (reshard_after_forward as the
  strategies say), composing with the tensor-parallel DTensors (2-D) and with the pipeline stages.
- ddp / zero1: every dp replica keeps whole (stage, tensor-parallel) parameters and optimizer state, and the
  gradients are all-reduced over the dp group once per optimizer step, after the accumulation micro-steps (one
  explicit all_reduce per parameter). DistributedDataParallel and ZeroRedundancyOptimizer do not take DTensor
  parameters or pipeline stages; `replicate` is not a stable API; an explicit all-reduce is the same arithmetic as
  DDP's and works under every layout. ZeRO-1's optimizer-state sharding is therefore not applied under a mesh (use
  zero2 or fsdp to shard optimizer state there).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from schemas.vocabulary import FSDP_STRATEGIES
from trainer.distributed import MeshPlace
from trainer.logs import log
from trainer.models.gpt import GPT
from trainer.models.gpt_stage import GPTStage
from trainer.objectives import training_loss


@dataclass
class Pipeline:
    """This process's pipeline stage and the schedule that runs it."""

    stage_module: GPTStage
    schedule: Any
    """A torch.distributed.pipelining schedule (Schedule1F1B, or ScheduleGPipe with fewer micro-batches than
    stages)."""
    micro_batches: int
    scale: Callable[[torch.Tensor], torch.Tensor] = field(default=lambda loss: loss)
    """What the loss goes through before its backward (the fp16 loss scaler's scale; the identity otherwise)."""

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """One micro-batch's mean loss (the schedule divides the gradients by the micro-batch count)."""
        return self.scale(training_loss("causal-lm", output, target))


def tensor_parallel_plan() -> dict[str, Any]:
    """Each block's tensor-parallel plan (module names inside a trainer/models/gpt.py Block)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {
        "attn.qkv": ColwiseParallel(),
        "attn.proj": RowwiseParallel(),
        "mlp.0": ColwiseParallel(),
        "mlp.2": RowwiseParallel(),
    }


def blocks_of(module: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a GPT or of a pipeline stage."""
    blocks = getattr(module, "blocks", None)
    if isinstance(blocks, nn.ModuleList):
        return list(blocks)
    if isinstance(blocks, nn.ModuleDict):
        return list(blocks.values())
    return []


def parallelize(
    model: nn.Module, place: MeshPlace, strategy: str, device: str, micro_batches: int
) -> tuple[nn.Module, Pipeline | None]:
    """Cut (pipeline), split (tensor parallel) and shard (fsdp, zero2) the model on the mesh; returns the module this
    process trains and its pipeline (None without pipelining), which runs micro_batches per optimizer step."""
    if not isinstance(model, GPT):
        raise TypeError(f"tensor and pipeline parallelism split a GPT; got {type(model).__name__}")
    layout = place.layout
    # Cut on the host and move only this process's stage to the device: the whole model need not fit on one GPU.
    # Each process still builds the whole model on the host first (as the data-parallel path does), so that every
    # layout starts from the same seeded weights; cutting copies no random state and changes no value.
    module: nn.Module = model
    if layout.pipeline_parallel > 1:
        module = GPTStage(model, place.pp, layout.pipeline_parallel)
    module = module.to(device)
    if layout.tensor_parallel > 1:
        from torch.distributed.tensor.parallel import parallelize_module

        for block in blocks_of(module):
            parallelize_module(block, place.mesh["tp"], tensor_parallel_plan())
    if strategy in FSDP_STRATEGIES and layout.data_parallel > 1:
        from torch.distributed.fsdp import fully_shard

        reshard = strategy == "fsdp"
        dp_mesh = place.mesh["dp"]
        for block in blocks_of(module):
            fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard)
        fully_shard(module, mesh=dp_mesh, reshard_after_forward=reshard)
    if not isinstance(module, GPTStage):
        return module, None
    return module, _pipeline(module, place, device, micro_batches)


def _pipeline(module: GPTStage, place: MeshPlace, device: str, micro_batches: int) -> Pipeline:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    stages = place.layout.pipeline_parallel
    stage = PipelineStage(module, place.pp, stages, torch.device(device), group=place.group("pp"))
    pipeline = Pipeline(module, None, micro_batches)
    kind = Schedule1F1B if micro_batches >= stages else ScheduleGPipe
    pipeline.schedule = kind(stage, micro_batches, loss_fn=pipeline.loss)
    if micro_batches < stages and dist.get_rank() == 0:
        log(
            "pipeline bubble is large",
            severity="WARNING",
            micro_batches=micro_batches,
            stages=stages,
            schedule=kind.__name__,
            hint="1F1B needs at least as many micro-batches as stages: raise --gradient-accumulation-steps to "
            f"{stages} or more (lowering --micro-batch-size to keep the batch)",
        )
    return pipeline


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (a view that in-place collectives update), or the tensor itself."""
    from torch.distributed.tensor import DTensor

    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _grads(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    for name, param in module.named_parameters():
        if param.grad is not None:
            yield name, param.grad


@torch.no_grad()
def reduce_gradients(module: nn.Module, place: MeshPlace, all_reduce_dp: bool) -> None:
    """Before the optimizer step: the mean of the gradients over the dp group (ddp, zero1: all_reduce_dp), and the
    tied embedding's gradient summed over its first and last stage."""
    dp = place.layout.data_parallel
    if all_reduce_dp and dp > 1:
        group = place.group("dp")
        for _, grad in _grads(module):
            local = _local(grad)
            dist.all_reduce(local, group=group)
            local.div_(dp)
    if place.tied_group is not None:
        tied = dict(_grads(module)).get("wte.weight")
        if tied is None:
            raise RuntimeError("the tied embedding wte.weight has no gradient on a first or last pipeline stage")
        dist.all_reduce(_local(tied), group=place.tied_group)


@torch.no_grad()
def clip_gradients(module: nn.Module, place: MeshPlace, max_norm: float) -> torch.Tensor:
    """Scale the gradients so that their global 2-norm (over every tensor-parallel shard, dp shard and pipeline
    stage, the tied embedding counted once) is at most max_norm; returns that norm (before clipping)."""
    from torch.distributed.tensor import DTensor

    duplicate = "wte.weight" if place.last_stage and not place.first_stage else None
    grads = dict(_grads(module))
    by_mesh: dict[object, list[torch.Tensor]] = {}
    for name, grad in grads.items():
        if name != duplicate:
            by_mesh.setdefault(grad.device_mesh if isinstance(grad, DTensor) else None, []).append(grad)
    device = next(iter(grads.values())).device if grads else torch.device("cpu")
    squares = torch.zeros((), dtype=torch.float32, device=device)
    for tensors in by_mesh.values():
        norm = torch.nn.utils.get_total_norm(tensors, 2.0)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()  # a DTensor's norm over its shards (replicated placements counted once)
        squares += norm.float() ** 2
    if place.layout.pipeline_parallel > 1:
        dist.all_reduce(squares, group=place.group("pp"))
    total = squares.sqrt()
    coefficient = float(max_norm / (float(total) + 1e-6))
    if coefficient < 1.0:
        for grad in grads.values():
            grad.mul_(coefficient)
    return total


def stage_weights(module: nn.Module, place: MeshPlace) -> dict[str, torch.Tensor]:
    """The whole model's weights on rank 0's CPU, gathered from every stage ({} elsewhere). Collective.

    On GPUs the whole model must never be on one device, nor a stage's whole weights on every GPU of the stage:
    each tensor-parallel or dp-sharded tensor is gathered whole on the GPU one at a time (every process of the
    stage takes part) and only the stage's holder (dp 0, tp 0) keeps it, on its CPU. The holders then send their
    stage's tensors one by one to rank 0 over MeshPlace.host_group, a gloo group (CPU tensors: NCCL's default group
    carries GPU tensors only). Neither gather_object (which pads every process's pickled object to the largest on
    the GPU, rank 0 allocating world size x that largest) nor the state-dict API's cpu_offload (which keeps the
    gathered tensors on global rank 0 only, not on a later stage's holder) serves here."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from torch.distributed.tensor import DTensor

    holder = place.dp == 0 and place.tp == 0
    mine: dict[str, torch.Tensor] = {}
    for name, value in get_model_state_dict(module).items():
        if not isinstance(value, torch.Tensor):
            continue
        whole = value.full_tensor() if isinstance(value, DTensor) else value
        if holder and not (name == "wte.weight" and not place.first_stage):  # the tied copy is kept once
            mine[name] = whole.detach().to("cpu", copy=True)
        del whole
    group = place.host_group
    if dist.get_rank() != 0:
        if holder:
            _send(mine, 0, group)
        return {}
    merged = dict(mine)
    for stage in range(1, place.layout.pipeline_parallel):
        merged.update(_receive(int(place.mesh.mesh[stage, 0, 0]), group))
    return merged


def _send(tensors: dict[str, torch.Tensor], dst: int, group: dist.ProcessGroup | None) -> None:
    """CPU tensors to dst, one at a time after their names, shapes and dtypes (_receive's other half)."""
    header = [[(name, tuple(t.shape), t.dtype) for name, t in tensors.items()]]
    dist.send_object_list(header, dst=dst, group=group, device=torch.device("cpu"))
    for tensor in tensors.values():
        dist.send(tensor.contiguous(), dst=dst, group=group)


def _receive(src: int, group: dist.ProcessGroup | None) -> dict[str, torch.Tensor]:
    header: list[Any] = [None]
    dist.recv_object_list(header, src=src, group=group, device=torch.device("cpu"))
    out: dict[str, torch.Tensor] = {}
    for name, shape, dtype in header[0]:
        out[name] = torch.empty(shape, dtype=dtype)
        dist.recv(out[name], src=src, group=group)
    return out
