"""Why a request is infeasible and what single change would make it feasible.

The planner re-evaluates the request with one constraint lifted at a time (deadline, budget, max_gpus, GPU
allowlist, regions, Spot policy, quota, job time limit, a pinned shape, the global batch) and reports each change
that yields a plan, with that plan. Over-memory requests also get the smallest sharded configuration that fits
("needs 140 GB per GPU under DDP; FSDP over 2+ H100 fits").
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import datetime

import numpy as np

from functions.planning.calibration import calibrated
from functions.planning.explain import gb, gpu_label, nearest_batches, reason_text, representatives, usd
from functions.planning.inputs import PlanInput
from functions.planning.limits import build_limits
from functions.planning.quotas import QuotaTable
from functions.planning.search import CODE, REASONS, Evaluation, evaluate
from functions.planning.space import AXIS_MODES, NO_PIN, space_for, variant_title
from functions.planning.workload import build_workload
from schemas.gpus import sm_name

LABELS = {
    "gpu_not_allowed": "not in the GPU allowlist",
    "image": "GPUs the run's image has no kernels for",
    "max_gpus": "over max_gpus",
    "end_of_support": "past end of support",
    "spot_policy": "against the Spot policy",
    "reservation": "not on the named reservation",
    "region": "not offered in the allowed regions",
    "not_sold": "not sold by Google in a way the request allows",
    "quota": "over quota",
    "batch": "a global batch that does not split evenly over the processes",
    "host": "host machine too small",
    "memory": "over memory",
    "timeout": "past the job time limit",
    "deadline": "miss the deadline",
    "budget": "over budget",
}
UNLIMITED = QuotaTable(default_cpus=10**9, default_gpus_on_demand=10**9, default_gpus_preemptible=10**9)


def _summary(ev: Evaluation, pick: tuple[int, int, int]) -> str:
    c, v, s = pick
    cfg = ev.space.configs[c]
    nodes = f" x{cfg.nodes} nodes" if cfg.nodes > 1 else ""
    region = ev.space.regions[int(ev.region[c, v, s])]
    mode = AXIS_MODES[s]
    spot = f" {mode.title}" if mode.preemptible else ""
    return (
        f"{gpu_label(ev, c)} ({cfg.shape.machine_type}{nodes}, {variant_title(int(v))},"
        f" {region}{spot}): {ev.hours[c, v, s]:,.1f} h, {usd(ev.cost[c, v, s])}"
    )


def _argbest(ev: Evaluation, values: np.ndarray) -> tuple[int, int, int] | None:
    masked = np.where(ev.reason == 0, values, np.inf)
    flat = int(np.argmin(masked))
    if not np.isfinite(masked.ravel()[flat]):
        return None
    c, v, s = np.unravel_index(flat, masked.shape)
    return int(c), int(v), int(s)


def _reevaluate(
    ev: Evaluation,
    inp: PlanInput,
    now: datetime,
    max_job_hours: float | None,
    quotas: QuotaTable | None = None,
    unpinned: bool = False,
) -> Evaluation:
    space = ev.space
    if quotas is not None or unpinned:
        space = space_for(space.catalog, quotas or space.quotas, space.regions[0], NO_PIN if unpinned else space.pin)
    work = ev.workload
    if inp.batch_size != work.global_batch:
        rebuilt = build_workload(inp, space.catalog.assumptions)
        work = rebuilt if work.calibration is None else calibrated(rebuilt, work.calibration)
    if work.calibration is not None and len(work.calibration.step_scale) != len(space.configs):
        work = dataclasses.replace(work, calibration=None)  # another space (unpinned): its configs differ
    limits = build_limits(space, inp, now, max_job_hours, ev.limits.memory_margin, job_regions=ev.limits.job_regions)
    limits = dataclasses.replace(
        limits, reservation=ev.limits.reservation, reservation_required=ev.limits.reservation_required
    )
    return evaluate(space, work, limits)


def _declared_memory_hint(ev: Evaluation, closest: int) -> str:
    """A declared memory figure that no candidate can hold: below the frozen weights' own size on every sharding
    (the figures contradict each other), or above every GPU's usable memory."""
    space, work = ev.space, ev.workload
    declared = work.measured_memory_bytes
    if work.frozen:
        mode = space.modes["fp32" if ev.limits.fp32_only else "auto"]
        weights = work.frozen * mode.frozen_bytes_per_param[: ev.variants]  # [variant, config]
        gpu = ~space.is_cpu[None, :] & ev.valid.T
        least = float(np.min(np.where(gpu, weights, np.inf)))
        if least > declared:
            return (
                f"the request's figures contradict each other: workload.memory_gib_per_gpu ({declared / 2**30:g} "
                f"GiB) is below the frozen weights' own size on every sharding planned: the {work.frozen:,} frozen "
                f"parameters (workload.parameters less workload.trainable_parameters) take at least "
                f"{least / 2**30:,.1f} GiB per GPU even under FSDP over the most GPUs allowed; correct "
                "workload.memory_gib_per_gpu (measured at the run's micro-batch), the parameter counts, or allow "
                "more GPUs"
            )
    gpus = np.flatnonzero(~space.is_cpu)
    largest = int(gpus[np.argmax(ev.usable[gpus])]) if gpus.size else closest
    if gpus.size and declared > ev.usable[largest]:
        return (
            f"workload.memory_gib_per_gpu ({declared / 2**30:g} GiB) is more than any GPU holds: the largest, "
            f"{gpu_label(ev, largest)}, has {gb(ev.usable[largest])} usable; measure it again at a smaller "
            "micro-batch, or leave it out for the memory model"
        )
    return (
        f"the declared workload.memory_gib_per_gpu ({declared / 2**30:g} GiB) fits no GPU the other checks allow; "
        f"nearest: {gpu_label(ev, closest)} ({space.configs[closest].shape.machine_type}) with "
        f"{gb(ev.usable[closest])} usable"
    )


def _memory_hint(ev: Evaluation, closest: int) -> str:
    space = ev.space
    if ev.workload.measured_memory_bytes > 0:
        return _declared_memory_hint(ev, closest)
    if space.pin.active:
        # A pinned shape: say what it holds and what it would need; the fixes name the shape that fits.
        valid = np.where(ev.valid[closest], ev.memory_total[closest], np.inf)
        v = int(np.argmin(valid))
        strategy = variant_title(int(v))
        return (
            f"pinned {space.pin.describe()}: {gpu_label(ev, closest)} ({space.configs[closest].shape.machine_type}"
            f") has {gb(ev.usable[closest])} usable per GPU ({gb(space.capacity_bytes[closest])} less the "
            f"{ev.limits.memory_margin:.0%} margin) of the {gb(float(valid[v]))} needed even under {strategy} "
            "at micro-batch 1"
        )
    if space.configs[closest].shape.is_cpu_only:
        # the nearest GPU configuration that got as far as the memory check, else the biggest GPU
        order, variants, spots = representatives(ev)
        over = [
            c for c in order.tolist() if not space.is_cpu[c] and ev.reason[c, variants[c], spots[c]] == CODE["memory"]
        ]
        gpu_rows = np.flatnonzero(~space.is_cpu)
        closest = over[0] if over else int(gpu_rows[np.argmax(space.capacity_bytes[gpu_rows])])
    ddp_need = float(ev.memory_total[closest, 0])
    fits = (ev.memory_total <= ev.usable[:, None]) & ev.valid & ~space.is_cpu[:, None]
    fits &= (space.end_of_support > ev.limits.today)[:, None]
    if not fits.any():
        biggest = int(np.argmax(np.where(space.is_cpu, -1, space.world * space.capacity_bytes)))
        least = float(ev.memory_total[biggest].min())
        return (
            f"needs {gb(ddp_need)} per GPU under DDP even at micro-batch 1; even the largest configuration "
            f"({gpu_label(ev, biggest)}) needs {gb(least)} per GPU: use a smaller model or sequence"
        )
    kind = space.kind[closest]
    same = fits & (space.kind == kind)[:, None]
    pool = same if same.any() else fits
    worlds = np.where(pool, space.world[:, None], np.iinfo(np.int64).max)
    c, v = (int(i) for i in np.unravel_index(int(np.argmin(worlds)), worlds.shape))
    gpu = space.catalog.gpus[space.configs[c].shape.gpu_kind]
    strategy = variant_title(int(v))
    return (
        f"needs {gb(ddp_need)} per GPU under DDP on {gpu_label(ev, closest)} even at micro-batch 1 "
        f"({gb(ev.usable[closest])} usable of {gb(space.capacity_bytes[closest])} each); {strategy} over "
        f"{int(space.world[c])}+ {gpu.display} fits"
    )


def _same_kind_best(ev: Evaluation, kind: str | None) -> tuple[int, int, int] | None:
    """The best feasible candidate on this accelerator kind, else the best overall."""
    same = ev.space.kind == (ev.space.kinds.index(kind) if kind in ev.space.kinds else -1)
    pick = _argbest(ev, np.where(same[:, None, None], ev.primary, np.inf))
    return pick or ev.best()


def rejection_text(ev: Evaluation, inp: PlanInput, now: datetime, max_job_hours: float | None) -> str:
    """One paragraph: what blocked every candidate, the nearest miss, and the changes that would make it feasible."""
    space, limits = ev.space, ev.limits
    order, v, s = representatives(ev)
    rows = np.arange(len(space.configs))
    codes = ev.reason[rows, v, s]
    per_code = np.bincount(codes, minlength=len(REASONS))
    counts = Counter({REASONS[i]: int(n) for i, n in enumerate(per_code) if n})
    summary = ", ".join(f"{n} {LABELS.get(name, name)}" for name, n in counts.most_common())
    # Lifting one constraint can only rescue a candidate whose first failed check is that constraint.
    blocked = {REASONS[i] for i, n in enumerate(np.bincount(ev.reason.ravel(), minlength=len(REASONS))) if n}
    parts = [f"no plan meets the request: of {len(rows)} machine configurations, {summary}"]
    if limits.reservation_required and limits.reservation is not None:
        parts.append(
            f"the request names reservation {limits.reservation.describe()}: a plan must run on it, within its "
            f"{limits.reservation.count} machine{'s' if limits.reservation.count > 1 else ''}"
        )
    unknown_regions = [r for r in inp.regions if r not in space.regions]
    if unknown_regions:
        parts.append(f"regions not in the catalog: {', '.join(unknown_regions)} (known: {', '.join(space.regions)})")
    unknown_gpus = [g for g in inp.gpu_allowlist if g not in space.kinds]
    if unknown_gpus:
        parts.append(
            f"gpu_allowlist names unknown accelerator types: {', '.join(unknown_gpus)} "
            f"(known: {', '.join(space.kinds)})"
        )
    if limits.deadline_hours is not None and limits.deadline_hours <= 0:
        parts.insert(0, f"the deadline {inp.deadline:%Y-%m-%dT%H:%M:%SZ} has already passed")
    closest = int(order[0])
    if int(codes[closest]) == CODE["memory"]:
        parts.append(_memory_hint(ev, closest))
    else:
        parts.append(
            f"nearest: {gpu_label(ev, closest)} ({space.configs[closest].shape.machine_type}) "
            f"{reason_text(ev, closest, int(v[closest]), int(s[closest]), None)}"
        )
    fixes: list[str] = []
    if inp.deadline is not None and "deadline" in blocked:
        relaxed = _reevaluate(
            ev, dataclasses.replace(inp, deadline=None, budget_usd=inp.budget_usd), now, max_job_hours
        )
        pick = _argbest(relaxed, relaxed.hours)
        if pick:
            fixes.append(
                f"a deadline at least {relaxed.hours[pick]:,.1f} h away (now "
                f"{limits.deadline_hours:,.1f} h): {_summary(relaxed, pick)}"
            )
    if inp.budget_usd > 0 and "budget" in blocked:
        relaxed = _reevaluate(ev, dataclasses.replace(inp, budget_usd=0.0), now, max_job_hours)
        pick = _argbest(relaxed, relaxed.cost)
        if pick:
            fixes.append(f"a budget of at least {usd(relaxed.cost[pick])}: {_summary(relaxed, pick)}")
    if inp.max_gpus > 0 and "max_gpus" in blocked:
        relaxed = _reevaluate(ev, dataclasses.replace(inp, max_gpus=0), now, max_job_hours)
        pick = _argbest(relaxed, relaxed.space.gpu_total[:, None, None] * 1e9 + relaxed.cost)
        if pick:
            fixes.append(f"max_gpus of at least {int(relaxed.space.gpu_total[pick[0]])}: {_summary(relaxed, pick)}")
    if inp.gpu_allowlist and "gpu_not_allowed" in blocked:
        relaxed = _reevaluate(ev, dataclasses.replace(inp, gpu_allowlist=()), now, max_job_hours)
        pick = relaxed.best()
        if pick:
            kind = relaxed.space.configs[pick[0]].shape.accelerator_type or "CPU-only machines"
            fixes.append(f"allowing {kind}: {_summary(relaxed, pick)}")
    if inp.image_uri and "image" in blocked:
        relaxed = _reevaluate(ev, dataclasses.replace(inp, image_uri="", gpu_capabilities=()), now, max_job_hours)
        pick = relaxed.best()
        if pick and relaxed.space.configs[pick[0]].shape.accelerator_type:
            gpu = relaxed.space.catalog.gpus[relaxed.space.configs[pick[0]].shape.gpu_kind]
            fixes.append(
                f"an image with kernels for {sm_name(gpu.compute_capability)} ({gpu.display}; declared in "
                f"trainer.gpu_capabilities): {_summary(relaxed, pick)}"
            )
    if inp.regions and "region" in blocked:
        relaxed = _reevaluate(ev, dataclasses.replace(inp, regions=()), now, max_job_hours)
        pick = relaxed.best()
        if pick:
            fixes.append(
                f"allowing region {relaxed.space.regions[int(relaxed.region[pick])]}: {_summary(relaxed, pick)}"
            )
    if "spot_policy" in blocked:
        relaxed = _reevaluate(ev, dataclasses.replace(inp, spot="allowed", checkpointing=True), now, max_job_hours)
        pick = relaxed.best()
        if pick:
            fixes.append(f"spot: allowed (with a checkpointing trainer): {_summary(relaxed, pick)}")
    if "not_sold" in blocked and inp.flex_start != "allowed":
        relaxed = _reevaluate(ev, dataclasses.replace(inp, flex_start="allowed"), now, max_job_hours)
        pick = relaxed.best()
        if pick:
            fixes.append(f"flex_start: allowed (wait for Flex-start capacity): {_summary(relaxed, pick)}")
    if "quota" in blocked:
        relaxed = _reevaluate(ev, inp, now, max_job_hours, quotas=UNLIMITED)
        pick = relaxed.best()
        if pick:
            fixes.append(f"more quota: {_summary(relaxed, pick)}")
    if "timeout" in blocked:
        relaxed = _reevaluate(ev, inp, now, 0.0)
        pick = relaxed.best()
        if pick:
            fixes.append(
                f"a job time limit above {relaxed.hours[pick]:,.0f} h (now {limits.max_hours:g} h): "
                f"{_summary(relaxed, pick)}"
            )
    if space.pin.active:
        relaxed = _reevaluate(
            ev,
            dataclasses.replace(inp, machine_type="", accelerator_count=0, replica_count=0),
            now,
            max_job_hours,
            unpinned=True,
        )
        pick = _same_kind_best(relaxed, space.configs[closest].shape.accelerator_type)
        if pick:
            shape = relaxed.space.configs[pick[0]]
            nodes = f" x{shape.nodes}" if shape.nodes > 1 else ""
            fixes.append(
                f"{shape.shape.machine_type}{nodes} instead of the pinned {space.pin.describe()}: "
                f"{_summary(relaxed, pick)}"
            )
    if "batch" in blocked and (not fixes or int(codes[closest]) == CODE["batch"]):
        batch_codes = np.flatnonzero(codes[order] == CODE["batch"])
        if batch_codes.size:
            world = int(space.world[int(order[batch_codes[0]])])
            for batch in nearest_batches(inp.batch_size, world):
                relaxed = _reevaluate(ev, dataclasses.replace(inp, batch_size=batch), now, max_job_hours)
                pick = relaxed.best()
                if pick:
                    fixes.append(
                        f"global batch {batch} (splits evenly over {world} processes): {_summary(relaxed, pick)}"
                    )
    if fixes:
        parts.append("feasible with " + "; or ".join(fixes))
    elif int(codes[closest]) != CODE["memory"]:
        parts.append(
            "no single constraint change makes it feasible; relax several, or shrink the model, "
            "data, epochs or max_steps"
        )
    return ". ".join(parts)
