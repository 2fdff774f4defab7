"""Recording a Vertex job's state on its run: the rule the listener applies to each job event and the reconciler to
each job it re-reads (functions/listener/handler.py, functions/reconciler/handler.py). It sets the run's state, times
and actual cost, and for an ended job its metrics or its error with the reason (failure_reasons table) and the
trainer's own account (its failure.json, schemas/trainer_failure.py); a job that ended for capacity sends the run on
to its next plan.

One layer below the handlers, so two handlers share it without one importing the other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

from functions.canary_states import canary_job_ended, canary_model_dir, is_running_canary
from functions.fault_points import fault_point
from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import VertexJobs
from functions.records.attempts import AttemptPolicy, capacity_ended, job_spend, with_resumed_from
from functions.records.canary import canary_cleared
from functions.records.capacity_events import job_ended
from functions.records.continuation import (
    Committed,
    ContinuationPolicy,
    JobTimes,
    extension,
    not_extended,
    timeout_extended,
)
from functions.records.failure_reasons import classify
from functions.records.long_waits import long_wait_closed
from functions.records.run_rules import Step, merge, transition
from schemas import json_text
from schemas.canary import CanaryFigures
from schemas.capacity_event import CapacityEvent
from schemas.data_objects import INLINE_LIST_BYTES, DataRead, encode_objects, parse_data_read
from schemas.errors import SchemaError
from schemas.fields import Reader
from schemas.job_view import JobView
from schemas.money import usd_text
from schemas.run_metrics import resumed_from_step, stored_metrics
from schemas.run_record import Cost, RunError, RunRecord, RunState, Timings
from schemas.times import format_timestamp, parse_timestamp_or_none
from schemas.trainer_failure import FAILURE_FILE, parse_trainer_failure
from schemas.user_metrics import METRICS_LINES_FILE, metrics_document
from schemas.vocabulary import BUDGET_EXCEEDED, CANCELLED, CAPACITY_REASONS, STOCKOUT, TIMEOUT, TIMEOUT_EXTENDED

log = logging.getLogger("landfall.job_events")

# Vertex JobState -> run state; states absent here (QUEUED, PENDING, CANCELLING...) change nothing on the run.
RUN_STATE_FOR_JOB_STATE = {
    "JOB_STATE_RUNNING": RunState.RUNNING,
    "JOB_STATE_SUCCEEDED": RunState.SUCCEEDED,
    "JOB_STATE_FAILED": RunState.FAILED,
    "JOB_STATE_EXPIRED": RunState.FAILED,
    "JOB_STATE_CANCELLED": RunState.CANCELLED,
    "JOB_STATE_PARTIALLY_SUCCEEDED": RunState.FAILED,
}
DEFAULT_POLICY = AttemptPolicy()
DEFAULT_CONTINUATION = ContinuationPolicy()
ACTUAL_COST_BASIS = "run seconds x the plan's hourly cost (machines + accelerators)"


@dataclass(frozen=True)
class JobStateDeps:
    """What recording a job's state reads and writes (the listener's dependencies, and the reconciler's for it)."""

    store: RunsStore
    vertex: VertexJobs
    read_text: Callable[[str], str | None]
    """Reads a gs:// object as text; None when it does not exist."""
    now: Callable[[], datetime]
    resubmit: Callable[[str], str] | None = None
    """Submits a run put back in SUBMITTING through the dispatcher's exactly-once path (None: leave it to the
    reconciler, which finds it SUBMITTING past its lease)."""
    policy: AttemptPolicy = DEFAULT_POLICY
    announce: Callable[[str], str] | None = None
    """Publishes RunFinished for a run that has ended, once (functions.records.results.announce); None: left to the
    reconciler, which announces ended runs not marked published."""
    canary_margin: float = 0.25
    """LANDFALL_CANARY_MARGIN: how far a canary's figures may be off the plan before the run is planned again."""
    measure: Callable[[RunRecord], None] | None = None
    """Records what a SUCCEEDED run measured in the `measurements` collection (idempotent: a repeated delivery
    merges the same figures); None: not recorded."""
    measure_canary: Callable[[RunRecord, CanaryFigures], None] | None = None
    """Records what a run's canary measured in the `measurements` collection (docs/canary.md); None: not recorded."""
    checkpoints: Callable[[RunRecord], Sequence[Committed]] | None = None
    """The committed checkpoints of the run's line, each with when its commit record was written (raises
    TransientError when the bucket cannot be read); None: a job that reaches its timeout is never continued."""
    continuation: ContinuationPolicy = DEFAULT_CONTINUATION
    """How a job that reached its timeout while training advanced is continued (functions/records/continuation.py)."""
    capacity: Callable[[CapacityEvent], None] | None = None
    """Records what capacity an ended job met (its machines' running time, a preemption, a refusal) in the
    `capacity_events` collection, which the planner prices (functions/records/capacity_events.py); idempotent: the
    event of a job is one document. None: not recorded."""


def record_job_state(run: RunRecord, job: JobView, deps: JobStateDeps) -> str:
    """Bring the run in line with the job as Vertex reports it (also used by the reconciler); a run that has ended
    is announced (RunFinished) on the way out, also on a repeated delivery whose publish had failed."""
    target = RUN_STATE_FOR_JOB_STATE.get(job.state)
    if run.canary is not None and run.canary.job_name == job.name and run.canary.status != "running":
        return f"ignored:canary-{run.canary.status}"  # its end is recorded (a repeated or late event of it)
    if target is not None and target.terminal and is_running_canary(run, job):
        error = _job_error(run, job, target, deps, model_dir=canary_model_dir(run))
        if target == RunState.FAILED and error is not None and error.reason in CAPACITY_REASONS:
            # the next plan gets a canary of its own
            deps.store.apply(run.run_id, canary_cleared(job.name))
            return _capacity_failure(run, job, error, deps)
        ended = canary_job_ended(run, job, target, error, deps)
        _capacity_noted(run, job, error.reason if error is not None else None, deps)  # its time counts as exposure
        return ended
    outcome = _record_job_state(run, job, deps)
    fault_point("listener.after_record")
    target = RUN_STATE_FOR_JOB_STATE.get(job.state)
    if deps.announce is not None and target is not None and target.terminal:
        log.info("run %s: %s", run.run_id, deps.announce(run.run_id))
    return outcome


def _record_job_state(run: RunRecord, job: JobView, deps: JobStateDeps) -> str:
    if run.vertex is not None and run.vertex.job_name != job.name:
        return "ignored:earlier-attempt"
    target = RUN_STATE_FOR_JOB_STATE.get(job.state)
    if target is None:
        now = deps.now()
        noted = merge(now=now, change=lambda r: _with_job(r, job, ended=False, now=now))
        deps.store.apply(run.run_id, _while_current(job.name, noted, None))
        return f"noted:{job.state}"
    metrics: dict[str, Any] | None = None
    error = _job_error(run, job, target, deps)
    if error is not None and target == RunState.FAILED and error.reason in CAPACITY_REASONS:
        return _capacity_failure(run, job, error, deps)
    stopped = _budget_stop(run, error) if target == RunState.FAILED else None
    if stopped is not None:  # Vertex stopped it where its budget ran out: cancelled for its budget, as the
        target, error = RunState.CANCELLED, stopped  # reconciler's cancel of a run over its budget ends
    elif target == RunState.FAILED and error is not None and error.reason == TIMEOUT and deps.checkpoints is not None:
        continued = _timeout_continued(run, job, error, deps)
        if isinstance(continued, str):
            return continued
        error = continued
    data: DataRead | None = None
    if target == RunState.SUCCEEDED:
        metrics, problem = _metrics(run, deps)
        if problem:
            error = RunError("metrics-missing", problem)
        metrics, data = _data_read(run, metrics)
    notes: list[str] = []
    if data is not None and len(encode_objects(data.objects).encode()) > INLINE_LIST_BYTES:
        # as the trainer keeps it (schemas/data_objects.py data_read): the list only while it fits, else the digest
        notes.append(f"metrics.data.objects left out: {len(data.objects)} objects past {INLINE_LIST_BYTES:,} bytes")
        data = replace(data, objects=())
    if metrics is not None:  # what the run's code wrote, held to the figure rules and the bounds of a stored value
        metrics, cut = stored_metrics(metrics)
        notes += cut
    for note in notes:
        log.warning("run %s: %s", run.run_id, note)

    now = deps.now()

    def change(r: RunRecord) -> RunRecord:
        out = _with_job(r, job, ended=target.terminal, now=now)
        if error is not None:
            out = replace(out, error=error)
        if target != RunState.SUCCEEDED:
            return out
        # the attempt that made this job keeps the step its training resumed from (its metrics, checked)
        return replace(
            with_resumed_from(out.warned(notes), resumed_from_step(metrics)), metrics=metrics, data_read=data
        )

    detail = job.error_message or f"Vertex job {job.state}"
    moved = transition(target, now=now, detail=detail, change=change)
    unchanged: tuple[RunRecord | None, bool] = (None, False)
    after, changed = deps.store.apply(run.run_id, _while_current(job.name, moved, unchanged))
    if changed and after is not None and target == RunState.SUCCEEDED and deps.measure is not None:
        deps.measure(after)  # what it measured, for the planner (functions/records/measurements.py)
    if target.terminal:  # also on a repeated delivery: the same document again
        _capacity_noted(run, job, error.reason if error is not None else None, deps)
    return f"{'recorded' if changed else 'unchanged'}:{target}"


def _capacity_noted(run: RunRecord, job: JobView, reason: str | None, deps: JobStateDeps) -> None:
    """Record what capacity the ended job met, for the planner (functions/records/capacity_events.py): best effort,
    logged when it fails (the event is one document, written again by a repeated delivery or the reconciler)."""
    if deps.capacity is None:
        return
    try:
        event = job_ended(run, job, reason, deps.now())
        if event is not None:
            deps.capacity(event)
    except Exception as exc:  # an observation for the planner: never the reason a run's event is held back
        log.warning("run %s: capacity met by job %s not recorded: %s", run.run_id, job.name, exc)


T = TypeVar("T")


def _while_current(job_name: str, step: Step[T], stale: T) -> Step[T]:
    """step, applied only while the job is still the run's current one: an event read before the run moved on to
    another job (its canary handed back to the dispatcher, a job that ended for capacity) changes nothing. Found by
    the canary's e2e test: the canary's RUNNING event, handled as the canary ended, moved the run RUNNING with no job,
    and the long job was never recorded."""

    def guarded(cur: RunRecord | None) -> tuple[RunRecord | None, T]:
        if cur is not None and (cur.vertex is None or cur.vertex.job_name != job_name):
            return None, stale
        return step(cur)

    return guarded


def _job_error(
    run: RunRecord, job: JobView, target: RunState, deps: JobStateDeps, model_dir: str | None = None
) -> RunError | None:
    """The error of an ended job, with the trainer's own reason (its failure.json in model_dir, by default the run's
    model folder) and the classified reason; None for a job that succeeded cleanly or has not ended."""
    if not (target.terminal and (job.error_code or target != RunState.SUCCEEDED)):
        return None
    error = RunError("job-failed" if target == RunState.FAILED else "job-cancelled", job.error_message)
    if target == RunState.FAILED:
        error = _with_trainer_reason(error, run, deps, model_dir)
    return _with_reason(error, job, run)


def _with_reason(error: RunError, job: JobView, run: RunRecord) -> RunError:
    """The error with its reason (failure_reasons table), replica and exit code; a cancel names who asked."""
    found = classify(error.kind, job.error_message, job.error_code)
    out = replace(error, reason=found.reason, replica=found.replica, exit_code=found.exit_code)
    cancel = run.submission.cancel
    if found.reason == CANCELLED and cancel is not None:
        out = replace(out, message=f"cancelled by {cancel.by} at {cancel.at}", job_message=job.error_message or None)
        if cancel.by.startswith(f"{BUDGET_EXCEEDED}:"):  # the reconciler's cancel of a run over its own budget
            out = replace(out, code=BUDGET_EXCEEDED)
    return out


def _budget_stop(run: RunRecord, error: RunError | None) -> RunError | None:
    """The error of a job Vertex stopped at a timeout its budget set, as a cancel for the budget; None otherwise.

    The planner caps a job's scheduling.timeout at what the request's constraints.budget_usd pays at the plan's
    hourly price (functions/planning/job_choices.py), so Vertex itself stops a job about to pass its budget. Such a
    stop is the same event as the reconciler's cancel of a run over its own budget (functions/reconciler/team_looks.py):
    both end CANCELLED with error.code budget-exceeded, whichever came first."""
    if error is None or error.reason != TIMEOUT or run.plan is None or not run.plan.timeout_seconds:
        return None
    budget = float(run.request.get("constraints", {}).get("budget_usd") or 0.0)
    hourly = run.plan.hourly_cost_usd
    if budget <= 0 or hourly <= 0 or run.plan.timeout_seconds < budget / hourly * 3600 - 1:
        return None  # the timeout was the estimate's margin: an ordinary timeout, well inside the budget
    return replace(
        error,
        code=BUDGET_EXCEEDED,
        message=(
            f"stopped at its constraints.budget_usd {usd_text(budget)}: Vertex ended the job at its "
            f"{run.plan.timeout_seconds} s timeout, what the budget pays at {usd_text(hourly)}/h (the job ran longer "
            "than its plan's estimate; raise the budget, or make the job faster)"
        ),
        job_message=error.job_message or error.message,
    )


def _capacity_failure(run: RunRecord, job: JobView, error: RunError, deps: JobStateDeps) -> str:
    """The job was accepted, then ended for capacity: the run goes on to its next plan, waits, or gives up."""
    # The trainer's own line first when it left one (a preempted replica says at which step, and that its newest
    # checkpoint resumes it), Vertex's beside it.
    message = job.error_message if error.kind is None else f"{error.message} (Vertex: {job.error_message})"
    spent = job_spend(run.plan, job.start_time, job.end_time)  # a job preempted after it ran is paid for
    ended = capacity_ended(
        job.name, error.reason or STOCKOUT, message, now=deps.now(), policy=deps.policy, spent_usd=spent
    )
    outcome = deps.store.apply(run.run_id, ended)
    _capacity_noted(run, job, error.reason or STOCKOUT, deps)
    log.warning("run %s: job %s ended for %s (%s): %s", run.run_id, job.name, error.reason, job.error_message, outcome)
    if outcome == "resubmit" and deps.resubmit is not None:
        return f"resubmitted:{deps.resubmit(run.run_id)}"
    return f"{outcome}:{error.reason}"


def _timeout_continued(run: RunRecord, job: JobView, error: RunError, deps: JobStateDeps) -> str | RunError:
    """A job that reached its timeout: the run goes on as its next attempt when its training advanced (what
    happened, as a string), else the error saying why it was not continued (functions/records/continuation.py)."""
    assert deps.checkpoints is not None
    now = deps.now()
    times = JobTimes(
        parse_timestamp_or_none(job.create_time),
        parse_timestamp_or_none(job.start_time),
        parse_timestamp_or_none(job.end_time),
    )
    granted = extension(run, job.name, deps.checkpoints(run), times, now=now, policy=deps.continuation)
    if isinstance(granted, str):
        log.info("run %s: job %s reached its timeout; not continued: %s", run.run_id, job.name, granted)
        return not_extended(error, granted)
    outcome = deps.store.apply(
        run.run_id, timeout_extended(job.name, granted, job.error_message or error.message, now=now)
    )
    log.warning(
        "run %s: job %s reached its timeout at step %d while training advanced: %s (%s)",
        run.run_id,
        job.name,
        granted.from_step,
        outcome,
        granted.basis,
    )
    _capacity_noted(run, job, TIMEOUT, deps)
    if outcome == "resubmit" and deps.resubmit is not None:
        return f"{TIMEOUT_EXTENDED}:{deps.resubmit(run.run_id)}"
    return f"{outcome}:{TIMEOUT_EXTENDED}"


def _with_job(run: RunRecord, job: JobView, *, ended: bool, now: datetime) -> RunRecord:
    """The run with the job's state and times (and, once it ended, the actual cost) recorded; a note that the job
    waited long is closed once it has started (functions/records/long_waits.py)."""
    timings = _timings(run.timings, job)
    out = replace(
        long_wait_closed(run, job, now),
        timings=timings,
        vertex=None if run.vertex is None else replace(run.vertex, state=job.state),
    )
    if not ended:
        return out
    if run.plan is not None:  # the estimate beside the actual time (and cost, below)
        timings = replace(timings, estimated_seconds=round(run.plan.estimated_hours * 3600.0, 3))
    return replace(out, timings=timings, cost=_cost(run, timings))


def _timings(timings: Timings, job: JobView) -> Timings:
    start, end = parse_timestamp_or_none(job.start_time), parse_timestamp_or_none(job.end_time)
    out = replace(
        timings,
        started_at=format_timestamp(start) if start else timings.started_at,
        ended_at=format_timestamp(end) if end else timings.ended_at,
    )
    if start and end:
        out = replace(out, run_seconds=round((end - start).total_seconds(), 3))
    return out


def _cost(run: RunRecord, timings: Timings) -> Cost:
    if run.plan is None or timings.run_seconds is None:
        return run.cost
    this_job = run.plan.hourly_cost_usd * timings.run_seconds / 3600.0
    basis, earlier = ACTUAL_COST_BASIS, run.cost.earlier_usd or 0.0
    if earlier:
        basis += f", plus the {usd_text(earlier)} its earlier jobs cost (its canary, a job ended for capacity)"
    extended = run.submission.extension
    if extended is not None:
        earlier += extended.spent_usd
        basis += f", plus the {usd_text(extended.spent_usd)} its timed-out jobs cost before"
    return replace(run.cost, actual_usd=round(this_job + earlier, 6), actual_basis=basis)


def _with_trainer_reason(error: RunError, run: RunRecord, deps: JobStateDeps, model_dir: str | None = None) -> RunError:
    """The error with the trainer's own reason from its failure record, Vertex's message kept beside it; unchanged
    when the trainer left none (it crashed before it could, or never started)."""
    if run.artifacts is None:
        return error
    uri = f"{model_dir or run.artifacts.model_dir}{FAILURE_FILE}"
    text = deps.read_text(uri)
    if text is None:
        return error
    try:
        failure = parse_trainer_failure(text)
    except SchemaError as exc:
        log.warning("run %s: the trainer's failure record %s does not fit its schema: %s", run.run_id, uri, exc)
        return replace(error, message=f"{error.message} (the trainer's failure record {uri} is unreadable: {exc})")
    return replace(error, message=failure.message, kind=failure.kind, step=failure.step, job_message=error.message)


def _metrics(run: RunRecord, deps: JobStateDeps) -> tuple[dict[str, Any] | None, str]:
    if run.artifacts is None:
        return None, "the job succeeded but the run records no artifacts folder to read metrics.json from"
    uri = f"{run.artifacts.model_dir}metrics.json"
    text = deps.read_text(uri)
    if text is None:
        # A team's container runs without Landfall's launcher: its metrics lines are the file to read.
        lines = deps.read_text(f"{run.artifacts.model_dir}{METRICS_LINES_FILE}")
        if lines is not None:
            return metrics_document(lines, form="image"), ""
        return None, f"the job succeeded but wrote no {uri}"
    try:
        metrics = json_text.loads(text)
    except json_text.JsonTextError as exc:
        return None, f"{uri} is not JSON ({exc})"
    return (metrics, "") if isinstance(metrics, dict) else (None, f"{uri} is not a JSON object")


def _data_read(run: RunRecord, metrics: dict[str, Any] | None) -> tuple[dict[str, Any] | None, DataRead | None]:
    """metrics.json without its `data` section, and that section as the run record's typed data_read (kept in the
    metrics, with a warning, when it does not fit its schema)."""
    if metrics is None or metrics.get("data") is None:
        return metrics, None
    try:
        data = parse_data_read(Reader(metrics["data"], "metrics.data"))
    except SchemaError as exc:
        log.warning("run %s: metrics.json's data section does not fit its schema: %s", run.run_id, exc)
        return metrics, None
    return {k: v for k, v in metrics.items() if k != "data"}, data


def read_gcs_text(client: Any) -> Callable[[str], str | None]:
    def read(uri: str) -> str | None:
        from google.api_core.exceptions import NotFound

        bucket, _, name = uri.removeprefix("gs://").partition("/")
        try:
            return str(client.bucket(bucket).blob(name).download_as_text())
        except NotFound:
            return None

    return read


__all__ = ["ACTUAL_COST_BASIS", "RUN_STATE_FOR_JOB_STATE", "JobStateDeps", "read_gcs_text", "record_job_state"]
