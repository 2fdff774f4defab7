"""Turn one evaluated candidate into the Plan record (schemas/plan.py), with its stated assumptions."""

from __future__ import annotations

from collections.abc import Sequence

from functions.planning.bands import Band, band_of
from functions.planning.calibration import measured_notes
from functions.planning.checkpoints import checkpoint_interval
from functions.planning.explain import precision_of, usd
from functions.planning.inputs import PlanInput
from functions.planning.job_choices import Estimate, JobPolicy, duration, job_choices
from functions.planning.model_figures import model_figures
from functions.planning.plan_notes import image_note, layout_note, network_note, reducer_note
from functions.planning.risk import lost_per_preemption_seconds, risk_notes
from functions.planning.search import Evaluation, Limits
from functions.planning.space import AXIS_MODES, VARIANT_PIPELINE, VARIANT_SERVER, VARIANT_STRATEGY, VARIANT_TENSOR
from schemas.plan import Plan, PlanAlternative, PlanMemory
from schemas.vocabulary import ON_DEMAND, STRATEGIES, ConsumptionMode


def objective_text(inp: PlanInput, limits: Limits) -> str:
    """Which objective chose the plan (constraints.prefer) and the limits it met."""
    if limits.fastest:
        goal = "fastest plan (prefer: fastest)"
    elif limits.value_of_time > 0:
        v = limits.value_text
        why = "the default value of time" if limits.value_is_default else f"prefer: {inp.prefer}"
        goal = f"least cost + {v}/h x wall hours ({why})"
    else:
        goal = "cheapest plan" + ("" if inp.prefer == "" else f" (prefer: {inp.prefer})")
    budget = f"${inp.budget_usd:,.2f}"
    within = f" within the {budget} budget" if inp.budget_usd > 0 else ""
    if inp.deadline is not None:
        end = inp.deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"{goal} that ends by {end} ({limits.deadline_hours:,.1f} h from now){within}"
    return f"{goal}{within}" if within else f"{goal} (no deadline, no budget)"


def compute_note(ev: Evaluation, c: int, v: int) -> str:
    """The peak and MFU a candidate's compute time rests on, and where the MFU comes from: the points it was fitted
    to or the prior it was scaled from (functions/planning/throughput.py)."""
    space = ev.space
    shape = space.configs[c].shape
    a = space.catalog.assumptions
    if shape.is_cpu_only:
        peak = f"{shape.vcpus} vCPUs x {shape.cpu_gflops_per_vcpu:g} GFLOP/s fp32 peak"
        return f"CPU-only: {peak}, MFU {a.compute.cpu_mfu:.0%} assumed"
    gpu = space.catalog.gpus[shape.gpu_kind]
    precision = precision_of(ev, c)
    work = ev.workload.flops_per_sample * float(ev.micro_batch[c, v])
    basis = space.catalog.throughput.curves[shape.gpu_kind].basis
    return (
        f"{gpu.display}: {gpu.peak_tflops[precision]:g} TFLOP/s {precision} peak, MFU {float(ev.mfu[c, v]):.1%} at "
        f"{work / 1e12:.3g} TFLOP per GPU per micro-step, {basis}"
        + ("" if gpu.supports_bf16 else "; no bf16 on this GPU")
    )


def _assumptions(ev: Evaluation, c: int, v: int, s: int, region: str, server: bool) -> tuple[list[str], bool]:
    """The workload line, the compute note, then the hardware, model and price notes (cached per candidate and
    region)."""
    key = (c, s, region, server, bool(ev.fp32[c]), ev.limits.memory_margin)
    cached = ev.space.notes.get(key)
    if cached is None:
        cached = ev.space.notes[key] = _hardware_notes(ev, c, AXIS_MODES[s], region, server)
    work = ev.workload
    measured = measured_notes(ev, c)
    line = f"workload: {work.description}; {work.steps:,} steps of {work.global_batch} samples"
    hardware = cached[0]
    if work.calibration is not None:  # the measured start-up replaces the assumed one (said in `measured`)
        hardware = tuple(n for n in hardware if not n.startswith("startup "))
    risk = _risk_notes(ev, c, s, region)
    return [line, *work.sizing, *measured, compute_note(ev, c, v), *hardware, *risk], cached[1]


def _risk_notes(ev: Evaluation, c: int, s: int, region: str) -> list[str]:
    """What the candidate's time took from the capacity history (functions/planning/risk.py): Spot's preemptions
    with the machines, and any refusals measured in its region."""
    space, a = ev.space, ev.space.catalog.assumptions
    startup = startup_of(ev, c)
    return risk_notes(
        ev.limits.capacity,
        a.job,
        kind=space.configs[c].shape.accelerator_type or "",
        region=region,
        spot=bool(AXIS_MODES[s].preemptible),
        nodes=space.configs[c].nodes,
        loss_seconds=float(lost_per_preemption_seconds(startup, a.checkpoints.spot_max_lost_minutes)),
    )


def _hardware_notes(
    ev: Evaluation, c: int, mode: ConsumptionMode, region: str, server: bool
) -> tuple[tuple[str, ...], bool]:
    """Notes for the candidate priced as `mode` (one of space.AXIS_MODES)."""
    space = ev.space
    catalog, a = space.catalog, space.catalog.assumptions
    shape = space.configs[c].shape
    notes: list[str] = []
    if not shape.is_cpu_only:
        notes.append(f"communication: {a.compute.comm_note}")
    notes.append(
        f"memory: {a.memory.activation_note}; {ev.limits.memory_margin:.0%} of each GPU's memory kept "
        "free; GB = 1e9 bytes"
    )
    notes.append(f"startup {a.job.startup_seconds:g} s: {a.job.startup_note}")
    if mode.preemptible:
        notes.append(f"{mode.title}, how its risk is priced: {a.job.spot_note}")
    if server:
        notes.append(f"Reduction Server: {a.reduction_server.note}")
    estimated = False
    items = [shape.machine_type] + ([shape.accelerator_type] if shape.accelerator_type else [])
    column = "" if mode.price == ON_DEMAND.price else f" {mode.price}"
    for item in items:
        quote = catalog.prices.price(item, region, mode.price)
        estimated = estimated or quote.estimate
        tag = "estimate" if quote.estimate else "catalog"
        notes.append(
            f"price {item} {region}{column}: ${quote.usd_per_hour:.4f}/h ({tag}, {quote.date}; {quote.source})"
        )
    if server:
        quote = catalog.prices.price(a.reduction_server.machine_type, region, ON_DEMAND.price)
        estimated = estimated or quote.estimate
        notes.append(
            f"price {a.reduction_server.machine_type} {region}: ${quote.usd_per_hour:.4f}/h "
            f"({'estimate' if quote.estimate else 'catalog'}, {quote.date})"
        )
    return tuple(notes), estimated


def startup_of(ev: Evaluation, c: int) -> float:
    """The start-up inside configuration c's estimate: measured for this workload on it, else assumed."""
    calibration = ev.workload.calibration
    if calibration is not None:
        return float(calibration.startup_seconds[c])
    return float(ev.space.catalog.assumptions.job.startup_seconds)


def band_reasons(estimate: Estimate, hourly: float, band: Band, limits: Limits) -> list[str]:
    """The p50-p90 line, and what the plan meets only at p50: a deadline, the job time limit or a budget its p90
    passes (a plan that misses one at p50 is no plan at all)."""
    p50_cost, p90_cost = estimate.p50_hours * hourly, estimate.p90_hours * hourly
    reasons = [
        f"estimate: p50 {duration(estimate.p50_hours * 3600)} {usd(p50_cost)}, p90 "
        f"{duration(estimate.p90_hours * 3600)} {usd(p90_cost)} ({band.basis})"
    ]
    deadline = limits.deadline_hours
    if deadline is not None and estimate.p90_hours > deadline:
        reasons.append(
            f"deadline met at p50 only: the run ends {duration(estimate.p50_hours * 3600)} from now at p50 but "
            f"{duration(estimate.p90_hours * 3600)} at p90, past the deadline {duration(deadline * 3600)} away; "
            "a later deadline, more GPUs (prefer: fastest) or a measured run (a canary) makes it safe"
        )
    if limits.max_hours > 0 and estimate.p90_hours > limits.max_hours:
        reasons.append(
            f"job time limit met at p50 only: {duration(estimate.p90_hours * 3600)} at p90, past the "
            f"{duration(limits.max_hours * 3600)} job time limit: the timeout stops it there; "
            "more GPUs or a shorter run (fewer epochs, max_steps) keeps it within"
        )
    if limits.budget_usd > 0 and p90_cost > limits.budget_usd:
        reasons.append(
            f"budget met at p50 only: {usd(p50_cost)} at p50 but {usd(p90_cost)} at p90, over the "
            f"{usd(limits.budget_usd)} budget; the timeout stops the job at what the budget pays, so raise the "
            "budget or expect the run to stop before it ends"
        )
    return reasons


def build_plan(
    ev: Evaluation,
    pick: tuple[int, int, int],
    region_index: int,
    objective: str,
    alternatives: Sequence[PlanAlternative],
    considered: int,
    policy: JobPolicy,
) -> Plan:
    """The Plan for candidate (config, variant, spot) run in space.regions[region_index], with how its job runs."""
    c, v, s = pick
    space = ev.space
    cfg = space.configs[c]
    server = bool(VARIANT_SERVER[v])
    region = space.regions[region_index]
    hourly = float(space.price[c, region_index, s, int(server)])
    if ev.reserved[c, v, s] and region_index == ev.region[c, v, s]:
        hourly = float(ev.hourly[c, v, s])  # the reservation's machines are paid for: only a server pool costs
    hours = float(ev.hours[c, v, s]) if region_index == ev.region[c, v, s] else ev.in_region(c, v, s, region_index)[0]
    total = round(float(ev.memory_total[c, v]))
    # A declared memory figure (workload.memory_gib_per_gpu) is the total; the model's split is shown within it.
    states = min(round(float(ev.states[c, v])), total)
    acts = min(round(float(ev.activations[c, v])), total - states)
    notes, estimated = _assumptions(ev, c, v, s, region, server)
    network = network_note(ev, c)
    notes = [*notes, network] if network else notes
    # The image and the reducers are choices: they join the job's reasons (`landfall plan` prints them).
    chosen = (layout_note(ev, c, v, s), image_note(ev, c), reducer_note(ev, c, v, s))
    band = band_of(ev, c)
    shown = model_figures(ev, c, v)
    estimate = Estimate(p50_hours=hours, p90_hours=band.p90(hours), startup_seconds=startup_of(ev, c))
    job = job_choices(ev, pick, region, estimate, hourly, policy)
    every = checkpoint_interval(
        float(ev.step[c, v]),
        ev.workload.steps,
        ev.workload.parameters,
        AXIS_MODES[s].preemptible,
        space.catalog.assumptions.checkpoints,
    )
    rs_machine = space.catalog.assumptions.reduction_server.machine_type
    return Plan(
        strategy=STRATEGIES[int(VARIANT_STRATEGY[v])],
        tensor_parallel=int(VARIANT_TENSOR[v]),
        pipeline_parallel=int(VARIANT_PIPELINE[v]),
        precision=precision_of(ev, c),
        machine_type=cfg.shape.machine_type,
        accelerator_type=cfg.shape.accelerator_type,
        accelerator_count=cfg.shape.accelerator_count,
        replica_count=cfg.nodes,
        reduction_server_replicas=int(space.server_replicas[c]) if server else 0,
        reduction_server_machine_type=rs_machine if server else None,
        region=region,
        mode=job.mode.name,
        memory=PlanMemory(
            model_states_bytes=states,
            activations_bytes=acts,
            overhead_bytes=total - states - acts,
            total_bytes=total,
            gpu_memory_bytes=round(float(space.capacity_bytes[c])),
            usable_bytes=round(float(ev.usable[c])),
        ),
        model_parameters=ev.workload.parameters,
        global_batch_size=ev.workload.global_batch,
        micro_batch_size=int(ev.micro_batch[c, v]),
        estimated_step_time_seconds=float(f"{ev.step[c, v]:.9g}"),
        estimated_steps=ev.workload.steps,
        estimated_hours=round(hours, 6),
        hourly_cost_usd=round(hourly, 6),
        estimated_cost_usd=round(hours * hourly, 6),
        objective=objective,
        assumptions=tuple(notes),
        alternatives=tuple(alternatives),
        alternatives_considered=considered,
        prices_estimated=estimated,
        gradient_accumulation_steps=int(ev.accumulation[c, v]),
        activation_checkpointing=bool(ev.checkpointing[c, v]),
        max_wait_seconds=job.max_wait_seconds,
        timeout_seconds=job.timeout_seconds,
        boot_disk_type=job.boot_disk.type,
        boot_disk_size_gb=job.boot_disk.size_gb,
        reasons=(
            *band_reasons(estimate, hourly, band, ev.limits),
            *job.reasons,
            *(reason for reason in chosen if reason),
            every.reason,
        ),
        reservation=job.reservation,
        checkpoint_every_steps=every.every_steps,
        checkpoint_every_seconds=every.every_seconds,
        p90_hours=round(estimate.p90_hours, 6),
        p90_cost_usd=round(estimate.p90_hours * hourly, 6),
        band_basis=band.basis,
        samples_per_second_per_gpu=shown.samples_per_second_per_gpu,
        mfu=shown.mfu,
        figures_from=shown.figures_from,
    )
