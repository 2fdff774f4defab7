"""How a chosen candidate is to run on Vertex, and why: the batch split, activation checkpointing, the scheduling
strategy (FLEX_START when the request allows waiting), the timeout (from the p90 duration), restarts and the boot
disk.

Vertex's own rules (which GPU kinds FLEX_START takes, the disk a machine family takes, the 7-day limits) come from
schemas/data/vertex_jobs.json; Landfall's policy (the timeout margin) from assumptions.json or the planner config.
Every choice is written into the Plan's `reasons`, so the run record says why the job looks as it does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from functions.planning.explain import gb
from functions.planning.layouts import BUBBLE_MICRO_BATCHES_PER_STAGE
from functions.planning.model_parallel import pipeline_bubble
from functions.planning.search import Evaluation, share_divisors
from functions.planning.space import (
    AXIS_MODES,
    SOLD_ON_DEMAND,
    VARIANT_PIPELINE,
    VARIANT_SERVER,
    VARIANT_TENSOR,
    quota_pool,
)
from functions.planning.throughput import mfu_at
from schemas.vertex_jobs import BootDisk, VertexJobRules
from schemas.vocabulary import FLEX_START, ON_DEMAND, RESERVATION, ConsumptionMode


@dataclass(frozen=True)
class JobPolicy:
    """What the dispatcher decides about jobs, beyond the request."""

    rules: VertexJobRules
    timeout_margin: float
    """scheduling.timeout = (the p90 duration + one start-up) x this, at least min_timeout_seconds."""
    min_timeout_seconds: float
    flex_allowed: bool
    """The request's constraints.flex_start is "allowed"."""
    project: str = ""
    """The project jobs run in (a reservation's resource name)."""


@dataclass(frozen=True)
class JobChoices:
    mode: ConsumptionMode
    """How the job's machines are bought: the search's axis (on demand or Spot), or Flex-start when it waits, or the
    reservation it consumes."""
    max_wait_seconds: int
    timeout_seconds: int
    boot_disk: BootDisk
    reasons: tuple[str, ...]
    reservation: str = ""
    """The reservation's resource name when the job runs on one."""


def duration(seconds: float) -> str:
    """3 h 05 min, 45 min, 2 d 4 h."""
    minutes = max(1, round(seconds / 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    return f"{hours} h {mins:02d} min" if hours else f"{mins} min"


def batch_reasons(ev: Evaluation, c: int, v: int) -> list[str]:
    """The split of the global batch, and activation checkpointing when it is on."""
    space, work = ev.space, ev.workload
    cut = int(VARIANT_TENSOR[v] * VARIANT_PIPELINE[v])
    world = int(space.world[c]) // cut
    per = int(ev.per_process[c, v])
    micro, steps = int(ev.micro_batch[c, v]), int(ev.accumulation[c, v])
    unit = "of RAM" if space.is_cpu[c] else "per GPU"
    usable = float(ev.usable[c])
    fixed = float(ev.memory_total[c, v] - ev.activations[c, v])
    plain = work.activation_bytes_per_sample * (2.0 if ev.fp32[c] and not work.activations_at_run_precision else 1.0)
    text = (
        f"batch: global {work.global_batch} = micro-batch {micro} x {world} "
        f"{'data-parallel ' if cut > 1 else ''}process{'es' if world > 1 else ''} x {steps} "
        f"{'micro-batches per pipeline step' if VARIANT_PIPELINE[v] > 1 else 'accumulation step'}"
        f"{'s' if steps > 1 and VARIANT_PIPELINE[v] == 1 else ''}"
    )
    if cut > 1:
        text += f" (each process's samples trained by its {cut} GPUs of the model's layout together)"
    if steps > 1 and not ev.checkpointing[c, v]:
        text += (
            f"; each process's share of {per} in one pass would need {gb(fixed + plain * per)} {unit}, "
            f"over the {gb(usable)} usable"
        )
    reasons = [text, micro_batch_reason(ev, c, v)]
    if ev.checkpointing[c, v]:
        a = space.catalog.assumptions.memory
        reasons.append(
            f"activation checkpointing on: without it even a micro-batch of 1 needs {gb(fixed + plain)} {unit}, "
            f"over the {gb(usable)} usable; with it {gb(float(ev.memory_total[c, v]))} at micro-batch {micro}, for "
            f"about +{a.recompute_flops_fraction:.0%} compute (each block's forward runs again in the backward pass)"
        )
    return reasons


def _mfu_at_micro(ev: Evaluation, c: int, micro: int, cut: int = 1) -> float:
    """The time model's MFU for configuration c at `micro` samples per micro-step, of which each GPU runs 1/cut (a
    model-parallel layout's t x p) (functions/planning/throughput.py)."""
    space = ev.space
    log_work = np.log(np.array([[ev.workload.flops_per_sample * micro / cut]]))
    return float(mfu_at(space.log_work, space.mfu_base[c : c + 1], space.mfu_slopes[:, c : c + 1], log_work)[0, 0])


def micro_batch_reason(ev: Evaluation, c: int, v: int) -> str:
    """Why this micro-batch: the one of the share's divisors that trains the most samples per second within memory.

    The time model's MFU never falls as the work per micro-step grows (an isotonic fit of the measured points,
    functions/planning/throughput.py), and every micro-step pays the same fixed overhead, so among the divisors of a
    process's share that fit, the largest has the shortest step: the search takes it (search.py split_batch), and
    this says so with the figures of the next divisors either side."""
    space = ev.space
    micro, per = int(ev.micro_batch[c, v]), int(ev.per_process[c, v])
    stages = int(VARIANT_PIPELINE[v])
    if stages > 1:
        m = int(ev.accumulation[c, v])
        return (
            f"micro-batch {micro}: {m} micro-batches per pipeline step over {stages} stages (at least "
            f"{BUBBLE_MICRO_BATCHES_PER_STAGE} per stage where the share of {per} allows, else one) keep the 1F1B "
            f"bubble at (p-1)/(m+p-1) = {pipeline_bubble(stages, m):.0%} of the step"
        )
    cut = int(VARIANT_TENSOR[v] * VARIANT_PIPELINE[v])
    data_world = np.maximum(space.world[c : c + 1] // cut, 1)
    divisors = [int(d) for d in share_divisors(ev.workload.global_batch, data_world)[:, 0] if d < np.inf]
    smaller = [d for d in divisors if d < micro]
    larger = [d for d in divisors if d > micro]
    text = (
        f"micro-batch {micro}: the largest divisor of the share that fits, so the most samples per second: the time "
        f"model's MFU does not fall as the work per micro-step grows ({_mfu_at_micro(ev, c, micro, cut):.1%} at {micro}"
    )
    if smaller:
        text += f", {_mfu_at_micro(ev, c, smaller[-1], cut):.1%} at {smaller[-1]}"
    text += ") and fewer micro-steps pay the fixed overhead of one fewer times"
    if not larger:
        return text + f"; it is the whole share of {per} in one pass"
    if ev.workload.measured_memory_bytes > 0:
        return text + f"; {larger[0]} is not taken: the measured memory holds for the micro-batch it was measured at"
    unit = "of RAM" if space.is_cpu[c] else "per GPU"
    fixed = float(ev.memory_total[c, v] - ev.activations[c, v])
    need = fixed + float(ev.activations[c, v]) / micro * larger[0]
    return text + f"; {larger[0]} would need {gb(need)} {unit}, over the {gb(float(ev.usable[c]))} usable"


def _flex(
    ev: Evaluation, c: int, v: int, s: int, region: str, hours: float, policy: JobPolicy, required: bool = False
) -> tuple[int, str]:
    """(max wait in seconds, or 0 for no FLEX_START; the reason either way). `required`: the shape is sold without
    Spot only as Flex-start there (the search admitted it as such), so only the wait is chosen."""
    space, rules = ev.space, policy.rules
    cfg = space.configs[c]
    kind = cfg.shape.accelerator_type
    if required:
        rule = space.catalog.consumption.rule(cfg.shape.machine_type)
        wait = float(rules.flex_default_max_wait_seconds)
        if ev.limits.deadline_hours is not None:
            wait = max(60.0, min(wait, (ev.limits.deadline_hours - hours) * 3600.0))
        return int(wait), (
            f"FLEX_START: Google does not sell {cfg.shape.machine_type} on demand ({rule.describe()}; "
            f"{rule.sources[0]}); waits up to {duration(wait)} for all {cfg.nodes} machine"
            f"{'s' if cfg.nodes > 1 else ''} at once (Dynamic Workload Scheduler), on preemptible quota; cost shown "
            "at on-demand prices"
        )
    if s:
        return 0, "flex-start not used: the plan runs on Spot, a scheduling strategy of its own"
    if kind is None or not rules.flex_start_offered(kind):
        offered = ", ".join(rules.flex_start_kinds)
        return 0, f"flex-start not used: Vertex offers FLEX_START for {offered}, not {kind or 'CPU-only machines'}"
    if VARIANT_SERVER[v]:
        return 0, (
            "flex-start not used: the Reduction Server pool runs on other machines and FLEX_START needs the "
            "same machine configuration in every pool"
        )
    preemptible = space.quotas.gpu_limit(region, kind, True)
    if cfg.gpus > preemptible:
        return 0, (
            f"flex-start not used: it draws on preemptible quota, which allows {preemptible} {kind} in "
            f"{region}; the plan needs {cfg.gpus}"
        )
    wait = float(rules.flex_default_max_wait_seconds)
    deadline = ev.limits.deadline_hours
    if deadline is not None:
        slack = (deadline - hours) * 3600.0
        if slack < 60:
            return 0, "flex-start not used: the deadline leaves no time to wait for capacity"
        wait = min(wait, slack)
    within = " (what the deadline leaves)" if wait < rules.flex_default_max_wait_seconds else ""
    return int(wait), (
        f"FLEX_START: waits up to {duration(wait)}{within} for all {cfg.nodes} machine"
        f"{'s' if cfg.nodes > 1 else ''} at once (Dynamic Workload Scheduler), on preemptible quota; "
        "cost shown at on-demand prices"
    )


@dataclass(frozen=True)
class Estimate:
    """A candidate's duration as the timeout and the waits read it."""

    p50_hours: float
    """The model's estimate, start-up included."""
    p90_hours: float
    """Its p90 (functions/planning/bands.py)."""
    startup_seconds: float
    """The start-up inside it (assumed, or measured for this workload on this shape)."""


def _timeout(
    estimate: Estimate, hourly: float, budget: float, limit_seconds: int, policy: JobPolicy
) -> tuple[int, str]:
    """scheduling.timeout: the p90 duration plus one more start-up (what one restart costs: a Spot preemption or a
    worker restart before the end), x the margin (1 unless configured), at least the minimum; capped by what the
    budget pays and by Vertex's limit; never below the p50 estimate itself."""
    p50, p90 = estimate.p50_hours * 3600.0, estimate.p90_hours * 3600.0
    base = (p90 + estimate.startup_seconds) * policy.timeout_margin
    seconds = max(base, policy.min_timeout_seconds)
    margin = f", x {policy.timeout_margin:g}" if policy.timeout_margin != 1 else ""
    why = [f"the {duration(p90)} p90 + {duration(estimate.startup_seconds)} for one restart's start-up{margin}"]
    if seconds > base:
        why.append(f"at least {duration(policy.min_timeout_seconds)}")
    pays = budget / hourly * 3600.0 if budget > 0 and hourly > 0 else math.inf
    if pays < seconds:
        seconds = pays
        why.append(f"capped at what the ${budget:,.2f} budget pays at ${hourly:,.2f}/h")
    if seconds > limit_seconds:
        seconds = limit_seconds
        why.append(f"capped at Vertex's limit of {duration(limit_seconds)}")
    seconds = int(min(max(seconds, math.ceil(p50)), limit_seconds))
    return seconds, (
        f"timeout {duration(seconds)} ({'; '.join(why)}): a hung job stops there instead of billing "
        "for Vertex's default 7 days"
    )


def job_choices(
    ev: Evaluation, pick: tuple[int, int, int], region: str, estimate: Estimate, hourly: float, policy: JobPolicy
) -> JobChoices:
    c, v, s = pick
    rules = policy.rules
    cfg = ev.space.configs[c]
    reasons = batch_reasons(ev, c, v)
    wait, flex_text = (0, "")
    reserved = bool(ev.reserved[c, v, s]) and region == ev.space.regions[int(ev.region[c, v, s])]
    reservation = ev.limits.reservation
    if reserved and reservation is not None:
        flex_text = (
            f"reservation {reservation.describe()}: the job consumes it (reservationAffinity SPECIFIC_RESERVATION); "
            f"its {cfg.nodes} machine{'s' if cfg.nodes > 1 else ''} of {reservation.count} reserved are already "
            "paid for (Google bills a reservation whether or not it is used), so no machine cost is counted"
        )
    elif policy.flex_allowed:
        j = ev.space.regions.index(region)
        # not sold on demand there (or not within on-demand quota): the search admitted it as Flex-start
        pool = quota_pool(ON_DEMAND)
        required = not s and not (
            ev.space.sold[c, j, SOLD_ON_DEMAND] and ev.space.quota_ok[c, j, pool, int(VARIANT_SERVER[v])]
        )
        wait, flex_text = _flex(ev, c, v, s, region, estimate.p50_hours, policy, required)
    limit = rules.flex_max_timeout_seconds if wait else rules.default_timeout_seconds
    timeout, timeout_text = _timeout(estimate, hourly, ev.limits.budget_usd, limit, policy)
    mode = RESERVATION if reserved else FLEX_START if wait else AXIS_MODES[s]
    on = " on a reservation" if mode.reserved else ""
    reasons.append(f"scheduling: {mode.scheduling_strategy}{on}; {timeout_text}")
    if flex_text:
        reasons.append(flex_text)
    if cfg.nodes > 1 and rules.restart_multi_node:
        machines = "both machines" if cfg.nodes == 2 else f"all {cfg.nodes} machines"
        reasons.append(
            f"restart_job_on_worker_restart: a restarted worker cannot rejoin a running process group, so "
            f"{machines} restart together and resume from the newest checkpoint"
        )
    disk = rules.boot_disk(cfg.shape.machine_type)
    if disk.why:
        reasons.append(f"boot disk {disk.type} {disk.size_gb} GB: {disk.why}")
    return JobChoices(
        mode=mode,
        max_wait_seconds=wait,
        timeout_seconds=timeout,
        boot_disk=disk,
        reasons=tuple(reasons),
        reservation=reservation.resource_name(policy.project) if reserved and reservation is not None else "",
    )
