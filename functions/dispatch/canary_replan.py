"""Planning a run again from its canary's figures (docs/canary.md): the one place where a canary's measurements
become the planner's input.

They go in as the planner's measured figures (functions/planning/measured.py MeasuredFigures, source `canary`),
beside what past runs of the same workload measured: measured on the plan's own shape, they replace the model's step
time there and, scaled by the model's ratios, on every other shape (functions/planning/calibration.py), and the new
plan says which figures are measured.

The dispatcher plans a run again here when its canary said so (canary.status replan), under its delivery's claim.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from functions.dispatch.deps import DispatchDeps
from functions.dispatch.job_record import FALLBACKS_KEPT, plan_summary
from functions.dispatch.outcomes import Outcome, Said
from functions.dispatch.ownership import lost_claim, owned
from functions.errors import PermanentError
from functions.records import canary as canary_rules
from functions.records.bounds import stored_plan
from functions.records.run_rules import transitioned
from schemas.canary import CanaryFigures
from schemas.measurement import image_of, workload_key
from schemas.plan import Plan
from schemas.record_bounds import cut
from schemas.run_record import RunError, RunRecord, RunState
from schemas.training_request import TrainingRequest

if TYPE_CHECKING:
    from functions.planning import MeasuredFigures

log = logging.getLogger("landfall.dispatch")

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
        tensor_parallel=plan.tensor_parallel,
        pipeline_parallel=plan.pipeline_parallel,
        measured_at=at,
    )


def replan_note(old: Plan, figures: CanaryFigures, verdict: str) -> str:
    """The line the new plan's `reasons` start with."""
    return (
        f"planned again from the canary's measured figures (it ran {figures.steps} steps on "
        f"{old.replica_count} x {old.machine_type}): {verdict}"
    )


def replan_from_canary(
    run_id: str, request: TrainingRequest, run: RunRecord, owner: str, deps: DispatchDeps
) -> RunRecord | Outcome:
    """Plan the run again from its canary's figures (canary.status replan), under this delivery's claim: the new plan
    says so in its reasons, and the run goes on with it (no second canary). A run nothing fits any more FAILS naming
    the canary's figures. Returns the run as now stored, or what happened when it did not go on."""
    assert run.canary is not None and run.plan is not None
    figures = run.canary.figures or CanaryFigures()
    outcome = deps.replan(request, run.plan, figures) if deps.replan is not None else deps.plan(request)
    if outcome.plan is None:
        message = f"planned again from the canary's figures ({run.canary.verdict}), no shape fits: {outcome.rejection}"
        now = deps.now()

        def fail(cur: RunRecord) -> tuple[RunRecord | None, bool]:
            new = transitioned(
                cur,
                RunState.FAILED,
                now=now,
                detail="no plan fits the canary's figures",
                change=lambda r: replace(r, error=RunError("infeasible", cut(message))),
            )
            return new, new is not None

        if not deps.store.apply(run_id, owned(owner, fail, lost=False)):
            return lost_claim(run_id, "while planning it again from its canary")
        return Outcome(Said.FAILED, "canary-replan")
    plan = stored_plan(outcome.plan)
    fallbacks = tuple(stored_plan(p) for p in outcome.fallbacks[:FALLBACKS_KEPT])
    note = replan_note(run.plan, figures, run.canary.verdict)
    if not deps.store.apply(run_id, canary_rules.replanned(plan, fallbacks, cut(note), owner=owner, now=deps.now())):
        return lost_claim(run_id, "while planning it again from its canary")
    log.info("run %s planned again from its canary: %s", run_id, plan_summary(plan))
    again = deps.store.get(run_id)
    if again is None:
        raise PermanentError(f"run {run_id} disappeared while it was planned again from its canary")
    return again


__all__ = ["canary_measured", "replan_from_canary", "replan_note"]
