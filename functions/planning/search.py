"""Evaluate one request over the whole candidate space at once (numpy), and pick the winner.

Candidates are indexed [config, variant, spot]; each gets a reason code (0 = feasible) from the first check it fails,
in the order of REASONS below, a duration, a cost (in the cheapest allowed region with quota for it) and so a rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from functions.planning.memory import total_bytes
from functions.planning.performance import run_hours, step_seconds
from functions.planning.space import STATIC_CODES, STATIC_PASS, Space
from functions.planning.workload import Workload

REASONS = (
    "feasible", "invalid", "gpu_not_allowed", "max_gpus", "end_of_support", "spot_policy", "region", "quota",
    "batch", "host", "memory", "timeout", "deadline", "budget",
)
CODE = {name: i for i, name in enumerate(REASONS)}
SPOT = np.array([0.0, 1.0])
PASS = len(REASONS)
assert all(CODE[k] == v for k, v in STATIC_CODES.items()) and STATIC_PASS == PASS, "space.py codes drifted"
INFEASIBLE = 1e300
"""Added to the objective of infeasible candidates: anything at or above it is not a plan."""


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
    """Every candidate of one request. Public arrays are views indexed [config], [config, variant] or
    [config, variant, spot]; the computation runs on contiguous [spot, variant, config] arrays (`*_svc`), where
    numpy's inner loops span all configurations instead of two spot prices."""

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
    """The objective (cost, or hours when fastest); >= INFEASIBLE where infeasible."""
    secondary: np.ndarray
    reason_svc: np.ndarray
    objective_svc: np.ndarray
    """The objective without the infeasibility penalty."""
    primary_svc: np.ndarray
    secondary_svc: np.ndarray
    memory_vc: np.ndarray

    @property
    def feasible(self) -> np.ndarray:
        return self.reason == 0

    def best(self) -> tuple[int, int, int] | None:
        """The winning (config, variant, spot): least primary, then least secondary, then on demand before Spot,
        then variant and configuration order."""
        primary = self.primary_svc
        low = primary.min()
        if low >= INFEASIBLE:
            return None
        ties = np.flatnonzero(primary.ravel() == low)
        flat = int(ties[np.argmin(self.secondary_svc.ravel()[ties])]) if ties.size > 1 else int(ties[0])
        s, v, c = np.unravel_index(flat, primary.shape)
        return int(c), int(v), int(s)


def failing(fail: np.ndarray, code: int) -> np.ndarray:
    """`code` where `fail`, PASS elsewhere, as int8 arithmetic (boolean-mask writes are several times slower)."""
    return np.int8(PASS) - np.int8(PASS - code) * fail.view(np.int8)


def evaluate(space: Space, work: Workload, limits: Limits) -> Evaluation:
    """Score every candidate of the space for this workload under these limits."""
    a = space.catalog.assumptions
    mode = space.modes["fp32" if limits.fp32_only else "auto"]
    p = float(work.parameters)
    world = space.world
    micro = -(-work.global_batch // world)

    states = p * mode.state_bytes_per_param  # [variant, config]
    acts = work.activation_bytes_per_sample * micro * mode.activation_factor
    gather = float(work.largest_layer_parameters) * mode.gather_bytes_per_param
    mem_total = total_bytes(states, acts, gather, space.context_bytes, a.memory.safety_margin_fraction)

    compute = work.flops_per_sample * micro / mode.effective_flops
    step = step_seconds(compute, p * mode.comm_seconds_per_param, a.compute.comm_overlap_fraction,
                        space.step_overhead)
    hours = run_hours(work.steps, step, a.job.startup_seconds, SPOT[:, None, None], a.job.spot_overhead_fraction)
    view = space.region_view(limits.region_mask)
    cost = hours * view.hourly

    # The reason is the first check (in REASONS order) a candidate fails: the least code over all failing checks.
    host_need = space.gpus_per_node * a.host.ram_bytes_per_gpu_process + p * a.host.ram_bytes_per_parameter
    config_code = failing(~space.host_vcpus_ok | (~space.is_cpu & (host_need > space.host_ram_bytes)), CODE["host"])
    config_code = np.minimum(config_code, failing(world > work.global_batch, CODE["batch"]))
    config_code = np.minimum(config_code, failing(space.end_of_support <= limits.today, CODE["end_of_support"]))
    if limits.max_gpus > 0:
        config_code = np.minimum(config_code, failing(space.gpu_total > limits.max_gpus, CODE["max_gpus"]))
    config_code = np.minimum(config_code, failing(~limits.config_allowed, CODE["gpu_not_allowed"]))
    code = np.minimum(view.static_code, config_code)
    code = np.minimum(code, failing(mem_total > space.capacity_bytes, CODE["memory"]))
    code = np.minimum(code, failing(~limits.spot_allowed, CODE["spot_policy"])[:, None, None])
    if limits.budget_usd > 0:
        code = np.minimum(code, failing(cost > limits.budget_usd, CODE["budget"]))
    if limits.deadline_hours is not None:
        code = np.minimum(code, failing(hours > limits.deadline_hours, CODE["deadline"]))
    if limits.max_hours > 0:
        code = np.minimum(code, failing(hours > limits.max_hours, CODE["timeout"]))
    reason = code * (code != PASS)  # PASS -> 0 (feasible)

    objective, tiebreak = (hours, cost) if limits.fastest else (cost, hours)
    penalty = INFEASIBLE * (reason != 0)
    primary, secondary = objective + penalty, tiebreak + penalty
    t = (2, 1, 0)
    return Evaluation(
        space=space, workload=work, limits=limits, fp32=mode.fp32, micro_batch=micro, states=states.T,
        activations=acts, memory_total=mem_total.T, step=step.T, hours=hours.transpose(t), cost=cost.transpose(t),
        hourly=view.hourly.transpose(t), region=view.region.transpose(t), reason=reason.transpose(t),
        primary=primary.transpose(t), secondary=secondary.transpose(t), reason_svc=reason, objective_svc=objective,
        primary_svc=primary, secondary_svc=secondary, memory_vc=mem_total,
    )
