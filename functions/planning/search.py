"""Evaluate one request over the whole candidate space at once (numpy), and pick the winner.

Candidates are indexed [config, variant, spot]; each gets a reason code (0 = feasible) from the first check it fails,
in the order of REASONS below, a duration, a cost (in the cheapest allowed region with quota for it) and so a rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from functions.planning.memory import total_bytes
from functions.planning.performance import run_hours, step_seconds
from functions.planning.space import Space
from functions.planning.workload import Workload

REASONS = (
    "feasible", "invalid", "gpu_not_allowed", "max_gpus", "end_of_support", "spot_policy", "region", "quota",
    "batch", "host", "memory", "timeout", "deadline", "budget",
)
CODE = {name: i for i, name in enumerate(REASONS)}
SPOT = np.array([0.0, 1.0])
PASS = len(REASONS)


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
    """Score every candidate of the space for this workload under these limits."""
    a = space.catalog.assumptions
    mode = space.modes["fp32" if limits.fp32_only else "auto"]
    p = float(work.parameters)
    world = space.world
    micro = -(-work.global_batch // world)

    states = p * mode.state_bytes_per_param
    acts = work.activation_bytes_per_sample * micro * mode.activation_factor
    gather = float(work.largest_layer_parameters) * mode.gather_bytes_per_param
    context = np.where(space.is_cpu, a.memory.cpu_process_bytes, a.memory.cuda_context_bytes)[:, None]
    mem_total = total_bytes(states, acts[:, None], gather, context, a.memory.safety_margin_fraction)

    compute = work.flops_per_sample * micro / mode.effective_flops
    step = step_seconds(compute[:, None], p * mode.comm_seconds_per_param, a.compute.comm_overlap_fraction,
                        space.step_overhead[:, None])
    hours = run_hours(work.steps, step[:, :, None], a.job.startup_seconds, SPOT[None, None, :],
                      a.job.spot_overhead_fraction)
    view = space.region_view(limits.region_mask)
    cost = hours * view.hourly

    # Each check writes its code where it fails, lower-priority checks first so earlier REASONS overwrite them;
    # PASS marks "no failure" until the config-level and candidate-level codes are merged by minimum.
    config_code = np.full(len(world), PASS, dtype=np.int64)
    host_need = space.gpus_per_node * a.host.ram_bytes_per_gpu_process + p * a.host.ram_bytes_per_parameter
    config_code[~space.host_vcpus_ok | (~space.is_cpu & (host_need > space.host_ram_bytes))] = CODE["host"]
    config_code[world > work.global_batch] = CODE["batch"]
    config_code[view.not_offered] = CODE["region"]
    config_code[space.end_of_support <= limits.today] = CODE["end_of_support"]
    if limits.max_gpus > 0:
        config_code[space.gpu_total > limits.max_gpus] = CODE["max_gpus"]
    config_code[~limits.config_allowed] = CODE["gpu_not_allowed"]

    code = np.full(cost.shape, PASS, dtype=np.int64)
    if limits.budget_usd > 0:
        code[cost > limits.budget_usd] = CODE["budget"]
    if limits.deadline_hours is not None:
        code[hours > limits.deadline_hours] = CODE["deadline"]
    if limits.max_hours > 0:
        code[hours > limits.max_hours] = CODE["timeout"]
    code = np.where((mem_total > space.capacity_bytes[:, None])[:, :, None], CODE["memory"], code)
    code[view.quota_blocked] = CODE["quota"]
    code[:, :, ~limits.spot_allowed] = CODE["spot_policy"]
    code = np.minimum(code, config_code[:, None, None])
    code[~space.variant_valid] = CODE["invalid"]
    reason = np.where(code == PASS, 0, code)

    objective, tiebreak = (hours, cost) if limits.fastest else (cost, hours)
    feasible = reason == 0
    return Evaluation(
        space=space, workload=work, limits=limits, fp32=mode.fp32, micro_batch=micro, states=states,
        activations=acts, memory_total=mem_total, step=step, hours=hours, cost=cost, hourly=view.hourly,
        region=view.region, reason=reason, primary=np.where(feasible, objective, np.inf),
        secondary=np.where(feasible, tiebreak, np.inf),
    )
