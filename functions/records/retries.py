"""Pure rules for `landfall retry RUN_ID`: a FAILED or CANCELLED run's request sent again as a new run.

The new request's key is derived from the old one (schemas.training_request.retry_key), so its run id is known
before anything is published and two retries at once name one run. The old run is claimed in a transaction
(`retried_by` is set once); the new run records `retry_of` when the dispatcher creates it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from enum import StrEnum

from functions.records.run_rules import Step, transitioned
from schemas.run_record import RunRecord, RunState
from schemas.times import format_timestamp
from schemas.training_request import TrainingRequest, parse_training_request, retry_key

RETRYABLE_STATES = frozenset({RunState.FAILED, RunState.CANCELLED})
"""Runs that may be retried: they ended without a result. A REJECTED request needs fixing, not repeating."""


class RetryClaim(StrEnum):
    CLAIMED = "claimed"
    """retried_by is now the new run: publish its request."""
    ALREADY = "already"
    """Another retry claimed the run first: retried_by names its run."""
    NOT_RETRYABLE = "not-retryable"
    MISSING = "missing"


def not_retryable_reason(run: RunRecord) -> str | None:
    """Why the run cannot be retried (one line), or None when it can."""
    if run.state in RETRYABLE_STATES:
        return None
    ended = "" if run.state.terminal else " (it has not ended: `landfall cancel` stops it)"
    return f"run {run.run_id} is {run.state}{ended}; only FAILED or CANCELLED runs can be retried"


def retry_request(run: RunRecord, now: datetime, *, from_scratch: bool = False) -> TrainingRequest:
    """The request of the run that retries `run`: the same request with the next retry key, naming `run`, and
    resuming from the checkpoints of its line (`checkpoint_lineage`: the first run of the line, whose folder every
    retry of it writes to), or, from_scratch, from none: it starts at step 0 in its own folder and begins a new line.

    Raises SchemaError when the stored request no longer reads as a TrainingRequest."""
    old = parse_training_request(dict(run.request))
    return replace(
        old,
        idempotency_key=retry_key(old.idempotency_key),
        retry_of=run.run_id,
        source=replace(old.source, kind="retry", event_id=""),
        created_at=format_timestamp(now),
        checkpoint_lineage="" if from_scratch else old.checkpoint_lineage or run.run_id,
    )


def claim_retry(new_run_id: str, *, now: datetime) -> Step[tuple[RetryClaim, RunRecord | None]]:
    """Set retried_by on a FAILED or CANCELLED run that has none; result: the claim and the record as it is now."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, tuple[RetryClaim, RunRecord | None]]:
        if cur is None:
            return None, (RetryClaim.MISSING, None)
        if cur.state not in RETRYABLE_STATES:
            return None, (RetryClaim.NOT_RETRYABLE, cur)
        if cur.retried_by:
            return None, (RetryClaim.ALREADY, cur)
        new = transitioned(cur, cur.state, now=now, change=lambda r: replace(r, retried_by=new_run_id))
        return new, (RetryClaim.CLAIMED, new)

    return step


__all__ = ["RETRYABLE_STATES", "RetryClaim", "claim_retry", "not_retryable_reason", "retry_request"]
