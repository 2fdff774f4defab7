"""Words for the numbers: why each candidate lost, and what would make an infeasible request feasible."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from functions.planning.memory import STRATEGIES
from functions.planning.search import CODE, Evaluation
from functions.planning.space import VARIANT_SERVER, VARIANT_STRATEGY

STRATEGY_NAMES = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2 (SHARD_GRAD_OP)", "fsdp": "FSDP (FULL_SHARD)"}
PRECISION_NAMES = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class Candidate:
    """One hardware configuration as the planner saw it, with its best variant and why it won or lost."""

    machine_type: str
    accelerator_type: str | None
    accelerator_count: int
    replica_count: int
    strategy: str
    precision: str
    region: str | None
    spot: bool
    reduction_server_replicas: int
    estimated_hours: float | None
    estimated_cost_usd: float | None
    hourly_cost_usd: float | None
    memory_total_bytes: int
    gpu_memory_bytes: int
    feasible: bool
    chosen: bool
    reason: str

    @property
    def gpu_count(self) -> int:
        return self.accelerator_count * self.replica_count


def gb(value: float) -> str:
    return f"{value / 1e9:,.1f} GB"


def usd(value: float) -> str:
    return f"${value:,.2f}"


def precision_of(ev: Evaluation, c: int) -> str:
    return "fp32" if ev.fp32[c] else PRECISION_NAMES[int(ev.space.mixed_precision[c])]


def gpu_label(ev: Evaluation, c: int) -> str:
    shape = ev.space.configs[c].shape
    if shape.is_cpu_only:
        return f"CPU-only {shape.machine_type}"
    gpu = ev.space.catalog.gpus[shape.accelerator_type]
    return f"{ev.space.configs[c].gpus}x {gpu.display}"


def reason_text(ev: Evaluation, c: int, v: int, s: int, best: tuple[int, int, int] | None) -> str:
    """Why candidate (config, variant, spot) lost; "chosen" for the winner."""
    space, work, limits = ev.space, ev.workload, ev.limits
    code = int(ev.reason[c, v, s])
    cfg = space.configs[c]
    shape = cfg.shape
    strategy = STRATEGIES[int(VARIANT_STRATEGY[v])]
    if code == 0:
        if best is None or (c, v, s) == best:
            return "chosen"
        bc, bv, bs = best
        if limits.fastest:
            slower = ev.hours[c, v, s] - ev.hours[bc, bv, bs]
            if slower > 0:
                return f"slower by {slower:,.2f} h"
        extra = ev.cost[c, v, s] - ev.cost[bc, bv, bs]
        if extra > 0.005:
            pct = 100 * extra / ev.cost[bc, bv, bs] if ev.cost[bc, bv, bs] > 0 else 0
            return f"costlier by {usd(extra)} (+{pct:.0f}%)"
        return f"same cost, slower by {max(ev.hours[c, v, s] - ev.hours[bc, bv, bs], 0):,.2f} h"
    if code == CODE["gpu_not_allowed"]:
        if shape.is_cpu_only:
            return "CPU-only machine, but gpu_allowlist asks for GPUs"
        return f"{shape.accelerator_type} is not in gpu_allowlist"
    if code == CODE["max_gpus"]:
        return f"{cfg.gpus} GPUs exceed max_gpus {limits.max_gpus}"
    if code == CODE["end_of_support"]:
        gpu = space.catalog.gpus[shape.accelerator_type]
        return f"{gpu.display} reached end of support on {gpu.end_of_support}"
    if code == CODE["spot_policy"]:
        if s == 1 and limits.spot_allowed[0]:
            return "Spot not allowed (spot: never, or the trainer does not checkpoint)"
        return "on demand, but the request requires Spot" if s == 0 else "Spot not allowed"
    if code == CODE["region"]:
        return f"not offered in the allowed regions (offered in {', '.join(shape.regions)})"
    if code == CODE["quota"]:
        return _quota_text(ev, c, s)
    if code == CODE["batch"]:
        return f"global batch {work.global_batch} cannot feed {int(space.world[c])} GPUs (>= 1 sample each)"
    if code == CODE["host"]:
        a = space.catalog.assumptions.host
        need = cfg.shape.accelerator_count * a.ram_bytes_per_gpu_process + work.parameters * a.ram_bytes_per_parameter
        return (f"host {shape.machine_type} ({shape.vcpus} vCPUs, {shape.memory_gb:g} GB) is too small: needs "
                f">= {max(a.min_vcpus_per_node, shape.accelerator_count * a.min_vcpus_per_gpu)} vCPUs and "
                f"{gb(need)} RAM")
    if code == CODE["memory"]:
        unit = "per GPU" if not shape.is_cpu_only else "of RAM"
        return (f"needs {gb(ev.memory_total[c, v])} {unit} under {STRATEGY_NAMES[strategy]}, "
                f"has {gb(space.capacity_bytes[c])}")
    if code == CODE["timeout"]:
        return f"takes {ev.hours[c, v, s]:,.1f} h, past the {limits.max_hours:g} h job limit"
    if code == CODE["deadline"]:
        return (f"misses the deadline: takes {ev.hours[c, v, s]:,.1f} h, "
                f"{limits.deadline_hours:,.1f} h available")
    if code == CODE["budget"]:
        return f"over budget: costs {usd(ev.cost[c, v, s])}, budget {usd(limits.budget_usd)}"
    return "not a valid combination"


def _quota_text(ev: Evaluation, c: int, s: int) -> str:
    space, limits = ev.space, ev.limits
    cfg = space.configs[c]
    regions = [r for j, r in enumerate(space.regions) if space.offered[c, j] and limits.region_mask[j]]
    kind = cfg.shape.accelerator_type
    if kind is not None:
        best = max(space.quotas.gpu_limit(r, kind, bool(s)) for r in regions)
        if cfg.gpus > best:
            pool = "preemptible " if s else ""
            return f"over quota: needs {cfg.gpus} {pool}{kind} GPUs, the allowed regions allow at most {best}"
    best_cpu = max(space.quotas.cpu_limit(r) for r in regions)
    return f"over quota: needs {cfg.nodes * cfg.shape.vcpus} vCPUs, the allowed regions allow at most {best_cpu}"


def representatives(ev: Evaluation) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per config: its best variant and spot (feasible first, else the one that got furthest) and the order in which
    configs rank (feasible by objective, then the nearest misses)."""
    c_count = ev.reason.shape[0]
    reason = ev.reason.reshape(c_count, -1)
    score = np.where(reason == 0, 100, np.where(reason == CODE["invalid"], -1, reason))
    top = score.max(axis=1)
    value = (ev.hours if ev.limits.fastest else ev.cost).reshape(c_count, -1)
    value = np.where(np.isfinite(value), value, 1e300)
    pick = np.argmin(np.where(score == top[:, None], value, np.inf), axis=1)
    v, s = np.divmod(pick, ev.reason.shape[2])
    order = np.lexsort((value[np.arange(c_count), pick], -top))
    return order, v, s


def candidate(ev: Evaluation, c: int, v: int, s: int, best: tuple[int, int, int] | None) -> Candidate:
    space = ev.space
    shape = space.configs[c].shape
    region = int(ev.region[c, v, s])
    finite = bool(np.isfinite(ev.cost[c, v, s]))
    server = bool(VARIANT_SERVER[v])
    return Candidate(
        machine_type=shape.machine_type, accelerator_type=shape.accelerator_type,
        accelerator_count=shape.accelerator_count, replica_count=space.configs[c].nodes,
        strategy=STRATEGIES[int(VARIANT_STRATEGY[v])], precision=precision_of(ev, c),
        region=space.regions[region] if region >= 0 else None, spot=bool(s),
        reduction_server_replicas=int(space.server_replicas[c]) if server else 0,
        estimated_hours=float(ev.hours[c, v, s]) if np.isfinite(ev.hours[c, v, s]) else None,
        estimated_cost_usd=float(ev.cost[c, v, s]) if finite else None,
        hourly_cost_usd=float(ev.hourly[c, v, s]) if finite else None,
        memory_total_bytes=round(float(ev.memory_total[c, v])), gpu_memory_bytes=round(float(space.capacity_bytes[c])),
        feasible=bool(ev.reason[c, v, s] == 0), chosen=best == (c, v, s), reason=reason_text(ev, c, v, s, best),
    )
