"""Words for the numbers: why each candidate lost, and what would make an infeasible request feasible."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from functions.planning.bands import band_of
from functions.planning.layouts import fp16_text, unsupported_text
from functions.planning.model_figures import model_figures
from functions.planning.search import CODE, INFEASIBLE, Evaluation, Limits
from functions.planning.space import (
    AXIS_MODES,
    DATA_VARIANTS,
    FP32_INDEX,
    SOLD_FLEX,
    SOLD_ON_DEMAND,
    VARIANT_PIPELINE,
    VARIANT_SERVER,
    VARIANT_STRATEGY,
    VARIANT_TENSOR,
    variant_title,
)
from schemas.plan import PlanAlternative
from schemas.vocabulary import FLEX_START, FP32, ON_DEMAND, PRECISIONS, RESERVATION, STRATEGIES


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
    bought: str = ON_DEMAND.tag
    """How its machines would be bought: the tag of its ConsumptionMode (on-demand, spot, flex-start where it is not
    sold on demand, reserved)."""
    p90_hours: float | None = None
    """Its p90 duration (functions/planning/bands.py); None where it has no estimate."""
    samples_per_second_per_gpu: float | None = None
    mfu: float | None = None
    figures_from: str = ""
    """functions/planning/model_figures.py."""
    tensor_parallel: int = 1
    pipeline_parallel: int = 1

    @property
    def gpu_count(self) -> int:
        return self.accelerator_count * self.replica_count


def duration(hours: float) -> str:
    """A time span as people say it: seconds under a minute, minutes under an hour, else hours."""
    if hours < 1 / 60:
        return f"{hours * 3600:,.0f} s"
    return f"{hours * 60:,.0f} min" if hours < 1 else f"{hours:,.1f} h"


def _pct(extra_usd: float, best_usd: float) -> str:
    return f" ({100 * extra_usd / best_usd:+.0f}%)" if best_usd > 0 else ""


def _loss_text(limits: Limits, slower_hours: float, extra_usd: float, best_usd: float) -> str:
    """Why a feasible candidate lost to the chosen one, in the terms of the objective that chose it."""
    if limits.fastest and slower_hours > 0:
        return f"slower by {slower_hours:,.2f} h"
    value = limits.value_of_time
    if not limits.fastest and value > 0:
        at = f"not worth it at {limits.value_text}/h"
        # A second or less either way is no difference in time: such a candidate lost on cost alone (below).
        if slower_hours * 3600 <= -1 and extra_usd > 0:  # faster but dearer: the time saved is worth less
            pct = f"+{100 * extra_usd / best_usd:.0f} % (+{usd(extra_usd)})" if best_usd > 0 else f"+{usd(extra_usd)}"
            return f"saves {duration(-slower_hours)} for {pct}: {at}"
        if slower_hours * 3600 >= 1 and extra_usd < 0:  # cheaper but slower: the money saved is worth less
            return f"saves {usd(-extra_usd)}{_pct(extra_usd, best_usd)} but takes {duration(slower_hours)} longer: {at}"
        if slower_hours * 3600 >= 1 and extra_usd > 0:
            return f"costlier by {usd(extra_usd)}{_pct(extra_usd, best_usd)} and slower by {duration(slower_hours)}"
    if extra_usd > 0:
        return f"costlier by {usd(extra_usd)}{_pct(extra_usd, best_usd)}"
    return f"same cost, slower by {max(slower_hours, 0.0):,.2f} h"


def gb(value: float) -> str:
    return f"{value / 1e9:,.1f} GB"


def usd(value: float) -> str:
    return f"${value:,.2f}" if abs(value) >= 1 else f"${value:.4f}"


def precision_of(ev: Evaluation, c: int) -> str:
    return FP32 if ev.fp32[c] else PRECISIONS[int(ev.space.mixed_precision[c])]


def gpu_label(ev: Evaluation, c: int) -> str:
    shape = ev.space.configs[c].shape
    if shape.is_cpu_only:
        return f"CPU-only {shape.machine_type}"
    gpu = ev.space.catalog.gpus[shape.gpu_kind]
    return f"{ev.space.configs[c].gpus}x {gpu.display}"


def reason_text(ev: Evaluation, c: int, v: int, s: int, best: tuple[int, int, int] | None) -> str:
    """Why candidate (config, variant, spot) lost; "chosen" for the winner."""
    space, work, limits = ev.space, ev.workload, ev.limits
    code = int(ev.reason[c, v, s])
    cfg = space.configs[c]
    shape = cfg.shape
    if code == 0:
        if best is None or (c, v, s) == best:
            return "chosen"
        return _loss_text(
            limits,
            float(ev.hours[c, v, s] + ev.wait[c, v, s] - ev.hours[best] - ev.wait[best]),
            float(ev.cost[c, v, s] - ev.cost[best]),
            float(ev.cost[best]),
        )
    if code == CODE["gpu_not_allowed"]:
        if shape.is_cpu_only:
            return "CPU-only machine, but gpu_allowlist asks for GPUs"
        return f"{shape.accelerator_type} is not in gpu_allowlist"
    if code == CODE["image"]:
        image = limits.image
        if not shape.is_cpu_only and not image.supports(space.catalog.gpus[shape.gpu_kind].compute_capability):
            return f"{image.missing(space.catalog.gpus[shape.gpu_kind].compute_capability)} ({shape.accelerator_type})"
        return (
            f"Reduction Server needs Google's NCCL plugin in the training image; {image.label} is not known to have it"
        )
    if code == CODE["max_gpus"]:
        return f"{cfg.gpus} GPUs exceed max_gpus {limits.max_gpus}"
    if code == CODE["end_of_support"]:
        gpu = space.catalog.gpus[shape.gpu_kind]
        return f"{gpu.display} reached end of support on {gpu.end_of_support}"
    if code == CODE["spot_policy"]:
        if s == 1 and limits.spot_allowed[0]:
            return "Spot not allowed (spot: never, or the trainer does not checkpoint)"
        return "on demand, but the request requires Spot" if s == 0 else "Spot not allowed"
    if code == CODE["reservation"]:
        return _reservation_text(ev, c)
    if code == CODE["region"]:
        return f"not offered in the allowed regions (offered in {', '.join(shape.regions)})"
    if code == CODE["not_sold"]:
        return not_sold_text(ev, c, v, s)
    if code == CODE["quota"]:
        return _quota_text(ev, c, s)
    if code == CODE["invalid"] and (pinned := layout_pin_text(limits, v)):
        return pinned
    if code == CODE["invalid"] and v >= DATA_VARIANTS:
        t, p = int(VARIANT_TENSOR[v]), int(VARIANT_PIPELINE[v])
        why = unsupported_text(work, t, p)
        if why:
            return why
        if shape.is_cpu_only:
            return "model parallelism splits a model over GPUs: a CPU-only machine has none"
        if precision_of(ev, c) == "fp16":
            return fp16_text(space.catalog.gpus[shape.gpu_kind].display)
        if shape.accelerator_count % t:
            return f"tensor parallel {t} does not fit {shape.accelerator_count} GPUs a machine: it must divide them"
        machines = f"{cfg.nodes} machine{'s' if cfg.nodes > 1 else ''}"
        return f"{p} pipeline stages do not fit {machines}: they must divide them"
    if code == CODE["batch"]:
        cut = int(VARIANT_TENSOR[v] * VARIANT_PIPELINE[v])
        return batch_text(work.global_batch, max(1, int(space.world[c]) // cut))
    if code == CODE["host"]:
        a = space.catalog.assumptions.host
        need = cfg.shape.accelerator_count * a.ram_bytes_per_gpu_process + work.parameters * a.ram_bytes_per_parameter
        return (
            f"host {shape.machine_type} ({shape.vcpus} vCPUs, {shape.memory_gb:g} GB) is too small: needs "
            f">= {max(a.min_vcpus_per_node, shape.accelerator_count * a.min_vcpus_per_gpu)} vCPUs and "
            f"{gb(need)} RAM"
        )
    if code == CODE["memory"]:
        unit = "per GPU" if not shape.is_cpu_only else "of RAM"
        checkpointed = ", checkpointed" if work.checkpointed_activation_bytes_per_sample > 0 else ""
        return (
            f"needs {gb(ev.memory_total[c, v])} {unit} under {variant_title(v)} even at micro-batch 1"
            f"{checkpointed}; {gb(ev.usable[c])} usable of {gb(space.capacity_bytes[c])}"
        )
    if code == CODE["timeout"]:
        return f"takes {ev.hours[c, v, s]:,.1f} h, past the {limits.max_hours:g} h job limit"
    if code == CODE["deadline"]:
        wait = float(ev.wait[c, v, s])
        waits = f" (with {wait:,.1f} h of expected capacity refusals)" if wait >= 0.05 else ""
        return (
            f"misses the deadline: takes {ev.hours[c, v, s] + wait:,.1f} h{waits}, "
            f"{limits.deadline_hours:,.1f} h available"
        )
    if code == CODE["budget"]:
        return f"over budget: costs {usd(ev.cost[c, v, s])}, budget {usd(limits.budget_usd)}"
    return "not a valid combination"


def layout_pin_text(limits: Limits, v: int) -> str:
    """Why variant v is not planned under the request's layout pins; "" when they allow it."""
    for name, pinned, degree in (
        ("tensor_parallel", limits.tensor_parallel, int(VARIANT_TENSOR[v])),
        ("pipeline_parallel", limits.pipeline_parallel, int(VARIANT_PIPELINE[v])),
    ):
        if pinned and pinned != degree:
            return f"constraints.{name} pins {pinned}; this variant has {degree}"
    return ""


def not_sold_text(ev: Evaluation, c: int, v: int, s: int) -> str:
    """Why Google sells no way of buying this candidate that the request allows."""
    shape = ev.space.configs[c].shape
    rule = ev.space.catalog.consumption.rule(shape.machine_type)
    mode = AXIS_MODES[s]
    text = f"{shape.machine_type} is not sold {mode.sold_as} (Google: {rule.sources[0]}); {rule.describe()}"
    flex_sold = bool(ev.space.sold[c, :, SOLD_FLEX].any())
    if not mode.preemptible and flex_sold:
        if not ev.limits.flex_allowed:
            text += f"; constraints.flex_start: allowed lets it wait for {FLEX_START.title} capacity"
        elif VARIANT_SERVER[v]:
            text += f"; {FLEX_START.title} takes no Reduction Server pool (one machine configuration in every pool)"
    return text


def _reservation_text(ev: Evaluation, c: int) -> str:
    cfg = ev.space.configs[c]
    reservation = ev.limits.reservation
    if reservation is None:
        return "not on the reservation the request names"
    if reservation.matches(cfg.shape) and cfg.nodes > reservation.count:
        return f"needs {cfg.nodes} machines; the named reservation {reservation.describe()} holds {reservation.count}"
    return f"not on the named reservation {reservation.describe()}"


def nearest_batches(batch: int, world: int) -> tuple[int, ...]:
    """The global batches nearest `batch` that `world` processes split evenly."""
    lower = batch - batch % world
    return tuple(b for b in (lower, lower + world) if b > 0)


def batch_text(batch: int, world: int) -> str:
    near = " or ".join(map(str, nearest_batches(batch, world)))
    return (
        f"global batch {batch} does not split evenly over {world} processes "
        f"(micro-batch x processes x accumulation must equal it); {near} would"
    )


def _quota_text(ev: Evaluation, c: int, s: int) -> str:
    space, limits = ev.space, ev.limits
    cfg = space.configs[c]
    regions = [r for j, r in enumerate(space.regions) if space.offered[c, j] and limits.region_mask[j]]
    kind = cfg.shape.accelerator_type
    # Spot, and Flex-start (the only way to buy some shapes without Spot), draw on preemptible quota.
    preemptible = AXIS_MODES[s].preemptible_quota or not any(
        space.sold[c, space.regions.index(r), SOLD_ON_DEMAND] for r in regions
    )
    if kind is not None:
        best = max(space.quotas.gpu_limit(r, kind, preemptible) for r in regions)
        if cfg.gpus > best:
            pool = "preemptible " if preemptible else ""
            return f"over quota: needs {cfg.gpus} {pool}{kind} GPUs, the allowed regions allow at most {best}"
    best_cpu = max(space.quotas.cpu_limit(r) for r in regions)
    return f"over quota: needs {cfg.nodes * cfg.shape.vcpus} vCPUs, the allowed regions allow at most {best_cpu}"


TIER_KEYS = np.array(
    [
        0.0 if code == 0 else 1000.0 * (99 if code == CODE["invalid"] else 1 + len(CODE) - code)
        for code in range(len(CODE))
    ]
)
"""Reason code -> its tier x 1000 in `representatives`' sort key."""


_CAPS: dict[tuple[int, ...], np.ndarray] = {}


def _cap_999(shape: tuple[int, ...]) -> np.ndarray:
    cap = _CAPS.get(shape)
    if cap is None:
        cap = _CAPS[shape] = np.full(shape, 999.0)
    return cap


def representatives(ev: Evaluation) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per config: its best (variant, spot): the best feasible one, else the one that got furthest through the
    checks (the latest REASONS code), cheapest (fastest; least memory per capacity when over memory) first; and
    the order in which configs rank: feasible by the objective, then the nearest misses."""
    reason = ev.reason_svc
    spots, variants, configs = reason.shape
    # One float key per candidate: the reason tier (feasible 0, then latest-failing first, invalid 99) x 1000 plus
    # log1p of the value (monotone, so the cheapest of a tier wins; inf costs cap at 999 within their tier); over
    # memory, log1p of the memory needed per usable byte instead.
    value = np.log1p(ev.objective_svc)
    np.minimum(value, _cap_999(value.shape), out=value)  # against an array: numpy's scalar bound is much slower
    key = TIER_KEYS[reason] + value
    memory = reason == CODE["memory"]
    if memory.any():
        key += memory * (np.log1p(ev.memory_vc / ev.usable) - value)
    flat = key.reshape(spots * variants, configs)
    pick = flat.argmin(axis=0)
    order = np.argsort(flat[pick, np.arange(configs)], kind="stable")
    s, v = np.divmod(pick, variants)
    return order, v, s


def top_configs(ev: Evaluation, count: int) -> list[tuple[int, int, int]]:
    """The `count` best-ranked (config, variant, spot) representatives, as `representatives` would order them.
    When enough configurations are feasible this ranks only those (by the objective) instead of every one."""
    spots, variants, configs = ev.primary_svc.shape
    flat = ev.primary_svc.reshape(spots * variants, configs)
    pick = flat.argmin(axis=0)
    best = flat[pick, np.arange(configs)]
    if count < configs and int((best < INFEASIBLE).sum()) >= count:
        head = np.argpartition(best, count - 1)[:count]
        head = head[np.argsort(best[head], kind="stable")]
        s, v = np.divmod(pick[head], variants)
        return list(zip(head.tolist(), v.tolist(), s.tolist(), strict=True))
    order, v, s = representatives(ev)
    return [(c, int(v[c]), int(s[c])) for c in order[:count].tolist()]


@dataclass(frozen=True)
class _Columns:
    """Field values of the rows for (config, variant, spot) picks, gathered from the arrays in bulk (as lists)."""

    hours: list[float]
    cost: list[float]
    hourly: list[float]
    region: list[int]
    code: list[int]
    memory: list[float]
    capacity: list[float]
    servers: list[int]
    precision: list[int]
    reasons: list[str]


def _columns(ev: Evaluation, picks: list[tuple[int, int, int]], best: tuple[int, int, int] | None) -> _Columns:
    cs, vs, ss = (np.array(x, dtype=np.int64) for x in zip(*picks, strict=True))
    space = ev.space
    hours = ev.hours[cs, vs, ss].tolist()
    cost = ev.cost[cs, vs, ss].tolist()
    code = ev.reason[cs, vs, ss].tolist()
    best_cost = float(ev.cost[best]) if best is not None else 0.0
    best_hours = float(ev.hours[best]) if best is not None else 0.0
    reasons = [
        _loss_text(ev.limits, hours[i] - best_hours, cost[i] - best_cost, best_cost)
        if code[i] == 0 and best is not None and pick != best
        else reason_text(ev, *pick, best)
        for i, pick in enumerate(picks)
    ]
    return _Columns(
        hours=hours,
        cost=cost,
        hourly=ev.hourly[cs, vs, ss].tolist(),
        region=ev.region[cs, vs, ss].tolist(),
        code=code,
        memory=ev.memory_total[cs, vs].tolist(),
        capacity=space.capacity_bytes[cs].tolist(),
        servers=(space.server_replicas[cs] * VARIANT_SERVER[vs]).tolist(),
        precision=np.where(ev.fp32[cs], FP32_INDEX, space.mixed_precision[cs]).tolist(),
        reasons=reasons,
    )


def _bought(ev: Evaluation, c: int, v: int, s: int, region: int) -> str:
    """The tag of the mode the candidate's machines would be bought in."""
    if AXIS_MODES[s].preemptible:
        return AXIS_MODES[s].tag
    if ev.reserved[c, v, s]:
        return RESERVATION.tag
    if region >= 0 and not ev.space.sold[c, region, SOLD_ON_DEMAND]:
        return FLEX_START.tag
    return AXIS_MODES[s].tag


def candidates(ev: Evaluation, picks: list[tuple[int, int, int]], best: tuple[int, int, int] | None) -> list[Candidate]:
    if not picks:
        return []
    space, col = ev.space, _columns(ev, picks, best)
    out = []
    for i, (c, v, s) in enumerate(picks):
        shape = space.configs[c].shape
        finite = col.cost[i] != np.inf
        shown = model_figures(ev, c, v)
        out.append(
            Candidate(
                machine_type=shape.machine_type,
                accelerator_type=shape.accelerator_type,
                accelerator_count=shape.accelerator_count,
                replica_count=space.configs[c].nodes,
                strategy=STRATEGIES[VARIANT_STRATEGY[v]],
                precision=PRECISIONS[col.precision[i]],
                region=space.regions[col.region[i]] if col.region[i] >= 0 else None,
                spot=bool(s),
                reduction_server_replicas=col.servers[i],
                estimated_hours=col.hours[i] if col.hours[i] != np.inf else None,
                estimated_cost_usd=col.cost[i] if finite else None,
                hourly_cost_usd=col.hourly[i] if finite else None,
                memory_total_bytes=round(col.memory[i]),
                gpu_memory_bytes=round(col.capacity[i]),
                feasible=col.code[i] == 0,
                chosen=best == (c, v, s),
                reason=col.reasons[i],
                bought=_bought(ev, c, v, s, col.region[i]),
                p90_hours=band_of(ev, c).p90(col.hours[i]) if col.hours[i] != np.inf else None,
                samples_per_second_per_gpu=shown.samples_per_second_per_gpu,
                mfu=shown.mfu,
                figures_from=shown.figures_from,
                tensor_parallel=int(VARIANT_TENSOR[v]),
                pipeline_parallel=int(VARIANT_PIPELINE[v]),
            )
        )
    return out


def alternatives(
    ev: Evaluation, picks: list[tuple[int, int, int]], best: tuple[int, int, int] | None
) -> list[PlanAlternative]:
    """The Plan record's ranked alternatives (rank 1 = runner-up)."""
    if not picks:
        return []
    space, col = ev.space, _columns(ev, picks, best)
    out = []
    for i, (c, v, s) in enumerate(picks):
        shape = space.configs[c].shape
        hours, cost = col.hours[i], col.cost[i]
        shown = model_figures(ev, c, v)
        out.append(
            PlanAlternative(
                rank=i + 1,
                machine_type=shape.machine_type,
                accelerator_type=shape.accelerator_type,
                accelerator_count=shape.accelerator_count,
                replica_count=space.configs[c].nodes,
                strategy=STRATEGIES[VARIANT_STRATEGY[v]],
                precision=PRECISIONS[col.precision[i]],
                region=space.regions[col.region[i]] if col.region[i] >= 0 else None,
                spot=bool(s),
                reduction_server_replicas=col.servers[i],
                estimated_hours=round(hours, 6) if hours != np.inf else None,
                estimated_cost_usd=round(cost, 6) if cost != np.inf else None,
                memory_total_bytes=round(col.memory[i]),
                feasible=col.code[i] == 0,
                reason=col.reasons[i],
                p90_hours=round(band_of(ev, c).p90(hours), 6) if hours != np.inf else None,
                samples_per_second_per_gpu=shown.samples_per_second_per_gpu,
                mfu=shown.mfu,
                figures_from=shown.figures_from,
                tensor_parallel=int(VARIANT_TENSOR[v]),
                pipeline_parallel=int(VARIANT_PIPELINE[v]),
            )
        )
    return out
