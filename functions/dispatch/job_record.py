"""The run's record of its submission: the CreateCustomJob attempts (each on record before it is made), the job once
created (SUBMITTED), a job superseded by a takeover, and the ends a claimed run can come to before its job exists
(a cancel recorded meanwhile)."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import Any

from functions.dispatch import job_spec
from functions.dispatch.deps import DispatchDeps
from functions.dispatch.outcomes import Outcome, Said
from functions.dispatch.ownership import lost_claim, owned
from functions.dispatch.queueing import queue_over
from functions.errors import PermanentError, TransientError
from functions.gcp.vertex import JobView
from functions.records import attempts as attempt_rules
from functions.records import run_rules
from functions.records.run_rules import Change, transitioned
from schemas.canary import CanaryRecord
from schemas.plan import Plan
from schemas.run_record import (
    Artifacts,
    AttemptKind,
    AttemptOutcome,
    CancelRequest,
    JobAttempt,
    RunError,
    RunRecord,
    RunState,
    SubmissionAttempt,
    VertexJobRef,
)
from schemas.times import format_timestamp
from schemas.vocabulary import CANCELLED

log = logging.getLogger("landfall.dispatch")

FALLBACKS_KEPT = 3
"""How many next-best plans a run keeps to fall back on when a region refuses the chosen one for capacity."""

SUPERSEDED = "superseded"
"""The JobAttempt reason of a second job a delivery created after its claim was taken over (not in any round)."""


def pending_attempt(plan: Plan, at: str, run: RunRecord) -> SubmissionAttempt:
    """The attempt on plan, recorded before its CreateCustomJob call."""
    return SubmissionAttempt(
        region=plan.region,
        machine_type=plan.machine_type,
        at=at,
        outcome=AttemptOutcome(AttemptKind.PENDING).text,
        plan=plan,
        round=run.submission.round or 0,
        reason=attempt_rules.attempt_reason(run, plan),
    )


def first_attempt(at: str) -> run_rules.FirstAttempt:
    """The claim's first attempt, pending, on the first plan still to try."""

    def first(run: RunRecord) -> SubmissionAttempt | None:
        plans = attempt_rules.candidates(run)
        return pending_attempt(plans[0], at, run) if plans else None

    return first


def failed(code: str, message: str, attempts: list[SubmissionAttempt]) -> Change:
    recorded = attempt_rules.with_attempts(attempts)
    return lambda r: replace(recorded(r), error=RunError(code, message))


def next_attempt_step(
    owner: str, now: datetime, attempts: list[SubmissionAttempt], lease_until: str
) -> run_rules.Step[bool | CancelRequest]:
    """Record the next attempt, pending, and renew the lease, while this delivery holds the claim; result: True, False
    (the claim was taken over: nothing written) or the cancel request recorded meanwhile (nothing written)."""
    recorded = attempt_rules.with_attempts(attempts, lease_until=lease_until)

    def change(r: RunRecord) -> RunRecord:
        new = recorded(r)
        queued = new.submission.queued
        if queued is None or not queued.reserved:
            return new
        # the call about to be made uses the run's limiter slot: a later try takes a new one
        return replace(new, submission=replace(new.submission, queued=replace(queued, reserved=False)))

    def step(cur: RunRecord) -> tuple[RunRecord | None, bool | CancelRequest]:
        if cur.submission.cancel is not None:
            return None, cur.submission.cancel
        return transitioned(cur, cur.state, now=now, change=change), True

    return owned(owner, step, lost=False)


def cancelled_before_create(
    run_id: str, owner: str, attempts: list[SubmissionAttempt], cancel: CancelRequest, deps: DispatchDeps
) -> Outcome:
    """A cancel was recorded while the run was being submitted: end it CANCELLED, creating no job (a delivery that
    went on would create the job and the run end SUCCEEDED with the cancel request on it)."""
    message = f"cancelled by {cancel.by} at {cancel.at}, while it was being submitted; no job was created"
    stamp = format_timestamp(deps.now())
    recorded = attempt_rules.with_attempts(attempts, lease_until=stamp)
    now = deps.now()

    def step(cur: RunRecord) -> tuple[RunRecord | None, bool]:
        new = transitioned(
            cur,
            RunState.CANCELLED,
            now=now,
            detail=message,
            change=lambda r: replace(recorded(r), error=RunError("cancelled", message, reason=CANCELLED)),
        )
        return new, new is not None

    if not deps.store.apply(run_id, owned(owner, step, lost=False)):
        return lost_claim(run_id, "while ending it for its cancel request")
    log.info("run %s: %s", run_id, message)
    return Outcome(Said.CANCELLED, "before-create")


def record_submitted(
    run_id: str,
    job: JobView,
    plan: Plan,
    attempts: list[SubmissionAttempt],
    owner: str,
    deps: DispatchDeps,
    *,
    canary: bool = False,
    canary_why: str = "",
    team: str = "",
) -> Outcome:
    """Record the job as the run's (SUBMITTED) while this delivery still holds the submission claim. A delivery that
    outlived its lease, and whose claim another delivery took over meanwhile, records nothing over the other's work:
    its job is either the one the other adopted, or a second job, which it cancels and records as superseded (found
    by the fault campaign: a slow CreateCustomJob past the lease made two jobs for one attempt)."""
    now = deps.now()
    stamp = format_timestamp(now)
    vertex = VertexJobRef(
        job_name=job.name, job_id=job.job_id, region=job.region, display_name=job.display_name, state=job.state
    )
    artifacts = Artifacts(**job_spec.artifacts(deps.settings, run_id, plan.region, team))
    recorded = attempt_rules.with_attempts(attempts, lease_until=stamp)
    started = (
        CanaryRecord(
            status="running",
            job_name=job.name,
            job_id=job.job_id,
            region=job.region,
            machine_type=plan.machine_type,
            submitted_at=stamp,
            planned_step_seconds=plan.estimated_step_time_seconds,
            planned_memory_bytes=plan.memory.total_bytes,
            why=canary_why,
        )
        if canary
        else None
    )
    outcome = deps.store.apply(
        run_id,
        submitted_step(
            job,
            owner,
            now,
            lambda r: replace(
                recorded(r),
                plan=plan,
                vertex=vertex,
                artifacts=artifacts,
                timings=replace(r.timings, submitted_at=stamp),
                submission=replace(recorded(r).submission, queued=queue_over(r.submission.queued, stamp)),
                canary=started or r.canary,
            ).warned(job_spec.label_warnings(labels_of(r))),
            canary=canary,
        ),
    )
    if outcome.kind == Said.CANCEL_AT_ONCE:
        return cancel_at_once(run_id, job, deps)
    if outcome.kind == Said.SUPERSEDED:
        log.warning(
            "run %s: its submission claim was taken over while job %s was being created; the run has "
            "another job, so this one is cancelled and recorded as superseded",
            run_id,
            job.name,
        )
        try:
            deps.vertex.cancel(job.name)
        except (TransientError, PermanentError) as exc:
            log.warning(
                "run %s: cancelling superseded job %s failed (%s); it stays recorded on the run", run_id, job.name, exc
            )
    return outcome


def labels_of(run: RunRecord) -> dict[str, Any]:
    """The labels of the request kept on the run."""
    labels = run.request.get("labels")
    return labels if isinstance(labels, dict) else {}


def cancel_at_once(run_id: str, job: JobView, deps: DispatchDeps) -> Outcome:
    """The job was created while a cancel was being recorded on the run: cancel it now, not at the next reconcile
    pass (the listener records CANCELLED when it stops; should Vertex not answer, the reconciler asks again)."""
    try:
        asked = deps.vertex.cancel(job.name)
    except (TransientError, PermanentError) as exc:
        log.warning("run %s: cancelling job %s failed (%s); the reconciler asks again", run_id, job.name, exc)
        return Outcome(Said.SUBMITTED, "cancel-pending")
    log.info("run %s: cancel recorded while job %s was being created; Vertex asked to cancel it", run_id, job.name)
    return Outcome(Said.SUBMITTED, "cancel-requested" if asked else "job-ended")


def submitted_step(
    job: JobView, owner: str, now: datetime, change: Change, *, canary: bool = False
) -> run_rules.Step[Outcome]:
    """Record the job on the run: SUBMITTED while `owner` holds the claim; else adopted (the run records it already),
    or superseded (another delivery's job is the run's: this one is recorded as superseded, to be cancelled). A job
    the run records as ended or superseded already (a recovering delivery read the run before the job's creator,
    whose claim it took over, cancelled that job) is KNOWN: not adopted; a new job is submitted."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, Outcome]:
        if cur is None:
            return None, Outcome(Said.GONE)
        if cur.submission.owner == owner:
            if attempt_rules.is_earlier_job(cur, job.name):
                return None, Outcome(Said.KNOWN)
            what = "canary job" if canary else "Vertex job"
            new = transitioned(cur, RunState.SUBMITTED, now=now, detail=f"{what} {job.name}", change=change)
            if new is None:
                return None, Outcome(Said.UNCHANGED, cur.state.value)
            return new, Outcome(Said.SUBMITTED if cur.submission.cancel is None else Said.CANCEL_AT_ONCE)
        if (cur.vertex is not None and cur.vertex.job_name == job.name) or attempt_rules.is_earlier_job(cur, job.name):
            return None, Outcome(Said.ADOPTED)
        stamp = format_timestamp(now)
        superseded = JobAttempt(
            job_name=job.name,
            region=job.region,
            machine_type=cur.plan.machine_type if cur.plan else "",
            reason=SUPERSEDED,
            message="created by a delivery whose submission claim was taken over; cancelled",
            at=stamp,
            round=-1,
        )
        sub = cur.submission
        new = transitioned(
            cur,
            cur.state,
            now=now,
            change=lambda r: replace(
                r,
                submission=replace(
                    sub, jobs=(*(sub.jobs or ()), superseded), job_ids=(*(sub.job_ids or ()), job.job_id)
                ),
            ),
        )
        return new, Outcome(Said.SUPERSEDED)

    return step


def plan_summary(plan: Plan) -> str:
    gpus = f"{plan.accelerator_count} x {plan.accelerator_type}" if plan.accelerator_type else "no GPU"
    return (
        f"{plan.replica_count} x {plan.machine_type} ({gpus}) in {plan.region}, {plan.layout}, {plan.consumption.tag}"
    )


__all__ = [
    "FALLBACKS_KEPT",
    "SUPERSEDED",
    "cancel_at_once",
    "cancelled_before_create",
    "failed",
    "first_attempt",
    "labels_of",
    "next_attempt_step",
    "pending_attempt",
    "plan_summary",
    "record_submitted",
    "submitted_step",
]
