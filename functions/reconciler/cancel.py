"""Cancel a run on request (`landfall cancel RUN_ID`): who asked and when go on the run in a transaction, then
Vertex is asked to cancel its job; the listener (or the reconciler) records CANCELLED when the job has stopped.
A run with no job yet is CANCELLED at once, so the dispatcher never submits it; a run being submitted (SUBMITTING)
keeps the request, which the delivery holding its claim reads before CreateCustomJob (then it ends CANCELLED with no
job) or, when the job was being created meanwhile, right after recording the job (then it cancels that job at
once); an ended run is left as it is."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from functions.gcp.vertex import VertexJobs
from functions.records.run_rules import RunsRules, Step, transitioned
from schemas.run_record import CancelRequest, RunError, RunRecord, RunState
from schemas.times import format_timestamp
from schemas.vocabulary import CANCELLED


def cancel_step(by: str, now: datetime) -> Step[tuple[str, RunRecord | None]]:
    """Record the request; result: ("ended"|"missing"|"stopped"|"job", the record after)."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, tuple[str, RunRecord | None]]:
        if cur is None:
            return None, ("missing", None)
        if cur.state.terminal:
            return None, ("ended", cur)
        request = cur.submission.cancel or CancelRequest(by=by, at=format_timestamp(now))

        def asked(r: RunRecord) -> RunRecord:
            return replace(r, submission=replace(r.submission, cancel=request))

        if cur.vertex is None and cur.state != RunState.SUBMITTING:
            message = f"cancelled by {request.by} at {request.at}, {_no_job_now(cur)}"
            new = transitioned(
                cur,
                RunState.CANCELLED,
                now=now,
                detail=message,
                change=lambda r: replace(asked(r), error=RunError("cancelled", message, reason=CANCELLED)),
            )
            return new, ("stopped", new)
        new = transitioned(cur, cur.state, now=now, change=asked)
        return new, ("job", new)

    return step


def _no_job_now(run: RunRecord) -> str:
    """Where a run with no job stood when it was cancelled: before any submission, or waiting for capacity after
    its jobs ended (submission.jobs) or its CreateCustomJob calls were refused (submission.attempts)."""
    if run.state != RunState.WAITING:
        return "before a job was submitted"
    ended, tried = run.submission.jobs or (), run.submission.attempts or ()
    if ended:
        return (
            f"while it waited for capacity ({len(ended)} job(s) ended, the last for {ended[-1].reason} in "
            f"{ended[-1].region}); no job was running"
        )
    if tried:
        counted = run.submission.refusals
        refused = counted.refused if counted is not None else len(tried)  # the attempts kept are the last ones only
        return f"while it waited for capacity ({refused} submission(s) refused); no job was running"
    return "before a job was submitted"


def cancel_run(run_id: str, *, by: str, store: RunsRules, vertex: VertexJobs, now: datetime) -> str:
    """What happened, in one line for a person."""
    outcome, run = store.apply(run_id, cancel_step(by, now))
    if outcome == "missing":
        return f"no run {run_id}"
    if outcome == "ended" and run is not None:
        return f"run {run_id} already ended {run.state}; nothing changed"
    if outcome == "stopped" and run is not None and len(run.history) > 1 and run.history[-2].state == RunState.WAITING:
        return f"run {run_id} CANCELLED while it waited for capacity (no job was running)"
    if outcome == "stopped":
        return f"run {run_id} CANCELLED before submission"
    if run is None or run.vertex is None:
        return (
            f"run {run_id} is being submitted; the cancel request is recorded: the delivery submitting it ends it "
            "CANCELLED before creating a job, or cancels at once the job it has just created"
        )
    if vertex.cancel(run.vertex.job_name):
        return f"run {run_id}: asked Vertex to cancel job {run.vertex.job_name}; the run ends CANCELLED when it stops"
    return f"run {run_id}: job {run.vertex.job_name} had already ended; the listener records how"


__all__ = ["cancel_run", "cancel_step"]
