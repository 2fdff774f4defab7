"""Memory per GPU for each data-parallel strategy (ZeRO paper, Rajbhandari et al. 2020, sections 3.1 and 5).

Adam keeps 16 bytes per parameter either way: mixed precision holds 16-bit params (2) + 16-bit grads (2) + fp32
master params, momentum and variance (12); pure fp32 holds params (4) + grads (4) + moments (8). Over a
data-parallel degree N each strategy keeps `fixed + sharded / N` bytes per parameter per GPU:

    strategy  mixed          fp32
    ddp       16             16
    zero1     4 + 12/N       8 + 8/N      (optimizer states sharded: ZeroRedundancyOptimizer)
    zero2     2 + 14/N       4 + 12/N     (+ gradients: FSDP SHARD_GRAD_OP)
    fsdp      16/N           16/N         (everything: FSDP FULL_SHARD)

FULL_SHARD also holds two gathered layers at a time (the one computing and the prefetched next). Landfall's
convention: per-GPU total = model states + activations + overhead, where overhead = CUDA context + FSDP gather
buffers; a plan is feasible only when the total is at most the card's memory in GB (1e9 bytes) less a safety margin
kept free (default 10 %: `usable_bytes`). Activations are those of one micro-batch: gradient accumulation splits a
process's share of the global batch into micro-batches, and activation checkpointing (when it is what makes a plan
fit) keeps only each block's input. Functions take numpy arrays or plain numbers alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from schemas.vocabulary import STRATEGIES, STRATEGY_INDEX

if TYPE_CHECKING:
    from numpy.typing import NDArray

    Values: TypeAlias = float | NDArray[Any]
    """A plain number or a numpy array of them: the functions below work elementwise on either."""

# (fixed, sharded) bytes per parameter, (mixed, fp32), per strategy: the table in the module docstring.
_STATE_BYTES = {
    "ddp": ((16.0, 0.0), (16.0, 0.0)),
    "zero1": ((4.0, 12.0), (8.0, 8.0)),
    "zero2": ((2.0, 14.0), (4.0, 12.0)),
    "fsdp": ((0.0, 16.0), (0.0, 16.0)),
}
# [strategy index][0 = mixed, 1 = fp32] -> (fixed, sharded); a strategy without a row fails here, at import.
STATE_BYTES_PER_PARAM = np.array([_STATE_BYTES[name] for name in STRATEGIES])
FSDP = STRATEGY_INDEX["fsdp"]


def model_state_bytes(parameters: Values, strategy: int | NDArray[Any], world: Values, fp32: Values) -> Values:
    """Bytes of params + grads + Adam states per GPU. strategy: index into STRATEGIES; fp32: 0/1 or bools."""
    fp32 = np.asarray(fp32, dtype=np.int64)
    fixed: Values = STATE_BYTES_PER_PARAM[strategy, fp32, 0]  # a float64 or an array of them
    sharded: Values = STATE_BYTES_PER_PARAM[strategy, fp32, 1]
    return parameters * (fixed + sharded / world)


def frozen_weight_bytes(parameters: Values, strategy: int | NDArray[Any], world: Values, fp32: Values) -> Values:
    """Bytes per GPU of weights that do not train (adapters' frozen base model): the weights alone at the run's
    precision (2 bytes in 16-bit, 4 in fp32), no gradients or optimizer states; FULL_SHARD shards them over the
    data-parallel degree, the other strategies keep a whole copy per GPU."""
    weight = 2.0 + 2.0 * np.asarray(fp32, dtype=np.float64)
    return parameters * weight / np.where(np.asarray(strategy) == FSDP, world, 1)


def activation_bytes(per_sample_16bit: Values, micro_batch: Values, fp32: Values) -> Values:
    """Activations of one micro-batch; fp32 activations take twice the 16-bit bytes."""
    return per_sample_16bit * micro_batch * (1.0 + np.asarray(fp32, dtype=np.float64))


def gather_bytes(largest_layer_parameters: Values, strategy: int | NDArray[Any], fp32: Values) -> Values:
    """FULL_SHARD's two gathered layers (compute + prefetch); zero for the other strategies."""
    param_bytes = 2.0 + 2.0 * np.asarray(fp32, dtype=np.float64)
    return np.where(np.asarray(strategy) == FSDP, 2.0 * largest_layer_parameters * param_bytes, 0.0)


def total_bytes(states: Values, activations: Values, gather: Values, context_bytes: Values) -> Values:
    """Per-GPU total: states + activations + gather buffers + CUDA context."""
    return states + activations + gather + context_bytes


def usable_bytes(capacity_bytes: Values, margin: Values) -> Values:
    """What a plan may fill of a GPU (or a CPU machine's RAM): the capacity less the margin kept free."""
    return capacity_bytes * (1.0 - margin)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU (or, on a CPU-only machine, per machine)."""

    model_states_bytes: int
    activations_bytes: int
    overhead_bytes: int
    """CUDA context and FSDP gather buffers."""
    total_bytes: int
    capacity_bytes: int
    usable_bytes: int
    """capacity less the safety margin kept free."""

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.usable_bytes


def breakdown(
    parameters: int,
    strategy: str,
    world: int,
    fp32: bool,
    *,
    activation_per_sample: float = 0.0,
    micro_batch: int = 0,
    largest_layer_parameters: int = 0,
    context_bytes: int,
    margin: float,
    capacity_bytes: int = 0,
) -> MemoryBreakdown:
    """The scalar breakdown shown in a Plan and by `landfall estimate-memory`."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    if world < 1:
        raise ValueError(f"GPU count must be >= 1, got {world}")
    s = STRATEGY_INDEX[strategy]
    states = float(model_state_bytes(parameters, s, world, int(fp32)))
    acts = float(activation_bytes(activation_per_sample, micro_batch, int(fp32)))
    gather = float(gather_bytes(largest_layer_parameters, s, int(fp32)))
    total = float(total_bytes(states, acts, gather, context_bytes))
    return MemoryBreakdown(
        model_states_bytes=round(states),
        activations_bytes=round(acts),
        overhead_bytes=round(total) - round(states) - round(acts),
        total_bytes=round(total),
        capacity_bytes=capacity_bytes,
        usable_bytes=round(float(usable_bytes(capacity_bytes, margin))),
    )
