"""Planning a run again from its canary's figures (docs/canary.md): the one place where a canary's measurements
become the planner's input.

They go in as the planner's measured figures (functions/planning/measured.py MeasuredFigures, source `canary`),
beside what past runs of the same workload measured: measured on the plan's own shape, they replace the model's step
time there and, scaled by the model's ratios, on every other shape (functions/planning/calibration.py), and the new
plan says which figures are measured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schemas.canary import CanaryFigures
from schemas.measurement import image_of, workload_key
from schemas.plan import Plan
from schemas.training_request import TrainingRequest

if TYPE_CHECKING:
    from functions.planning import MeasuredFigures

GIB = 2**30


def canary_measured(request: TrainingRequest, plan: Plan, figures: CanaryFigures, *, at: str) -> MeasuredFigures:
    """The canary's figures as the planner takes them: one optimizer step of the global batch over every process
    (the canary's step time), the peak memory of one process, on the plan's shape and the request's image."""
    from functions.planning import MeasuredFigures

    return MeasuredFigures(
        workload=workload_key(request),
        machine_type=plan.machine_type,
        accelerator_type=plan.accelerator_type or "",
        accelerator_count=plan.accelerator_count if plan.accelerator_type else 0,
        nodes=plan.replica_count,
        image=image_of(request),
        micro_batch=plan.micro_batch_size,
        step_seconds=figures.step_seconds or 0.0,
        peak_memory_gib=(figures.peak_memory_bytes or 0) / GIB,
        run_id=request.run_id,
        source="canary",
        global_batch=plan.global_batch_size,
        strategy=plan.strategy,
        measured_at=at,
    )


def replan_note(old: Plan, figures: CanaryFigures, verdict: str) -> str:
    """The line the new plan's `reasons` start with."""
    return (
        f"planned again from the canary's measured figures (it ran {figures.steps} steps on "
        f"{old.replica_count} x {old.machine_type}): {verdict}"
    )


__all__ = ["canary_measured", "replan_note"]
