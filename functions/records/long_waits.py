"""Pure rules for a job that waits long before it starts: what the run's `long_wait` note says, when the reconciler
writes it, and how it is closed when the job starts. Applied as run_rules steps, so in one transaction.

A job is created QUEUED or PENDING. Once it has waited longer than LANDFALL_LONG_WAIT_SECONDS the reconciler notes
on the run why it waits (WAIT_REASONS); the note is written again only when what it says changes (another state,
another job), so passes that find the same wait write nothing. When the job starts (or ends) the note is closed
with `over_at`, never deleted: the run keeps how long its job waited. A later attempt's job gets a note of its own.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from functions.records.run_rules import Step, transitioned
from schemas.job_view import JobView
from schemas.plan import Plan
from schemas.run_record import LongWait, RunRecord
from schemas.times import format_timestamp, parse_timestamp_or_none

WAIT_REASONS = {
    "JOB_STATE_QUEUED": "queued: Vertex AI has not admitted the job yet (the project's quota for {shape} in "
    "{region}, or its queue of jobs)",
    "JOB_STATE_PENDING": "pending provisioning: Vertex AI is finding {shape} in {region}",
}
"""Why a job in each waiting state waits; {shape} and {region} come from the run's plan."""

FLEX_START_PENDING = (
    "pending provisioning: FLEX_START waits for {shape} in {region} up to its max_wait_duration ({max_wait} s)"
)
"""A FLEX_START job waits for capacity by design (Dynamic Workload Scheduler)."""

WAITING_JOB_STATES = frozenset(WAIT_REASONS)


def wait_reason(job_state: str, plan: Plan | None, region: str) -> str:
    """Why a job in job_state waits, for a person."""
    if plan is None:
        shape = "its machines"
    else:
        gpus = f" with {plan.accelerator_count} x {plan.accelerator_type}" if plan.accelerator_type else ""
        shape = f"{plan.replica_count} x {plan.machine_type}{gpus}"
    if job_state == "JOB_STATE_PENDING" and plan is not None and plan.consumption.waits:
        return FLEX_START_PENDING.format(shape=shape, region=region, max_wait=plan.max_wait_seconds)
    return WAIT_REASONS[job_state].format(shape=shape, region=region)


def waiting_since(run: RunRecord, job: JobView) -> datetime | None:
    """When the job started waiting: its create time (else when the run recorded it submitted)."""
    return parse_timestamp_or_none(job.create_time) or parse_timestamp_or_none(run.timings.submitted_at or "")


def long_wait_noted(job: JobView, *, now: datetime, threshold_seconds: int) -> Step[str]:
    """Note on the run why its current job waits, once it has waited threshold_seconds. Outcomes: "noted" (written),
    "same" (the note already says this: nothing written), "short" (not waited that long), "not-waiting" (the job
    is not QUEUED/PENDING, or is not the run's current job, or the run has ended)."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, str]:
        if (
            cur is None
            or cur.state.terminal
            or cur.vertex is None
            or cur.vertex.job_name != job.name
            or job.state not in WAITING_JOB_STATES
        ):
            return None, "not-waiting"
        since = waiting_since(cur, job)
        if since is None or (now - since).total_seconds() < threshold_seconds:
            return None, "short"
        note = LongWait(
            job_name=job.name,
            job_state=job.state,
            reason=wait_reason(job.state, cur.plan, cur.vertex.region),
            since=format_timestamp(since),
            noted_at=format_timestamp(now),
        )
        old = cur.long_wait
        if old is not None and replace(old, noted_at=note.noted_at) == note:
            return None, "same"
        return transitioned(cur, cur.state, now=now, change=lambda r: replace(r, long_wait=note)), "noted"

    return step


def long_wait_closed(run: RunRecord, job: JobView, now: datetime) -> RunRecord:
    """The run with its open note closed once it no longer describes a waiting job: `job` (the run's current job)
    has left QUEUED/PENDING (over at its start time), or the note was about an earlier attempt's job (over now)."""
    note = run.long_wait
    if note is None or note.over_at is not None:
        return run
    if note.job_name == job.name and job.state in WAITING_JOB_STATES:
        return run
    start = parse_timestamp_or_none(job.start_time) if note.job_name == job.name else None
    return replace(run, long_wait=replace(note, over_at=format_timestamp(start or now)))


__all__ = ["WAITING_JOB_STATES", "WAIT_REASONS", "long_wait_closed", "long_wait_noted", "wait_reason", "waiting_since"]
