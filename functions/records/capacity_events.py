"""What capacity a run's jobs met, as capacity events (schemas/capacity_event.py), and those events as the planner's
capacity history (functions/planning/risk.py). Pure: the listener and the dispatcher write the events, the
dispatcher reads them back (functions/wiring.py)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from functions.planning.risk import CapacityHistory, CapacityObservation
from functions.records.failure_reasons import classify
from schemas.capacity_event import OUTCOMES, REFUSALS, SUCCEEDED, CapacityEvent, job_event_id, refused_event_id
from schemas.job_view import JobView
from schemas.plan import Plan
from schemas.run_record import RunRecord, SubmissionAttempt
from schemas.times import format_timestamp, parse_timestamp_or_none
from schemas.vocabulary import PLATFORM, STOCKOUT

MAX_HOURS = 24.0 * 7


def _hours(start: str, end: str) -> float:
    """Hours from start to end (0 when either is unknown or the clock ran backwards), at most Vertex's 7 days."""
    a, b = parse_timestamp_or_none(start), parse_timestamp_or_none(end)
    if a is None or b is None or b <= a:
        return 0.0
    return min((b - a).total_seconds() / 3600.0, MAX_HOURS)


def job_ended(run: RunRecord, job: JobView, reason: str | None, now: datetime) -> CapacityEvent | None:
    """The event of a run's job that ended: its plan's machines and sale mode, how long they ran, and how it ended
    (`reason`: the failure reason, None for a success). None when the run has no plan to say what the job ran on."""
    plan = run.plan
    if plan is None or not plan.region:
        return None
    outcome = SUCCEEDED if reason is None else reason if reason in OUTCOMES else PLATFORM
    ran = _hours(job.start_time, job.end_time)
    refused = outcome in REFUSALS
    return CapacityEvent(
        event_id=job_event_id(job.name),
        kind="job",
        region=plan.region,
        machine_type=plan.machine_type,
        accelerator_type=plan.accelerator_type or "",
        mode=plan.mode,
        nodes=max(1, plan.replica_count),
        outcome=outcome,
        at=job.end_time or format_timestamp(now),
        run_id=run.run_id,
        lost_seconds=_hours(job.create_time, job.end_time) * 3600.0 if refused else 0.0,
        running_hours=0.0 if refused else ran,
    )


def call_refused(run_id: str, attempt: SubmissionAttempt, message: str, now: datetime) -> CapacityEvent:
    """The event of a CreateCustomJob call Vertex refused for capacity: a quota or a stockout, read from its text."""
    plan: Plan = attempt.plan
    found = classify(None, message, 0).reason
    return CapacityEvent(
        event_id=refused_event_id(run_id, attempt.at, plan.region, plan.machine_type),
        kind="refused",
        region=plan.region,
        machine_type=plan.machine_type,
        accelerator_type=plan.accelerator_type or "",
        mode=plan.mode,
        nodes=max(1, plan.replica_count),
        outcome=found if found in REFUSALS else STOCKOUT,
        at=format_timestamp(now),
        run_id=run_id,
    )


def capacity_history(events: Iterable[CapacityEvent]) -> CapacityHistory:
    """The planner's history: each event as what its GPU kind met in its region and sale mode."""
    return CapacityHistory.of(
        CapacityObservation(
            accelerator_type=e.accelerator_type,
            region=e.region,
            mode=e.mode,
            nodes=e.nodes,
            refused=e.refused,
            lost_seconds=e.lost_seconds,
            running_hours=e.running_hours,
            preempted=e.preempted,
        )
        for e in events
    )
