"""Completion listener: a job log entry names a job; re-read the job and record its state, times and metrics."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from functions.envelopes import PubSubMessage
from functions.errors import TransientError
from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import JobView, VertexJobs
from functions.records.run_rules import Doc
from schemas.errors import SchemaError
from schemas.job_event import parse_job_event
from schemas.run_record import RunState
from schemas.times import parse_timestamp_or_none

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
# How long an event naming an unknown job is retried (the dispatcher may not have recorded the job yet).
UNKNOWN_JOB_PATIENCE = timedelta(minutes=10)


@dataclass(frozen=True)
class ListenerDeps:
    store: RunsStore
    vertex: VertexJobs
    read_text: Callable[[str], str | None]
    """Reads a gs:// object as text; None when it does not exist."""
    now: Callable[[], datetime]


def handle_job_event(message: PubSubMessage, deps: ListenerDeps) -> str:
    try:
        event = parse_job_event(message.data)
    except SchemaError as exc:
        log.warning("job event %s is not a Vertex job log entry, acknowledged: %s", message.message_id, exc)
        return "ignored:not-a-job-event"
    doc = deps.store.find_by_job_id(event.job_id)
    if doc is None:
        published = parse_timestamp_or_none(message.publish_time) or deps.now()
        if deps.now() - published > UNKNOWN_JOB_PATIENCE:
            log.info("job %s is not a Landfall run (no run names it after %s); ignored", event.job_id,
                     UNKNOWN_JOB_PATIENCE)
            return "ignored:unknown-job"
        raise TransientError(f"no run records job {event.job_id} yet; the dispatcher may still be writing it")
    job = deps.vertex.get(doc["vertex"]["job_name"])
    return record_job_state(doc, job, deps)


def record_job_state(doc: Doc, job: JobView, deps: ListenerDeps) -> str:
    """Bring the run in line with the job as Vertex reports it (also used by the reconciler)."""
    run_id = doc["run_id"]
    target = RUN_STATE_FOR_JOB_STATE.get(job.state)
    updates: dict[str, Any] = {"vertex": {**doc["vertex"], "state": job.state},
                               "timings": _timings(doc.get("timings") or {}, job)}
    if target is None:
        deps.store.merge(run_id, updates, now=deps.now())
        return f"noted:{job.state}"
    if target.terminal:
        updates["cost"] = _cost(doc, updates["timings"])
        if job.error_code:
            updates["error"] = {"code": "job-failed" if target == RunState.FAILED else "job-cancelled",
                                "message": job.error_message}
        if target == RunState.SUCCEEDED:
            metrics, problem = _metrics(doc, deps)
            updates["metrics"] = metrics
            if problem:
                updates["error"] = {"code": "metrics-missing", "message": problem}
    detail = job.error_message or f"Vertex job {job.state}"
    _, changed = deps.store.transition(run_id, target, now=deps.now(), detail=detail, updates=updates)
    return f"{'recorded' if changed else 'unchanged'}:{target}"


def _timings(timings: dict[str, Any], job: JobView) -> dict[str, Any]:
    out = dict(timings)
    if job.start_time:
        out["started_at"] = job.start_time
    if job.end_time:
        out["ended_at"] = job.end_time
    start, end = parse_timestamp_or_none(job.start_time), parse_timestamp_or_none(job.end_time)
    if start and end:
        out["run_seconds"] = round((end - start).total_seconds(), 3)
    return out


def _cost(doc: Doc, timings: dict[str, Any]) -> dict[str, Any]:
    cost = dict(doc.get("cost") or {})
    hourly = (doc.get("plan") or {}).get("hourly_cost_usd")
    if hourly is not None and "run_seconds" in timings:
        cost["actual_usd"] = round(float(hourly) * timings["run_seconds"] / 3600.0, 6)
        cost["actual_basis"] = "run seconds x the plan's hourly cost (machines + accelerators)"
    return cost


def _metrics(doc: Doc, deps: ListenerDeps) -> tuple[dict[str, Any] | None, str]:
    uri = f"{doc['artifacts']['model_dir']}metrics.json"
    text = deps.read_text(uri)
    if text is None:
        return None, f"the job succeeded but wrote no {uri}"
    try:
        metrics = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"{uri} is not JSON ({exc})"
    return (metrics, "") if isinstance(metrics, dict) else (None, f"{uri} is not a JSON object")


def read_gcs_text(client: Any) -> Callable[[str], str | None]:
    def read(uri: str) -> str | None:
        from google.api_core.exceptions import NotFound

        bucket, _, name = uri.removeprefix("gs://").partition("/")
        try:
            return str(client.bucket(bucket).blob(name).download_as_text())
        except NotFound:
            return None

    return read


__all__ = ["ListenerDeps", "handle_job_event", "read_gcs_text", "record_job_state"]
