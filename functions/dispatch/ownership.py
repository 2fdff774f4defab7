"""The submission claim a delivery holds while it makes a run's CreateCustomJob attempts: every change it makes to
the run under the claim is `owned`, so that a delivery that outlived its lease, and whose claim another delivery took
over, writes nothing over the other's work (the fault campaign found two jobs for one attempt where both went on)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TypeVar

from functions.dispatch.deps import DispatchDeps
from functions.dispatch.outcomes import Outcome, Said
from functions.records.run_rules import Change, Step, submission_lease, transitioned
from schemas.run_record import RunRecord, RunState
from schemas.times import format_timestamp, parse_timestamp

T = TypeVar("T")
log = logging.getLogger("landfall.dispatch")


def owned(owner: str, step: Callable[[RunRecord], tuple[RunRecord | None, T]], *, lost: T) -> Step[T]:
    """step, run only while the delivery `owner` holds the run's submission claim (the run SUBMITTING under that
    owner's lease); otherwise nothing is written and the answer is `lost`."""

    def guarded(cur: RunRecord | None) -> tuple[RunRecord | None, T]:
        if cur is None or cur.submission.owner != owner or cur.state != RunState.SUBMITTING:
            return None, lost
        return step(cur)

    return guarded


def owned_merge(run_id: str, owner: str, change: Change, deps: DispatchDeps) -> bool:
    """Apply change while this delivery still holds the submission claim; False (nothing written) when another
    delivery took it over after this one's lease ran out."""
    now = deps.now()
    step = owned(owner, lambda cur: (transitioned(cur, cur.state, now=now, change=change), True), lost=False)
    return bool(deps.store.apply(run_id, step))


def lost_claim(run_id: str, when: str) -> Outcome:
    """This delivery outlived its lease and another took the submission over: it leaves the run to that one."""
    log.warning(
        "run %s: the submission claim was taken over by another delivery %s; leaving the run to it", run_id, when
    )
    return Outcome(Said.LOST_CLAIM)


def give_back(run_id: str, owner: str, exc: Exception, deps: DispatchDeps) -> None:
    """End this delivery's lease now, while it still holds it (nothing written otherwise): it created nothing, so its
    redelivery (or the reconciler) need not wait out the lease."""
    released = format_timestamp(deps.now())
    try:
        given = owned_merge(
            run_id, owner, lambda r: replace(r, submission=replace(r.submission, lease_until=released)), deps
        )
    except Exception as lost:  # the store failing too: the lease then lapses by itself
        log.warning("run %s: the submission claim could not be given back (%s); it lapses by itself", run_id, lost)
        return
    if given:
        log.info("run %s: failed before creating a job (%s); submission claim given back", run_id, exc)


def lease_live(run: RunRecord, now: datetime) -> bool:
    lease = submission_lease(run.submission)
    return lease is not None and lease.live(now)


def lease_used(lease_until: str | None, deps: DispatchDeps) -> bool:
    """Whether a quarter or more of the lease the claim granted (ending lease_until) has gone by."""
    if not lease_until:
        return True
    left = parse_timestamp(lease_until, field="submission.lease_until") - deps.now()
    return left < timedelta(seconds=deps.settings.submission_lease_seconds * 3 / 4)


__all__ = ["give_back", "lease_live", "lease_used", "lost_claim", "owned", "owned_merge"]
