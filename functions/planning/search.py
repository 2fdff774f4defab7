"""Evaluate one request over the whole candidate space at once (numpy), and pick the winner.

Candidates are indexed [config, variant, spot]; each gets a reason code (0 = feasible) from the first check it fails,
in the order of REASONS below, a duration, a cost (in the cheapest allowed region with quota for it) and so a rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from functions.planning import layouts
from functions.planning.images import ImageSupport
from functions.planning.memory import total_bytes, usable_bytes
from functions.planning.performance import run_hours, step_seconds
from functions.planning.reservations import Reservation
from functions.planning.risk import (
    NO_HISTORY,
    CapacityHistory,
    lost_per_preemption_seconds,
    preemption_overhead,
    risk_tables,
)
from functions.planning.space import (
    AXIS_MODES,
    DATA_VARIANTS,
    STATIC_CODES,
    STATIC_PASS,
    VARIANT_PIPELINE,
    VARIANT_SERVER,
    VARIANT_TENSOR,
    VARIANTS,
    Space,
)
from functions.planning.throughput import mfu_at
from functions.planning.workload import Workload
from schemas.vocabulary import PRECISION_INDEX

FP16_INDEX = PRECISION_INDEX["fp16"]

REASONS = (
    "feasible",
    "invalid",
    "gpu_not_allowed",
    "image",
    "max_gpus",
    "end_of_support",
    "spot_policy",
    "reservation",
    "region",
    "not_sold",
    "quota",
    "batch",
    "host",
    "memory",
    "timeout",
    "deadline",
    "budget",
)
CODE = {name: i for i, name in enumerate(REASONS)}
PREEMPTIBLE = np.array([float(mode.preemptible) for mode in AXIS_MODES])
"""[spot]: 1 where the axis's mode may be preempted (its runs take the expected preemption overhead)."""
PASS = len(REASONS)
assert all(CODE[k] == v for k, v in STATIC_CODES.items()) and STATIC_PASS == PASS, "space.py codes drifted"
INFEASIBLE = 1e300
"""Added to the objective of infeasible candidates: anything at or above it is not a plan."""


@dataclass(frozen=True)
class Limits:
    """The request's constraints in array form, for one space."""

    region_mask: np.ndarray
    """[region]: allowed by the request and among job_regions."""
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
    """Objective: the shortest run (constraints.prefer fastest); False: value_of_time decides."""
    fp32_only: bool
    memory_margin: float
    """Share of each GPU's memory kept free."""
    image: ImageSupport
    """The run's image: which GPUs it runs on, whether it has Reduction Server's plugin."""
    image_ok: np.ndarray
    """[config]: the image carries kernels for the machine's GPU (always for CPU-only)."""
    flex_allowed: bool = False
    """The request lets a job wait for capacity (FLEX_START): shapes sold only as Flex-start become plannable."""
    reservation: Reservation | None = None
    """The reservation the plan may run on (the request's, else the settings' one the request can use)."""
    reservation_required: bool = False
    """The request names the reservation: only candidates on it are plans."""
    value_of_time: float = 0.0
    """US dollars an hour sooner is worth: the objective is cost + this x hours (0: the cheapest; prefer cheapest)."""
    value_is_default: bool = False
    """value_of_time is assumptions.json's default (constraints.prefer left out)."""
    value_text: str = ""
    """value_of_time as the explanations write it: "$50", "$12.50"."""
    job_regions: tuple[str, ...] = ()
    """Regions with a deployed artifacts bucket and image repository (PlannerConfig.job_regions): no plan leaves
    them, whatever a relaxed request would allow; () = every region of the catalog."""
    capacity: CapacityHistory = NO_HISTORY
    """What Landfall's jobs met per GPU kind, region and sale mode (PlannerConfig.capacity): Spot's preemption rate
    and the share of tries refused, priced by functions/planning/risk.py."""
    tensor_parallel: int = 0
    """The tensor-parallel degree the request pins (constraints.tensor_parallel; 1 = none); 0 = free."""
    pipeline_parallel: int = 0
    """The pipeline stages the request pins (constraints.pipeline_parallel; 1 = none); 0 = free."""

    def score(self, hours: Any, cost: Any) -> tuple[Any, Any]:
        """(objective, tiebreak) of candidates with these hours and costs (arrays or numbers): hours then cost when
        fastest; else cost + value_of_time x hours, then hours (the cheapest when the value is 0)."""
        if self.fastest:
            return hours, cost
        if self.value_of_time > 0:
            if isinstance(hours, np.ndarray):  # one temporary, not two: this runs on every candidate of a request
                objective = hours * self.value_of_time
                objective += cost
                return objective, hours
            return cost + self.value_of_time * hours, hours
        return cost, hours


@dataclass(frozen=True, eq=False)
class Evaluation:
    """Every candidate of one request. Public arrays are views indexed [config], [config, variant] or
    [config, variant, spot]; the computation runs on contiguous [spot, variant, config] arrays (`*_svc`), where
    numpy's inner loops span all configurations instead of two spot prices."""

    space: Space
    workload: Workload
    limits: Limits
    fp32: np.ndarray
    usable: np.ndarray
    """[config] bytes a plan may fill per GPU (capacity less the margin)."""
    per_process: np.ndarray
    """[config, variant] samples of the global batch per data-parallel process (rounded up where it does not divide:
    a batch failure); a model-parallel variant's processes share theirs with the rest of their tensor group and
    pipeline."""
    micro_batch: np.ndarray
    """[config, variant] samples per process per micro-step; the largest divisor of per_process that fits (1 where
    none fits: memory then fails and reports the need at one sample)."""
    accumulation: np.ndarray
    """[config, variant] micro-steps per optimizer step."""
    checkpointing: np.ndarray
    """[config, variant] activation checkpointing on (only where no micro-batch fits without it)."""
    states: np.ndarray
    activations: np.ndarray
    """[config, variant] activations of one micro-batch."""
    memory_total: np.ndarray
    mfu: np.ndarray
    """[config, variant] the MFU assumed (throughput model at the work of one micro-step)."""
    step: np.ndarray
    hours: np.ndarray
    """[config, variant, spot] the job's expected wall hours: start-up, steps and, on Spot, the expected preemptions'
    overhead in the chosen region (billed)."""
    overhead: np.ndarray
    """[config, variant, spot] that overhead as a share of the hours without it (0 on demand)."""
    wait: np.ndarray
    """[config, variant, spot] hours of expected capacity refusals before a try succeeds in the chosen region: counted
    against the deadline and the objective, not billed (functions/planning/risk.py)."""
    cost: np.ndarray
    hourly: np.ndarray
    region: np.ndarray
    """Index into space.regions; -1 where no allowed region has the shape within quota."""
    reserved: np.ndarray
    """[config, variant, spot] runs on limits.reservation (no machine cost)."""
    reason: np.ndarray
    primary: np.ndarray
    """The objective (Limits.score: cost + value of time x hours, cost, or hours when fastest); >= INFEASIBLE where
    infeasible."""
    secondary: np.ndarray
    reason_svc: np.ndarray
    objective_svc: np.ndarray
    """The objective without the infeasibility penalty."""
    primary_svc: np.ndarray
    secondary_svc: np.ndarray
    memory_vc: np.ndarray
    layout_seconds: np.ndarray
    """[config, variant] seconds per step a model-parallel layout's own traffic adds (tensor all-reduces, pipeline
    sends; functions/planning/layouts.py); 0 for the data-parallel variants."""
    bubble: np.ndarray
    """[config, variant] the 1F1B pipeline bubble's share of the step (0 without a pipeline)."""
    valid: np.ndarray
    """[config, variant] the variant exists on the configuration (Space.variant_valid) and the workload can run it
    (functions/planning/layouts.py)."""

    @property
    def variants(self) -> int:
        """Variants searched: the data-parallel ones, and the model-parallel layouts where the workload runs any."""
        return int(self.valid.shape[1])

    def in_region(self, c: int, v: int, s: int, j: int) -> tuple[float, float]:
        """(hours, wait) of candidate (c, v, s) run in region j instead of its chosen one: its Spot overhead and
        refusals are those of j (functions/planning/risk.py)."""
        space, a = self.space, self.space.catalog.assumptions
        risk = risk_tables(space.regions, space.kinds, self.limits.capacity, a.job)
        kind = int(space.kind[c]) if space.kind[c] >= 0 else len(space.kinds)
        base = float(self.hours[c, v, s]) / (1.0 + float(self.overhead[c, v, s]))
        if not s:
            return base, float(risk.wait_hours[0, j, kind])
        startup = a.job.startup_seconds
        calibration = self.workload.calibration
        if calibration is not None:
            startup = calibration.startup_seconds[c]
        loss = float(lost_per_preemption_seconds(startup, a.checkpoints.spot_max_lost_minutes)) / 3600.0
        overhead = float(preemption_overhead(risk.preemption_rate[j, kind], space.nodes[c], loss))
        return base * (1.0 + overhead), float(risk.wait_hours[1, j, kind])

    @property
    def feasible(self) -> np.ndarray:
        feasible: np.ndarray = self.reason == 0  # numpy types an array's == as Any
        return feasible

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


def _divisors(n: int) -> np.ndarray:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return np.array(sorted({*small, *(n // d for d in small)}), dtype=np.int64)


LOOKUP_LIMIT = 1 << 16
"""Most entries a batch's micro-batch lookup table may hold (one per sample count up to each distinct share)."""


@dataclass(frozen=True, eq=False)
class BatchSplit:
    """How a global batch divides over each configuration's processes; the same for every request with that batch
    (cached per batch and world array: requests reuse a few)."""

    per_process: np.ndarray
    """[config] samples per process, rounded up (where the processes do not divide the batch: a batch failure)."""
    divisible: np.ndarray
    """[config] the processes divide the global batch."""
    divisors: np.ndarray
    """[k, config] the divisors of each process's share, ascending, padded with inf; a column of inf where the
    batch does not divide."""
    largest: np.ndarray | None
    """The largest divisor of a share at most r samples, for r = 0..share, for each distinct share one after the
    other (0 where none: r = 0); None when that would pass LOOKUP_LIMIT entries."""
    start: np.ndarray
    """[config] where its share's run begins in `largest` (a 0 entry where the batch does not divide)."""
    cap: np.ndarray
    """[config] its share (float), 0 where the batch does not divide: room is clipped to [0, cap]."""


_SPLITS: dict[tuple[int, bytes], BatchSplit] = {}


def _largest_divisor_runs(shares: list[int]) -> tuple[np.ndarray, dict[int, int]] | None:
    """The `largest` table of BatchSplit for these shares (0 first, for batches that do not divide), and where
    each share's run starts; None past LOOKUP_LIMIT entries."""
    if 1 + sum(n + 1 for n in shares) > LOOKUP_LIMIT:
        return None
    runs, starts, at = [np.zeros(1, dtype=np.int64)], {}, 1
    for n in shares:
        run = np.zeros(n + 1, dtype=np.int64)
        for d in _divisors(n).tolist():  # ascending: each divisor holds from itself up to the next
            run[d:] = d
        runs.append(run)
        starts[n] = at
        at += n + 1
    return np.concatenate(runs), starts


def batch_split(global_batch: int, world: np.ndarray) -> BatchSplit:
    key = (global_batch, world.tobytes())
    split = _SPLITS.get(key)
    if split is None:
        divisors = _divisors(global_batch)
        divisible = global_batch % world == 0
        share = np.where(divisible, global_batch // world, 1)
        valid = divisible[:, None] & (share[:, None] % divisors[None, :] == 0)
        table = np.sort(np.where(valid, divisors[None, :].astype(np.float64), np.inf), axis=1)
        table = np.ascontiguousarray(table[:, : max(1, int(valid.sum(axis=1).max()))].T)
        runs = _largest_divisor_runs(sorted(set(share[divisible].tolist())))
        start = np.zeros(world.shape, dtype=np.int64)
        if runs is not None:
            start = np.array(
                [runs[1][n] if ok else 0 for n, ok in zip(share.tolist(), divisible.tolist(), strict=True)],
                dtype=np.int64,
            )
        split = BatchSplit(
            per_process=-(-global_batch // world),
            divisible=divisible,
            divisors=table,
            largest=None if runs is None else runs[0],
            start=start,
            cap=np.where(divisible, share, 0).astype(np.float64),
        )
        if len(_SPLITS) > 256:
            _SPLITS.clear()
        _SPLITS[key] = split
    return split


def share_divisors(global_batch: int, world: np.ndarray) -> np.ndarray:
    """[k, config]: the divisors of each process's share (global_batch / world), ascending, padded with inf; a
    column of inf where world does not divide the global batch."""
    return batch_split(global_batch, world).divisors


def split_batch(global_batch: int, world: np.ndarray, room: np.ndarray) -> np.ndarray:
    """[variant, config] micro-batch: the largest divisor of global_batch / world that is at most `room` samples;
    0 where none is (or where world does not divide the global batch). Where room >= 1 and world divides the batch
    there always is one (1 divides every share)."""
    split = batch_split(global_batch, world)
    if split.largest is not None:  # one lookup: room clipped to [0, share] indexes its share's run
        # (np.minimum/np.maximum: np.clip with an array bound is several times slower)
        micro: np.ndarray = split.largest[split.start + np.minimum(np.maximum(room, 0.0), split.cap).astype(np.int64)]
        return micro  # (numpy types indexing by an array as Any)
    table = split.divisors
    fitting = np.zeros(room.shape, dtype=np.int64)
    for row in table:  # a handful of rows: the most divisors any share has
        fitting += row <= room
    micro = table[np.maximum(fitting - 1, 0), np.arange(table.shape[1])[None, :]]
    return np.where(fitting > 0, micro, 0).astype(np.int64)


def _split(global_batch: int, world: np.ndarray, room: np.ndarray, variants: int) -> np.ndarray:
    """[variant, config] micro-batch (split_batch) of each variant: the data-parallel ones share the world's split;
    each model-parallel one splits the batch over its data dimension, world / (t x p) processes."""
    if variants <= DATA_VARIANTS:
        return split_batch(global_batch, world, room)
    micro = np.empty(room.shape, dtype=np.int64)
    micro[:DATA_VARIANTS] = split_batch(global_batch, world, room[:DATA_VARIANTS])
    for v in range(DATA_VARIANTS, variants):
        data_world = np.maximum(world // int(VARIANT_TENSOR[v] * VARIANT_PIPELINE[v]), 1)
        micro[v : v + 1] = split_batch(global_batch, data_world, room[v : v + 1])
    return micro


def evaluate(space: Space, work: Workload, limits: Limits) -> Evaluation:
    """Score every candidate of the space for this workload under these limits."""
    a = space.catalog.assumptions
    mode = space.modes["fp32" if limits.fp32_only else "auto"]
    p = float(work.parameters)
    world = space.world
    batch = work.global_batch
    # Model-parallel variants only for a workload that can run one (functions/planning/layouts.py): the others are
    # searched over the data-parallel variants alone.
    runs = layouts.supported(work)
    if limits.tensor_parallel:  # a pinned layout: only the variants with it
        runs &= limits.tensor_parallel == VARIANT_TENSOR
    if limits.pipeline_parallel:
        runs &= limits.pipeline_parallel == VARIANT_PIPELINE
    nv = len(VARIANTS) if runs[DATA_VARIANTS:].any() else DATA_VARIANTS
    runs = runs[:nv]
    data_world = np.maximum(world[None, :] // (VARIANT_TENSOR[:nv, None] * VARIANT_PIPELINE[:nv, None]), 1)
    per_process = -(-batch // data_world)  # [variant, config] samples per data-parallel process
    divisible = batch % data_world == 0

    # Memory: what does not depend on the micro-batch, then the largest micro-batch that fits the usable memory,
    # without activation checkpointing, else with it (transformers only), else none (a memory failure).
    # Gradients and optimizer states for the parameters that train; weights alone for the frozen rest (adapters).
    states = work.trained * mode.state_bytes_per_param[:nv]  # [variant, config]
    frozen_weights = work.frozen * mode.frozen_bytes_per_param[:nv] if work.frozen else 0.0
    if work.frozen:
        states = states + frozen_weights
    gather = float(work.largest_layer_parameters) * mode.gather_bytes_per_param[:nv]
    fixed = total_bytes(states, 0.0, gather, space.context_bytes)
    usable = np.asarray(usable_bytes(space.capacity_bytes, limits.memory_margin))  # an array already: no copy
    # Declared activations are at the run's precision already; the model's are 16-bit (fp32 doubles them).
    factor = 1.0 if work.activations_at_run_precision else mode.activation_factor
    share, share_ck = layouts.activation_shares(work, nv, a.memory.checkpoint_kept_bytes_per_token_per_hidden)
    per_sample = work.activation_bytes_per_sample * factor  # [config]
    if nv > DATA_VARIANTS:  # a tensor-parallel GPU keeps part of each block's activations
        per_sample = share[:, None] * per_sample
    room = layouts.pipeline_room(np.floor((usable - fixed) / per_sample), per_process, nv)
    # No micro-batch fits without checkpointing exactly where not even one sample does (room < 1): 1 divides every
    # share. Checkpointing is on where one sample fits with it; one split then serves both cases.
    none_fits = (room < 1) & divisible
    can_checkpoint = work.checkpointed_activation_bytes_per_sample > 0
    if can_checkpoint and none_fits.any():
        per_sample_ck = work.checkpointed_activation_bytes_per_sample * mode.activation_factor
        if nv > DATA_VARIANTS:
            per_sample_ck = share_ck[:, None] * per_sample_ck
        room_ck = layouts.pipeline_room(np.floor((usable - fixed) / per_sample_ck), per_process, nv)
        checkpointing = none_fits & (room_ck >= 1)
        micro = _split(batch, world, np.where(checkpointing, room_ck, room), nv)
        # Where nothing fits, report the least it could need: one sample, checkpointed.
        sample_bytes = np.where(checkpointing | (micro == 0), per_sample_ck, per_sample)
    else:
        checkpointing = np.zeros(room.shape, dtype=bool)
        micro = _split(batch, world, room, nv)
        # Where nothing fits, report the least it could need: one sample (checkpointed, for a transformer).
        least = work.checkpointed_activation_bytes_per_sample * mode.activation_factor if can_checkpoint else per_sample
        if can_checkpoint and nv > DATA_VARIANTS:
            least = share_ck[:, None] * least
        sample_bytes = np.where(micro == 0, least, per_sample)
    fits = micro > 0
    micro = np.maximum(micro, 1)
    accumulation = np.maximum(per_process // micro, 1)
    acts = sample_bytes * micro
    mem_total = fixed + acts
    if work.measured_memory_bytes > 0:  # the team measured it: that figure, not the model, decides what fits
        mem_total = np.full(np.shape(mem_total), work.measured_memory_bytes)
        # Measured per GPU: a CPU-only machine has no GPU memory to hold it. A figure below the frozen weights'
        # own size on a candidate's sharding contradicts the request there (feasibility.py names the fields).
        fits = (mem_total <= usable) & np.broadcast_to(divisible, np.shape(mem_total)) & ~space.is_cpu
        if work.frozen:
            fits &= frozen_weights <= work.measured_memory_bytes

    recompute = 1.0 + a.memory.recompute_flops_fraction * checkpointing.astype(np.float64)
    # The MFU each candidate reaches depends on its work per micro-step (functions/planning/throughput.py): a
    # model-parallel GPU runs 1/(t x p) of the model's FLOPs on each micro-batch.
    cut = (VARIANT_TENSOR[:nv] * VARIANT_PIPELINE[:nv])[:, None].astype(np.float64)
    mfu = mfu_at(space.log_work, space.mfu_base, space.mfu_slopes, np.log(work.flops_per_sample * micro / cut))
    compute = work.flops_per_sample * per_process / cut / (mode.peak_flops * mfu) * recompute
    idle = layouts.bubble(accumulation, nv) if nv > DATA_VARIANTS else np.zeros(micro.shape)
    if nv > DATA_VARIANTS:  # a pipeline's GPUs idle through its bubble
        compute = compute / (1.0 - idle)
    traffic = np.zeros(micro.shape)
    # np.asarray: both are arrays already (array arguments); it only tells the type checker so, without a copy.
    step = np.asarray(
        step_seconds(
            compute,
            work.trained * mode.comm_seconds_per_param[:nv],
            a.compute.comm_overlap_fraction,
            space.step_overhead * accumulation,
        )
    )
    if nv > DATA_VARIANTS:
        traffic = layouts.model_parallel_seconds(
            work,
            micro,
            accumulation,
            mode.activation_factor,
            space.gpus_per_node,
            space.intra_bytes_per_s,
            space.network_bytes_per_s,
            space.step_overhead,
            a.compute,
            nv,
        )
        step = step + traffic
    if work.measured_step_seconds > 0:  # measured for the whole global batch on one GPU: each process does its share
        step = np.asarray(np.broadcast_to(work.measured_step_seconds * per_process / batch, np.shape(step)), float)
    startup: float | np.ndarray = a.job.startup_seconds
    if work.calibration is not None:  # measured by past runs: functions/planning/calibration.py
        step = step * np.asarray(work.calibration.step_scale)
        startup = np.asarray(work.calibration.startup_seconds)
    view = space.region_view(limits.region_mask, limits.flex_allowed, limits.reservation)
    # Capacity risk in the region each candidate runs in (functions/planning/risk.py): Spot's preemptions stretch
    # the billed time, with the machines; refusals add a wait the deadline and the objective see.
    risk = risk_tables(space.regions, space.kinds, limits.capacity, a.job)
    kind_at = np.where(space.kind >= 0, space.kind, len(space.kinds))
    loss_hours = lost_per_preemption_seconds(startup, a.checkpoints.spot_max_lost_minutes) / 3600.0
    base = np.asarray(run_hours(work.steps, step, startup, 0.0, 0.0))  # [variant, config]
    hourly, region, reserved = view.hourly[:, :nv], view.region[:, :nv], view.reserved[:, :nv]

    def at(j: np.ndarray | int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(overhead, hours, wait) of every candidate run in region j ([spot, variant, config] or one region)."""
        rate = risk.preemption_rate[j, kind_at]
        ovh = np.asarray(preemption_overhead(rate, space.nodes, loss_hours)) * PREEMPTIBLE[:, None, None]
        return ovh, base * (1.0 + ovh), risk.wait_hours[np.arange(2)[:, None, None], j, kind_at]

    overhead, hours, wait = at(np.maximum(region, 0))  # -1 (no region has it) is infeasible anyway
    if limits.capacity.shapes:  # another region may beat the cheapest one once each one's risk is priced
        hourly, region = hourly.copy(), region.copy()
        # Regions with no history all carry the priors: of those only the cheapest can win; each one with a
        # history is tried on its own.
        known = limits.capacity.regions
        measured = np.array([r in known for r in space.regions])
        options: list[tuple[np.ndarray, np.ndarray | int]] = []
        if (limits.region_mask & ~measured).any() and (limits.region_mask & measured).any():
            prior = space.region_view(limits.region_mask & ~measured, limits.flex_allowed)
            options.append((prior.hourly[:, :nv], prior.region[:, :nv]))
        buyable = space.buyable(limits.flex_allowed)
        for r in np.flatnonzero(limits.region_mask & measured).tolist():
            if buyable[:, r].any():
                price = np.where(buyable[:, r], space.price[:, r], np.inf)
                options.append((price[:, :, VARIANT_SERVER[:nv]].transpose(1, 2, 0), r))
        for price, j in options:
            ovh_j, hours_j, wait_j = at(np.maximum(j, 0))
            better = limits.score(hours_j + wait_j, hours_j * price)[0] < limits.score(hours + wait, hours * hourly)[0]
            better &= np.isfinite(price) & ~reserved & (region >= 0)
            if better.any():
                hourly, region = np.where(better, price, hourly), np.where(better, j, region).astype(np.int16)
                overhead = np.where(better, ovh_j, overhead)
                hours, wait = np.where(better, hours_j, hours), np.where(better, wait_j, wait)
    cost = hours * hourly

    # The reason is the first check (in REASONS order) a candidate fails: the least code over all failing checks.
    host_need = space.gpus_per_node * a.host.ram_bytes_per_gpu_process + p * a.host.ram_bytes_per_parameter
    config_code = failing(~space.host_vcpus_ok | (~space.is_cpu & (host_need > space.host_ram_bytes)), CODE["host"])
    config_code = np.minimum(config_code, failing(~divisible, CODE["batch"]))
    config_code = np.minimum(config_code, failing(space.end_of_support <= limits.today, CODE["end_of_support"]))
    if limits.max_gpus > 0:
        config_code = np.minimum(config_code, failing(space.gpu_total > limits.max_gpus, CODE["max_gpus"]))
    config_code = np.minimum(config_code, failing(~limits.image_ok, CODE["image"]))
    config_code = np.minimum(config_code, failing(~limits.config_allowed, CODE["gpu_not_allowed"]))
    code = np.minimum(view.static_code[:, :nv], config_code)
    code[:, ~runs] = np.minimum(code[:, ~runs], CODE["invalid"])  # layouts the workload cannot run
    # the trainer runs layouts in bf16 or fp32, not fp16 with loss scaling (a GPU without bf16, fp32 not asked for)
    fp16 = mode.precision == FP16_INDEX
    if nv > DATA_VARIANTS and fp16.any():
        code[:, DATA_VARIANTS:, fp16] = np.minimum(code[:, DATA_VARIANTS:, fp16], CODE["invalid"])
    if not limits.image.reduction_server:  # reducers need the plugin in the training image
        server = VARIANT_SERVER[:nv] == 1
        code[:, server] = np.minimum(code[:, server], CODE["image"])
    code = np.minimum(code, failing(~fits, CODE["memory"]))
    code = np.minimum(code, failing(~limits.spot_allowed, CODE["spot_policy"])[:, None, None])
    if limits.reservation_required:
        code = np.minimum(code, failing(~reserved, CODE["reservation"]))
    if limits.budget_usd > 0:
        code = np.minimum(code, failing(cost > limits.budget_usd, CODE["budget"]))
    if limits.deadline_hours is not None:
        code = np.minimum(code, failing(hours + wait > limits.deadline_hours, CODE["deadline"]))
    if limits.max_hours > 0:
        code = np.minimum(code, failing(hours > limits.max_hours, CODE["timeout"]))
    reason = code * (code != PASS)  # PASS -> 0 (feasible)

    objective, tiebreak = limits.score(hours + wait if limits.capacity.shapes else hours, cost)
    penalty = INFEASIBLE * (reason != 0)
    primary, secondary = objective + penalty, tiebreak + penalty
    t = (2, 1, 0)
    return Evaluation(
        space=space,
        workload=work,
        limits=limits,
        fp32=mode.fp32,
        usable=usable,
        per_process=per_process.T,
        micro_batch=micro.T,
        accumulation=accumulation.T,
        checkpointing=checkpointing.T,
        states=states.T,
        activations=acts.T,
        memory_total=mem_total.T,
        mfu=mfu.T,
        step=step.T,
        hours=hours.transpose(t),
        overhead=np.broadcast_to(overhead, hours.shape).transpose(t),
        wait=wait.transpose(t),
        cost=cost.transpose(t),
        hourly=hourly.transpose(t),
        region=region.transpose(t),
        reserved=reserved.transpose(t),
        reason=reason.transpose(t),
        primary=primary.transpose(t),
        secondary=secondary.transpose(t),
        reason_svc=reason,
        objective_svc=objective,
        primary_svc=primary,
        secondary_svc=secondary,
        memory_vc=mem_total,
        layout_seconds=traffic.T,
        bubble=idle.T,
        valid=space.variant_valid[:, :nv] & runs[None, :] & ~(fp16[:, None] & (np.arange(nv) >= DATA_VARIANTS)),
    )
