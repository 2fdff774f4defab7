"""Evaluate one request over the whole candidate space at once (numpy), and pick the winner.

Candidates are indexed [config, variant, spot]; each gets a reason code (0 = feasible) from the first check it fails,
in the order of REASONS below, a duration, a cost (in the cheapest allowed region with quota for it) and so a rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from functions.planning.memory import STATE_BYTES_PER_PARAM, activation_bytes, gather_bytes, total_bytes
from functions.planning.performance import comm_seconds, compute_seconds, run_hours, step_seconds
from functions.planning.space import VARIANT_SERVER, VARIANT_STRATEGY, Space
from functions.planning.workload import Workload

REASONS = (
    "feasible", "invalid", "gpu_not_allowed", "max_gpus", "end_of_support", "spot_policy", "region", "quota",
    "batch", "host", "memory", "timeout", "deadline", "budget",
)
CODE = {name: i for i, name in enumerate(REASONS)}


@dataclass(frozen=True)
class Limits:
    """The request's constraints in array form, for one space."""

    region_mask: np.ndarray
    """[region]: allowed by the request."""
    config_allowed: np.ndarray
    """[config]: machine kind allowed (GPU allowlist; CPU-only only when the allowlist is empty)."""
    max_gpus: int
    today: int
    """date.toordinal() of the planning day, for end-of-support checks."""
    spot_allowed: np.ndarray
    """[spot]: 0 on demand, 1 Spot."""
    deadline_hours: float | None
    budget_usd: float
    max_hours: float
    fastest: bool
    """Objective: fastest within budget (True) or cheapest (False)."""
    fp32_only: bool


@dataclass(frozen=True, eq=False)
class Evaluation:
    """Every candidate of one request; arrays are [config], [config, variant] or [config, variant, spot]."""

    space: Space
    workload: Workload
    limits: Limits
    fp32: np.ndarray
    micro_batch: np.ndarray
    states: np.ndarray
    activations: np.ndarray
    memory_total: np.ndarray
    step: np.ndarray
    hours: np.ndarray
    cost: np.ndarray
    hourly: np.ndarray
    region: np.ndarray
    """Index into space.regions; -1 where no allowed region has the shape within quota."""
    reason: np.ndarray
    primary: np.ndarray
    """The objective (cost, or hours when fastest); inf where infeasible."""
    secondary: np.ndarray

    @property
    def feasible(self) -> np.ndarray:
        return self.reason == 0

    def best(self) -> tuple[int, int, int] | None:
        """The winning (config, variant, spot): least primary, then least secondary, then first in space order."""
        primary = self.primary
        low = primary.min()
        if not np.isfinite(low):
            return None
        ties = np.flatnonzero(primary.ravel() == low)
        flat = int(ties[np.argmin(self.secondary.ravel()[ties])]) if ties.size > 1 else int(ties[0])
        c, v, s = np.unravel_index(flat, primary.shape)
        return int(c), int(v), int(s)


def evaluate(space: Space, work: Workload, limits: Limits) -> Evaluation:
    a = space.catalog.assumptions
    p = float(work.parameters)
    fp32 = space.is_cpu | (space.mixed_precision == 2) | limits.fp32_only
    fp32_i = fp32.astype(np.int64)
    world = space.world
    micro = -(-work.global_batch // world)

    strategy = VARIANT_STRATEGY[None, :]
    fixed = STATE_BYTES_PER_PARAM[strategy, fp32_i[:, None], 0]
    sharded = STATE_BYTES_PER_PARAM[strategy, fp32_i[:, None], 1]
    states = p * (fixed + sharded / world[:, None])
    acts = activation_bytes(work.activation_bytes_per_sample, micro, fp32)
    gather = gather_bytes(work.largest_layer_parameters, strategy, fp32[:, None])
    context = np.where(space.is_cpu, a.memory.cpu_process_bytes, a.memory.cuda_context_bytes)[:, None]
    mem_total = total_bytes(states, acts[:, None], gather, context, a.memory.safety_margin_fraction)

    peak = np.where(fp32, space.peak_fp32, space.peak_mixed)
    compute = compute_seconds(work.flops_per_sample, micro, peak, space.mfu)
    comm = comm_seconds(p, fp32[:, None], strategy, space.gpus_per_node[:, None], space.nodes[:, None],
                        space.intra_bytes_per_s[:, None], space.network_bytes_per_s[:, None], VARIANT_SERVER[None, :])
    step = step_seconds(compute[:, None], comm, a.compute.comm_overlap_fraction, space.step_overhead[:, None])
    spot = np.array([0.0, 1.0])
    hours = run_hours(work.steps, step[:, :, None], a.job.startup_seconds, spot[None, None, :],
                      a.job.spot_overhead_fraction)

    in_region = space.offered & limits.region_mask[None, :]
    allowed = in_region[:, :, None, None] & space.quota_ok
    masked = np.where(allowed, space.price, np.inf)
    best_region = np.argmin(masked, axis=1)  # [config, spot, server]
    best_price = np.take_along_axis(masked, best_region[:, None], axis=1)[:, 0]
    hourly = best_price[:, :, VARIANT_SERVER].transpose(0, 2, 1)  # [config, variant, spot]
    region = np.where(np.isfinite(hourly), best_region[:, :, VARIANT_SERVER].transpose(0, 2, 1), -1)
    cost = hours * hourly

    reason = np.zeros(cost.shape, dtype=np.int64)
    if limits.budget_usd > 0:
        reason[cost > limits.budget_usd] = CODE["budget"]
    if limits.deadline_hours is not None:
        reason[hours > limits.deadline_hours] = CODE["deadline"]
    if limits.max_hours > 0:
        reason[hours > limits.max_hours] = CODE["timeout"]
    reason[(mem_total > space.capacity_bytes[:, None])[:, :, None].repeat(2, axis=2)] = CODE["memory"]
    host_need = space.gpus_per_node * a.host.ram_bytes_per_gpu_process + p * a.host.ram_bytes_per_parameter
    host_bad = ~space.host_vcpus_ok | (~space.is_cpu & (host_need > space.host_ram_bytes))
    reason[host_bad] = CODE["host"]
    reason[world > work.global_batch] = CODE["batch"]
    reason[~np.isfinite(hourly)] = CODE["quota"]
    reason[~in_region.any(axis=1)] = CODE["region"]
    reason[:, :, ~limits.spot_allowed] = CODE["spot_policy"]
    reason[space.end_of_support <= limits.today] = CODE["end_of_support"]
    if limits.max_gpus > 0:
        reason[space.gpu_total > limits.max_gpus] = CODE["max_gpus"]
    reason[~limits.config_allowed] = CODE["gpu_not_allowed"]
    reason[~space.variant_valid] = CODE["invalid"]

    objective, tiebreak = (hours, cost) if limits.fastest else (cost, hours)
    feasible = reason == 0
    return Evaluation(
        space=space, workload=work, limits=limits, fp32=fp32, micro_batch=micro, states=states, activations=acts,
        memory_total=mem_total, step=step, hours=hours, cost=cost, hourly=hourly, region=region, reason=reason,
        primary=np.where(feasible, objective, np.inf), secondary=np.where(feasible, tiebreak, np.inf),
    )
