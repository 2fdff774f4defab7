"""Pure rules for orphan jobs: which labelled Vertex job no run accounts for, and the steps that record the
reconciler's cancel of one (functions/gcp/orphans_store.py applies them in transactions, tests/fakes/orphans.py under
a lock).

A job carrying `landfall-run-id` is accounted for when that run records it: as its current job (`vertex.job_name`)
or an earlier attempt's (`submission.jobs`, `submission.job_ids`). A run being submitted (no job recorded yet, not
ended) accounts for every job with its label: the dispatcher adopts such a job (find_by_run) instead of making
another. Jobs younger than the grace (the submission lease) are never orphans: their run may not be written yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from functions.records.attempts import known_jobs
from schemas.job_view import RUN_LABEL, JobView
from schemas.orphan_record import CANCEL_OUTCOMES, OrphanCancel, OrphanKind, OrphanRecord
from schemas.run_record import RunRecord
from schemas.times import format_timestamp, parse_timestamp_or_none

OrphanStep = Callable[[OrphanRecord | None], tuple[OrphanRecord | None, bool]]
"""Given the stored record (None: absent), the record to write (None: nothing) and whether it was written."""


def orphan_of(job: JobView, run: RunRecord | None, *, now: datetime, grace_seconds: int) -> OrphanRecord | None:
    """The orphan record of a labelled job, or None when its run accounts for it (or it is too young to tell)."""
    created = parse_timestamp_or_none(job.create_time)
    if created is None or (now - created).total_seconds() < grace_seconds:
        return None
    run_id = job.labels.get(RUN_LABEL, "")
    run_job: str | None = None
    if run is None:
        kind = OrphanKind.NO_RUN
        reason = f"its label {RUN_LABEL}={run_id} names no run"
    else:
        if run.vertex is not None and run.vertex.job_name == job.name:
            return None
        if job.name in known_jobs(run) or job.job_id in (run.submission.job_ids or ()):
            return None
        if run.vertex is None and not run.state.terminal:
            return None  # the run is being submitted (or waits): the dispatcher adopts its labelled job
        kind = OrphanKind.OTHER_JOB
        run_job = None if run.vertex is None else run.vertex.job_name
        reason = f"run {run_id} ({run.state}) records " + (f"job {run_job}" if run_job else "no job") + ", not this one"
    return OrphanRecord(
        job_name=job.name,
        job_id=job.job_id,
        region=job.region,
        run_id=run_id,
        kind=kind,
        reason=reason,
        job_state=job.state,
        job_created_at=format_timestamp(created),
        found_at=format_timestamp(now),
        display_name=job.display_name,
        run_job_name=run_job,
    )


def cancel_claimed(*, now: datetime) -> OrphanStep:
    """Claim the cancel of a recorded orphan (outcome "asking"): only once, unless the last try ended in an error."""

    def step(cur: OrphanRecord | None) -> tuple[OrphanRecord | None, bool]:
        if cur is None or (cur.cancel is not None and cur.cancel.outcome in CANCEL_OUTCOMES):
            return None, False
        return replace(cur, cancel=OrphanCancel(at=format_timestamp(now), outcome="asking")), True

    return step


def cancel_noted(outcome: str) -> OrphanStep:
    """Record what Vertex answered to the claimed cancel: asked, had-ended, or "error: ..."."""

    def step(cur: OrphanRecord | None) -> tuple[OrphanRecord | None, bool]:
        if cur is None or cur.cancel is None:
            return None, False
        return replace(cur, cancel=replace(cur.cancel, outcome=outcome)), True

    return step


__all__ = ["OrphanStep", "cancel_claimed", "cancel_noted", "orphan_of"]
