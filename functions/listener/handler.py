"""Completion listener: a job log entry names a job; re-read the job and record its state, times and metrics, and
for a failed job the trainer's own reason (its failure.json, schemas/trainer_failure.py)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from functions.envelopes import PubSubMessage
from functions.errors import PermanentError, TransientError
from functions.fault_points import fault_point
from functions.job_states import JobStateDeps, record_job_state
from schemas.errors import SchemaError
from schemas.job_event import parse_job_event
from schemas.times import parse_timestamp_or_none

log = logging.getLogger("landfall.job_events")

# How long an event naming an unknown job is retried (the dispatcher may not have recorded the job yet). Shorter than
# the job-events subscription's retries last before dead-lettering (about 4 minutes: deploy/topology.toml), so such an
# event ends ignored, not dead-lettered (the fault campaign saw events of an orphaned job dead-lettered at 10 minutes).
UNKNOWN_JOB_PATIENCE = timedelta(minutes=3)
ListenerDeps = JobStateDeps
"""The listener needs what recording a job's state needs (functions/job_states.py)."""


def handle_job_event(message: PubSubMessage, deps: ListenerDeps) -> str:
    try:
        event = parse_job_event(message.data)
    except SchemaError as exc:
        log.warning("job event %s is not a Vertex job log entry, acknowledged: %s", message.message_id, exc)
        return "ignored:not-a-job-event"
    run = deps.store.find_by_job_id(event.job_id)
    if run is None:
        published = parse_timestamp_or_none(message.publish_time) or deps.now()
        if deps.now() - published > UNKNOWN_JOB_PATIENCE:
            log.info(
                "job %s is not a Landfall run (no run names it after %s); ignored", event.job_id, UNKNOWN_JOB_PATIENCE
            )
            return "ignored:unknown-job"
        raise TransientError(f"no run records job {event.job_id} yet; the dispatcher may still be writing it")
    if event.job_id in (run.submission.job_ids or ()):
        return "ignored:earlier-attempt"
    if run.vertex is None:
        raise PermanentError(f"run {run.run_id} was found by job id {event.job_id} but records no Vertex job")
    with _one_delivery_per_run(run.run_id):
        # Re-read under the lock: a copy of this event handled meanwhile may have recorded everything already, and
        # then this one ends with a plain read, opening no transaction on the run.
        latest = deps.store.get(run.run_id) or run
        if (
            latest.state.terminal
            and latest.submission.results_published
            and latest.vertex is not None
            and latest.vertex.job_name == run.vertex.job_name
        ):
            return f"duplicate:{latest.state}"
        job = deps.vertex.get(run.vertex.job_name)
        fault_point("listener.after_read_job")
        return record_job_state(latest, job, deps)


_RUN_LOCKS = tuple(threading.Lock() for _ in range(64))


@contextmanager
def _one_delivery_per_run(run_id: str) -> Iterator[None]:
    """Deliveries about one run wait for each other within an instance (64 stripes by run id). Duplicated and replayed
    job events arrive together; each opened a transaction on the same run document, and on the Firestore emulator
    sixteen of them at once kept colliding until every one had used its attempts, for minutes (a Cloud Function
    instance takes one delivery at a time, so there this changes nothing)."""
    with _RUN_LOCKS[hash(run_id) % len(_RUN_LOCKS)]:
        yield


__all__ = ["ListenerDeps", "handle_job_event"]
