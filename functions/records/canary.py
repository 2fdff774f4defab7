"""Pure rules for a run's canary (docs/canary.md): whether a run needs one, what its figures say against
the plan, and what its end does to the run (run_rules steps, so applied in one transaction).

The canary is the run's current job while it runs (`vertex` names it, `canary.status` is `running`): the listener,
the reconciler and `landfall cancel` treat it as they treat any job. When it ends, `canary_ended` records its
figures and verdict and either fails the run (no long job) or puts the run back in SUBMITTING with the canary's job
id on `submission.job_ids` (its late events are then ignored, and a recovering dispatcher never adopts it): the
dispatcher, the only part that submits jobs, then submits the long job through its exactly-once claim, after
planning the run again when the verdict is `replan`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from functions.records.run_rules import Step, transitioned
from schemas.canary import BUCKET_BYTES, CANARY_STEPS, CanaryFigures, CanaryRecord
from schemas.plan import Plan
from schemas.run_record import RunError, RunRecord, RunState
from schemas.times import format_timestamp

CANARY_TIMEOUT_SECONDS = 1800
"""scheduling.timeout of a canary job: start-up, a few steps, one all-reduce and a checkpoint fit well inside."""


def canary_due(run: RunRecord, min_hours: float, *, first_runs: bool = False) -> bool:
    """Whether the run's next job is its canary (canary_reason says why)."""
    return bool(canary_reason(run, min_hours, first_runs=first_runs))


def canary_reason(run: RunRecord, min_hours: float, *, first_runs: bool = False) -> str:
    """Why the run's next job is its canary, "" when it is not. A run that has had no canary (one that ended for
    capacity is cleared, so the next plan gets one) gets one when its plan's estimate is longer than min_hours
    (LANDFALL_CANARY_MIN_HOURS), or, with `first_runs` (LANDFALL_CANARY_FIRST_RUNS), when it is the first run of its
    workload on its GPU shape (the plan's step time is not a measurement of this workload there) and the canary costs
    no more than the run at p90: a plan nobody has measured is proven before it is paid for, whatever its length."""
    plan = run.plan
    if run.canary is not None or plan is None:
        return ""
    if plan.estimated_hours > min_hours:
        return (
            f"the plan's estimate of {plan.estimated_hours:.2f} h is over LANDFALL_CANARY_MIN_HOURS ({min_hours:g} h)"
        )
    if not first_runs or not first_on_shape(plan):
        return ""
    canary, run_p90 = canary_cost_usd(plan), plan.p90_cost_usd or plan.estimated_cost_usd
    if canary > run_p90:
        return ""
    return (
        f"the first run of this workload on {plan.replica_count} x {plan.machine_type} with "
        f"{plan.accelerator_count} x {plan.accelerator_type} (its step time is {plan.figures_from or 'the model'}): "
        f"a canary of about ${canary:.4f} proves it before the run's ${run_p90:.4f} at p90"
    )


def first_on_shape(plan: Plan) -> bool:
    """Whether the plan is on GPUs whose step time for this workload nobody has measured (a measured run or canary of
    it on this shape makes its figures_from "measured: ..."). CPU machines are left out: their canary proves little
    a run's first minutes do not."""
    gpus = bool(plan.accelerator_type) and plan.accelerator_count > 0
    return gpus and not plan.figures_from.startswith("measured:")


def canary_cost_usd(plan: Plan) -> float:
    """What the plan's canary costs: its own start-up (the plan's, whatever the run's steps do not account for) and
    CANARY_STEPS steps at the planned step time, at the plan's price."""
    startup = max(plan.estimated_hours * 3600 - plan.estimated_steps * plan.estimated_step_time_seconds, 0.0)
    return (startup + CANARY_STEPS * plan.estimated_step_time_seconds) / 3600 * plan.hourly_cost_usd


def bucket_bytes(plan: Plan) -> int:
    return max(4, min(BUCKET_BYTES, 4 * plan.model_parameters))


@dataclass(frozen=True)
class Verdict:
    status: str
    """passed, replan or failed (schemas/canary.py STATUSES)."""
    message: str


def _off(measured: float, planned: float) -> float:
    return measured / planned - 1.0 if planned > 0 else 0.0


def judge(plan: Plan, figures: CanaryFigures, margin: float) -> Verdict:
    """What the canary's figures say: failed when something failed, replan when its step time or (GPU) peak memory
    is off the plan's by more than margin (LANDFALL_CANARY_MARGIN) either way, else passed. Each figure is named
    beside the plan's."""
    if figures.failed:
        return Verdict("failed", f"the canary failed: {figures.failed}")
    if figures.checkpoint_ok is False:
        return Verdict("failed", "the canary's checkpoint did not read back as written")
    said: list[str] = []
    off_by: list[str] = []
    if figures.step_seconds is not None:
        off = _off(figures.step_seconds, plan.estimated_step_time_seconds)
        said.append(
            f"step {figures.step_seconds:.3g} s vs planned {plan.estimated_step_time_seconds:.3g} s ({off:+.0%})"
        )
        if abs(off) > margin:
            off_by.append("step time")
    else:
        said.append("step time not reported")
    if figures.peak_memory_bytes is not None and figures.memory_kind == "gpu":
        off = _off(figures.peak_memory_bytes, plan.memory.total_bytes)
        said.append(
            f"peak GPU memory {figures.peak_memory_bytes / 1e9:.3g} GB vs planned "
            f"{plan.memory.total_bytes / 1e9:.3g} GB ({off:+.0%})"
        )
        if abs(off) > margin:
            off_by.append("peak memory")
    elif figures.peak_memory_bytes is not None:
        said.append(f"peak memory {figures.peak_memory_bytes / 1e9:.3g} GB ({figures.memory_kind}, not compared)")
    if figures.allreduce_gbps is not None:
        said.append(f"all-reduce {figures.allreduce_gbps:.3g} GB/s over {figures.processes or 1} processes")
    summary = "; ".join(said)
    if off_by:
        return Verdict(
            "replan", f"{' and '.join(off_by)} off the plan by more than {margin:.0%}: {summary}; planned again"
        )
    return Verdict("passed", f"within {margin:.0%} of the plan: {summary}")


def canary_started(record: CanaryRecord) -> Step[bool]:
    """Record the canary job on the run (the dispatcher's write with the job)."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, bool]:
        if cur is None:
            return None, False
        return replace(cur, canary=record), True

    return step


CANARY_COST_BASIS = "the canary's running time x the plan's hourly cost (no long job ran)"


def canary_ended(
    job_name: str,
    status: str,
    *,
    verdict: str,
    figures: CanaryFigures | None,
    now: datetime,
    error: RunError | None = None,
    warnings: Sequence[str] = (),
    spent_usd: float = 0.0,
) -> Step[str]:
    """The run's canary job ended: record its figures and verdict (and `warnings`: what was left out of what it
    reported; what it cost, `spent_usd`, in cost.earlier_usd, and in actual_usd of a run it ends), then FAILED (status
    failed, with error), CANCELLED (status cancelled), or SUBMITTING for the long job (passed or replan; outcome
    "resubmit"). "stale" when the job is not the run's running canary (an old or repeated event)."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, str]:
        if (
            cur is None
            or cur.canary is None
            or cur.canary.status != "running"
            or cur.canary.job_name != job_name
            or cur.state.terminal
        ):
            return None, "stale"
        stamp = format_timestamp(now)
        canary = cur.canary.ended(status, at=stamp, figures=figures, verdict=verdict)
        cur = replace(cur, cost=cur.cost.with_earlier(spent_usd))
        if status in ("failed", "cancelled"):
            state = RunState.FAILED if status == "failed" else RunState.CANCELLED
            paid = cur.cost.earlier_usd or 0.0  # the run ends with its canary: that is what it cost
            new = transitioned(
                cur,
                state,
                now=now,
                detail=f"canary {status}: {verdict}",
                change=lambda r: replace(
                    r.warned(warnings),
                    canary=canary,
                    error=error if error is not None else r.error,
                    cost=replace(r.cost, actual_usd=round(paid, 6), actual_basis=CANARY_COST_BASIS),
                ),
            )
            return new, status
        vertex_id = cur.vertex.job_id if cur.vertex is not None and cur.vertex.job_name == job_name else ""
        sub = cur.submission
        handed_back = replace(
            cur.warned(warnings),
            canary=canary,
            vertex=None,
            timings=cur.timings.next_job() if spent_usd > 0 else cur.timings,
            submission=replace(
                sub,
                owner="",
                lease_until=stamp,
                job_ids=(*(sub.job_ids or ()), *((vertex_id,) if vertex_id else ())),
            ),
        )
        new = transitioned(
            cur, RunState.SUBMITTING, now=now, detail=f"canary {status}: {verdict}", change=lambda r: handed_back
        )
        return new, "resubmit" if new is not None else f"unchanged:{cur.state}"

    return step


def canary_cleared(job_name: str) -> Step[bool]:
    """The canary ended for capacity: forget it, so that the run's next plan gets a canary of its own (the capacity
    rules then record the job and move the run on, functions/records/attempts.py)."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, bool]:
        if cur is None or cur.canary is None or cur.canary.job_name != job_name:
            return None, False
        return replace(cur, canary=None), True

    return step


def replanned(plan: Plan, fallbacks: tuple[Plan, ...], note: str, *, owner: str, now: datetime) -> Step[bool]:
    """The run planned again from its canary's figures: the new plan (its `reasons` say so), its fallbacks, the
    attempts started afresh, the canary marked replanned. False (nothing written) unless the canary says replan and
    `owner` still holds the submission claim."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, bool]:
        if (
            cur is None
            or cur.canary is None
            or cur.canary.status != "replan"
            or cur.submission.owner != owner
            or cur.state != RunState.SUBMITTING
        ):
            return None, False
        noted = replace(plan, reasons=(note, *plan.reasons))
        canary = replace(cur.canary, status="replanned")
        new = transitioned(
            cur,
            cur.state,
            now=now,
            change=lambda r: replace(
                r,
                plan=noted,
                canary=canary,
                cost=replace(r.cost, estimated_usd=noted.estimated_cost_usd),
                submission=replace(r.submission, fallbacks=fallbacks, attempts=()),
            ),
        )
        return new, new is not None

    return step


__all__ = [
    "CANARY_TIMEOUT_SECONDS",
    "Verdict",
    "bucket_bytes",
    "canary_cleared",
    "canary_cost_usd",
    "canary_due",
    "canary_ended",
    "canary_reason",
    "canary_started",
    "first_on_shape",
    "judge",
    "replanned",
]
