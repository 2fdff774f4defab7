"""What a finished run (or a canary) measured, as the Measurement it adds to the `measurements` collection, and the
measurements as the planner takes them (functions/planning/measured.py). Pure: the store writes and reads them.

A run's figures come from its metrics.json (schemas/run_metrics.py; the built-in trainer writes `step_seconds`,
`samples_per_second` and `peak_memory_bytes`, a team's code may log the same names on its metrics lines) and its
timings: start-up is the job's duration less its steps x step time, which is exactly what the planner's start-up
stands for (everything that is not training steps), so a second run of the same workload on the same shape is
estimated from both.

Every figure is held to its rule (schemas/run_metrics.py FIGURES) before it is measured: one outside it (a step of
Infinity or 1e9 s, whether reported or worked out from a throughput) counts as not measured. Planning from
measurements never fails a delivery: a stored measurement the planner does not take is left out and logged
(planner_figures).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from functions.planning.errors import PlanInputError
from functions.planning.measured import SIMILAR_SOURCE, STARTUP_SOURCE, MeasuredFigures
from schemas.errors import SchemaError
from schemas.measurement import EstimateCheck, Measurement, estimate_error_text, image_of, workload_key, workload_label
from schemas.plan import Plan
from schemas.run_metrics import checked_figure
from schemas.run_record import RunRecord, RunState

log = logging.getLogger("landfall.measurements")

GIB = 2**30
MAX_MICRO_BATCH = 2**20
"""The largest micro-batch taken as reported (samples per process per pass)."""
MEASURED_NOTE = "measured"
"""How a plan's assumptions start when its figures were measured (functions/planning/calibration.py)."""


def _number(name: str, value: Any) -> float:
    """A figure as measured: the value when it is one its rule keeps and above 0, else 0 (not measured)."""
    figure = checked_figure(name, value)
    return figure if figure is not None and figure > 0 else 0.0


def _figure(metrics: Mapping[str, Any], name: str) -> float:
    """A figure from metrics.json, or from a team's code's metrics lines (`final`)."""
    final = metrics.get("final")
    return _number(name, metrics.get(name)) or (_number(name, final.get(name)) if isinstance(final, Mapping) else 0.0)


def _micro_batch(value: Any, planned: int) -> int:
    """The micro-batch reported, when it is a whole number from 1 to MAX_MICRO_BATCH, else the plan's."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_MICRO_BATCH else planned


def _step(step: float, rate: float, global_batch: int) -> float:
    """The step time reported, else the global batch over the throughput (0 when that is outside its rule)."""
    return step or (_number("step_seconds", global_batch / rate) if rate else 0.0)


def planned_from_measurements(run: RunRecord) -> bool:
    """Whether the run's plan took its step time from measured figures."""
    return run.plan is not None and any(a.startswith(MEASURED_NOTE) for a in run.plan.assumptions)


def estimate_check(run: RunRecord) -> EstimateCheck | None:
    """The run's plan estimate beside its actual duration, once it has ended with both known."""
    if run.plan is None or run.timings.run_seconds is None or run.timings.run_seconds <= 0:
        return None
    return EstimateCheck(
        run_id=run.run_id,
        estimated_seconds=round(run.plan.estimated_hours * 3600.0, 3),
        actual_seconds=run.timings.run_seconds,
        from_measured=planned_from_measurements(run),
        at=run.timings.ended_at or run.updated_at,
    )


def measurement_from_run(run: RunRecord, modelled_steps: int = 0) -> Measurement | None:
    """What a SUCCEEDED run measured on its plan's shape (without step figures in its metrics, only its estimate
    beside its duration); None when it has no plan or duration. modelled_steps: the steps the planner's model gives
    the run's request (planner_steps), so that the next plan knows how far the model's count was off."""
    check = estimate_check(run)
    if run.state != RunState.SUCCEEDED or run.plan is None or check is None:
        return None
    plan, metrics = run.plan, run.metrics or {}
    rate = _figure(metrics, "samples_per_second")
    step = _step(_figure(metrics, "step_seconds"), rate, plan.global_batch_size)
    steps = _number("steps", metrics.get("steps"))
    startup = _number("startup_seconds", check.actual_seconds - steps * step) if step and steps else 0.0
    batch = metrics.get("batch")
    micro = batch.get("micro_batch_size") if isinstance(batch, Mapping) else None
    return Measurement(
        workload=workload_key(run.request),
        workload_label=workload_label(run.request),
        machine_type=plan.machine_type,
        accelerator_type=plan.accelerator_type or "",
        accelerator_count=plan.accelerator_count,
        nodes=plan.replica_count,
        image=image_of(run.request),
        run_id=run.run_id,
        source="run",
        measured_at=check.at,
        step_seconds=round(step, 6),
        peak_memory_gib=round(_figure(metrics, "peak_memory_bytes") / GIB, 4),
        samples_per_second=round(rate, 4),
        startup_seconds=round(startup, 3),
        micro_batch=_micro_batch(micro, plan.micro_batch_size),
        global_batch=plan.global_batch_size,
        strategy=plan.strategy,
        tensor_parallel=plan.tensor_parallel,
        pipeline_parallel=plan.pipeline_parallel,
        steps=int(steps),
        modelled_steps=modelled_steps if steps else 0,
        estimates=(check,),
        **(model_view(run.request, plan) if step else {}),
    )


def measurement_from_canary(run: RunRecord, figures: Mapping[str, Any], at: str) -> Measurement | None:
    """What a run's canary measured on the run's planned shape: `figures` holds step_seconds, peak_memory_bytes (or
    peak_memory_gib), samples_per_second and startup_seconds (time to its first step), any of them; None without a
    plan or any figure. For the canary step (the run record's `canary`)."""
    if run.plan is None:
        return None
    plan = run.plan
    memory = _number("peak_memory_gib", figures.get("peak_memory_gib")) or (
        _number("peak_memory_bytes", figures.get("peak_memory_bytes")) / GIB
    )
    rate = _number("samples_per_second", figures.get("samples_per_second"))
    step = _step(_number("step_seconds", figures.get("step_seconds")), rate, plan.global_batch_size)
    if not (step or rate or memory):
        return None
    return Measurement(
        workload=workload_key(run.request),
        workload_label=workload_label(run.request),
        machine_type=plan.machine_type,
        accelerator_type=plan.accelerator_type or "",
        accelerator_count=plan.accelerator_count,
        nodes=plan.replica_count,
        image=image_of(run.request),
        run_id=run.run_id,
        source="canary",
        measured_at=at,
        step_seconds=round(step, 6),
        peak_memory_gib=round(memory, 4),
        samples_per_second=round(rate, 4),
        startup_seconds=round(_number("startup_seconds", figures.get("startup_seconds")), 3),
        micro_batch=_micro_batch(figures.get("micro_batch"), plan.micro_batch_size),
        global_batch=plan.global_batch_size,
        strategy=plan.strategy,
        tensor_parallel=plan.tensor_parallel,
        pipeline_parallel=plan.pipeline_parallel,
        **(model_view(run.request, plan) if step else {}),
    )


def model_view(request: Mapping[str, Any], plan: Plan) -> dict[str, Any]:
    """The model's step for the request's work on the plan's shape, strategy and layout, its FLOPs per sample and family
    (functions/planning/model_step.py), as Measurement fields; {} when the request cannot be planned (a measurement
    is still recorded without them)."""
    from functions.planning.inputs import plan_input_from_request
    from functions.planning.model_step import model_step

    try:
        found = model_step(
            plan_input_from_request(request),
            plan.machine_type,
            plan.accelerator_count,
            plan.replica_count,
            plan.strategy,
            plan.tensor_parallel,
            plan.pipeline_parallel,
        )
    except (PlanInputError, SchemaError, ValueError) as exc:
        log.warning("the model's step for %s on %s not worked out: %s", workload_label(request), plan.machine_type, exc)
        return {}
    return {
        "model_step_seconds": round(found.step_seconds, 9),
        "flops_per_sample": found.flops_per_sample,
        "family": found.family[:32],
    }


def planner_figures(measurements: Iterable[Measurement], image: str = "") -> list[MeasuredFigures]:
    """The measurements as the planner takes them; with `image`, only those measured with that image (a different
    image is different code). One the planner refuses (PlanInputError) is left out and logged: planning goes on
    from the others and the model."""
    taken = []
    for m in measurements:
        if image and m.image != image:
            continue
        try:
            taken.append(_planner_figure(m))
        except PlanInputError as exc:
            log.warning("measurement %s left out of planning: %s", m.measurement_id, exc)
    return taken


def startup_figures(measurements: Iterable[Measurement], image: str, workload: str) -> list[MeasuredFigures]:
    """The start-ups other workloads' runs and canaries measured lately, with this image, one per machine shape (the
    newest), as the planner takes them (source "startup": the shape's start-up, not their step figures). A machine
    and an image start as fast whatever work runs on them, so a new workload is planned with what the project's
    machines take to start rather than the model's assumption."""
    newest: dict[tuple[str, int, int], Measurement] = {}
    for m in measurements:
        if m.workload == workload or m.image != image or m.startup_seconds <= 0:
            continue
        shape = (m.machine_type, m.accelerator_count, m.nodes)
        if shape not in newest or m.measured_at > newest[shape].measured_at:
            newest[shape] = m
    taken = []
    for m in newest.values():
        try:
            taken.append(
                MeasuredFigures(
                    workload=m.workload,
                    machine_type=m.machine_type,
                    accelerator_type=m.accelerator_type,
                    accelerator_count=m.accelerator_count,
                    nodes=m.nodes,
                    image=m.image,
                    startup_seconds=m.startup_seconds,
                    run_id=m.run_id,
                    source=STARTUP_SOURCE,
                    measured_at=m.measured_at,
                )
            )
        except PlanInputError as exc:
            log.warning("measurement %s left out of planning: %s", m.measurement_id, exc)
    return taken


def similar_figures(measurements: Iterable[Measurement], image: str, workload: str) -> list[MeasuredFigures]:
    """Other workloads' measured steps on GPUs lately, each beside the model's step for that work (source
    "similar"): how far the model is off on each GPU kind, which the planner applies to this workload's step there,
    weighted by how alike the works are (functions/planning/calibration.py). Same image only (other code is other
    work); one per (workload, shape), the newest."""
    newest: dict[tuple[str, str, int, int], Measurement] = {}
    for m in measurements:
        if m.workload == workload or m.image != image or not m.accelerator_type:
            continue
        if m.step_seconds <= 0 or m.model_step_seconds <= 0:
            continue
        key = (m.workload, m.machine_type, m.accelerator_count, m.nodes)
        if key not in newest or m.measured_at > newest[key].measured_at:
            newest[key] = m
    taken = []
    for m in newest.values():
        try:
            taken.append(replace(_planner_figure(m), source=SIMILAR_SOURCE, steps=0, modelled_steps=0))
        except PlanInputError as exc:
            log.warning("measurement %s left out of planning: %s", m.measurement_id, exc)
    return taken


def _planner_figure(m: Measurement) -> MeasuredFigures:
    return MeasuredFigures(
        workload=m.workload,
        machine_type=m.machine_type,
        accelerator_type=m.accelerator_type,
        accelerator_count=m.accelerator_count,
        nodes=m.nodes,
        image=m.image,
        micro_batch=m.micro_batch,
        step_seconds=m.step_seconds,
        peak_memory_gib=m.peak_memory_gib,
        samples_per_second=m.samples_per_second,
        startup_seconds=m.startup_seconds,
        run_id=m.run_id,
        source=m.source,
        global_batch=m.global_batch,
        strategy=m.strategy,
        tensor_parallel=m.tensor_parallel,
        pipeline_parallel=m.pipeline_parallel,
        measured_at=m.measured_at,
        steps=m.steps,
        modelled_steps=m.modelled_steps,
        model_step_seconds=m.model_step_seconds,
        flops_per_sample=m.flops_per_sample,
        family=m.family,
    )


def planner_steps(request: Mapping[str, Any]) -> int:
    """The optimizer steps the planner's model gives a request (its dataset size, epochs, batch), before any
    measurement; 0 when the request cannot be planned."""
    from functions.planning.catalog import load_catalog
    from functions.planning.errors import PlanInputError
    from functions.planning.inputs import plan_input_from_request
    from functions.planning.workload import build_workload

    try:
        return build_workload(plan_input_from_request(request), load_catalog().assumptions).steps
    except PlanInputError:
        return 0


def estimate_errors(measurements: Iterable[Measurement]) -> list[tuple[Measurement, EstimateCheck]]:
    """Every past estimate check of these measurements, oldest first."""
    checks = [(m, e) for m in measurements for e in m.estimates]
    return sorted(checks, key=lambda pair: pair[1].at)


def estimate_summary(measurements: Iterable[Measurement]) -> list[str]:
    """Lines for `landfall plan`: how far past estimates were from actual durations for this workload, the model's
    and the measured plans' apart; [] when no run of it has finished."""
    checks = estimate_errors(measurements)
    if not checks:
        return []
    lines = []
    for measured, label in ((False, "from the model"), (True, "from measured figures")):
        errors = [e.error for _, e in checks if e.from_measured == measured]
        if errors:
            mean_abs = sum(abs(x) for x in errors) / len(errors)
            lines.append(
                f"{len(errors)} past run{'s' if len(errors) > 1 else ''} planned {label}: estimate off by "
                f"{mean_abs:.0%} on average (worst: {estimate_error_text(max(errors, key=abs))})"
            )
    for m, e in checks[-5:]:
        lines.append(
            f"  {e.run_id}: {m.machine_type} estimated {e.estimated_seconds:,.0f} s, took {e.actual_seconds:,.0f} s "
            f"({estimate_error_text(e.error)}; {'measured' if e.from_measured else 'modelled'})"
        )
    return lines
