"""Rate limits are not capacity: every CreateCustomJob first takes a slot from its region's limiter
(LANDFALL_VERTEX_CREATE_PER_MINUTE, functions/records/rate_limits.py). A slot more than QUEUE_SLEEP_MAX_SECONDS
away, or Vertex answering RESOURCE_EXHAUSTED for a per-minute request quota, queues the run on the same plan
(`submission.queued`, the lease held until its retry time, when the reconciler takes it over); a rate limit never
moves a run to a fallback plan.

A run every plan of whose round was refused for capacity WAITS (or FAILS once it has waited too long: `wait_step`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from functions.dispatch.deps import DispatchDeps
from functions.dispatch.outcomes import Outcome, Said
from functions.dispatch.ownership import lost_claim, owned_merge
from functions.records import attempts as attempt_rules
from functions.records.leases import Claim, ClaimOutcome
from functions.records.team_ledger import Admission
from functions.settings import Settings
from schemas.plan import Plan
from schemas.record_bounds import cut
from schemas.run_record import AttemptKind, AttemptOutcome, Queued, RunRecord, RunState, SubmissionAttempt
from schemas.times import format_timestamp
from schemas.vocabulary import SUBMIT_RATE, VERTEX_RATE_LIMIT

log = logging.getLogger("landfall.dispatch")

QUEUE_SLEEP_MAX_SECONDS = 10.0
"""A limiter slot at most this far away (and at most a quarter of the submission lease) is waited for in the
delivery, holding its claim; a later one queues the run until then, and the delivery is acknowledged."""

RATE_LIMIT_BACKOFF_SECONDS = (5, 10, 20, 40, 60)
"""After Vertex answers a rate limit, the run is tried again this long later (by its n-th time, the last value from
then on), plus up to 20 % jitter: the quota refills each minute."""


def slot_region(result: object) -> str | None:
    """The region whose limiter slot rides in the claim's Commit: the first plan's, for a fresh claim that goes on
    to CreateCustomJob (admitted by its team's ledger where it has one; no cancel on record, no canary re-plan due,
    no slot already reserved there); else None. `result`: the Claim, or the team ledger's (Claim, Admission)."""
    if isinstance(result, tuple) and len(result) == 2:
        result, admission = result
        if isinstance(admission, Admission) and admission.verdict != "fits":
            return None
    if not isinstance(result, Claim) or result.outcome != ClaimOutcome.CLAIMED:
        return None
    run = result.doc
    if run.submission.cancel is not None or (run.canary is not None and run.canary.status == "replan"):
        return None
    plans = attempt_rules.candidates(run)
    if not plans or reserved(run.submission.queued, plans[0].region):
        return None
    return plans[0].region


def reserved(queued: Queued | None, region: str) -> bool:
    """Whether the run holds a limiter slot for region, taken when it was queued and not used yet."""
    return queued is not None and queued.reserved and queued.over_at is None and queued.region == region


def queued_tries(queued: Queued | None) -> int:
    """How many times the run's current queueing has held it back (0: it is not queued now)."""
    return 0 if queued is None or queued.over_at is not None else queued.tries


def queue_over(queued: Queued | None, stamp: str) -> Queued | None:
    return queued if queued is None or queued.over_at is not None else replace(queued, over_at=stamp, reserved=False)


def rate_limited(attempt: SubmissionAttempt) -> bool:
    return attempt.result.kind == AttemptKind.RATE_LIMITED


def wait_for_slot(
    run_id: str,
    owner: str,
    run: RunRecord,
    plan: Plan,
    made: list[SubmissionAttempt],
    deps: DispatchDeps,
    ridden: dict[str, datetime],
) -> Outcome | None:
    """Take the plan's limiter slot (unless the run holds one there, or the claim's Commit took it: `ridden`, used
    once) and wait for it when it is a few seconds away; a later slot queues the run until then (the answer). `made`:
    the attempts made so far (the claim's pending one left out: it was not made)."""
    if deps.limiter is None or reserved(run.submission.queued, plan.region):
        return None
    slot = ridden.pop(plan.region, None) or deps.limiter.take(plan.region, deps.now())
    wait = (slot - deps.now()).total_seconds()
    if wait > min(QUEUE_SLEEP_MAX_SECONDS, deps.settings.submission_lease_seconds / 4):
        limit = deps.limiter.per_minute
        why = f"{plan.region} allows {limit} CreateCustomJob calls a minute (LANDFALL_VERTEX_CREATE_PER_MINUTE)"
        return queue(run_id, owner, made, plan.region, SUBMIT_RATE, why, slot, deps, reserved=True)
    if wait > 0:
        deps.sleep(wait)
    return None


def queue_rate_limited(
    run_id: str,
    owner: str,
    attempts: list[SubmissionAttempt],
    plan: Plan,
    queued: Queued | None,
    message: str,
    deps: DispatchDeps,
) -> Outcome:
    """Vertex answered the last attempt with a rate limit: queue the run on this same plan, to be tried again after
    the backoff (RATE_LIMIT_BACKOFF_SECONDS). One rate-limited attempt per plan is kept (the latest): `queued.tries`
    counts them, and the record stays bounded however long Vertex keeps refusing."""
    detail = cut(message)
    attempts[-1] = attempts[-1].ended(AttemptOutcome(AttemptKind.RATE_LIMITED, detail))
    same = (plan.region, plan.machine_type)
    kept = [a for a in attempts[:-1] if not (rate_limited(a) and (a.region, a.machine_type) == same)]
    tries = queued_tries(queued)
    delay = RATE_LIMIT_BACKOFF_SECONDS[min(tries, len(RATE_LIMIT_BACKOFF_SECONDS) - 1)]
    retry_at = deps.now() + timedelta(seconds=delay * (1 + random.uniform(0, 0.2)))
    return queue(run_id, owner, [*kept, attempts[-1]], plan.region, VERTEX_RATE_LIMIT, detail, retry_at, deps)


def queue(
    run_id: str,
    owner: str,
    attempts: list[SubmissionAttempt],
    region: str,
    reason: str,
    message: str,
    retry_at: datetime,
    deps: DispatchDeps,
    *,
    reserved: bool = False,
) -> Outcome:
    """Hold the run's submission back for a rate limit, on the same plan: it stays SUBMITTING, says why in
    `submission.queued`, and keeps its lease until retry_at, when the reconciler takes it over (a redelivery meanwhile
    finds the lease live). The delivery is acknowledged: nothing was created, and nothing is lost."""
    now = deps.now()
    stamp = format_timestamp(now)
    until = format_timestamp(retry_at)
    recorded = attempt_rules.with_attempts(attempts, lease_until=until)

    def change(r: RunRecord) -> RunRecord:
        new = recorded(r)
        prev = r.submission.queued
        going_on = prev is not None and prev.over_at is None
        queued = Queued(
            reason=reason,
            region=region,
            since=prev.since if prev is not None and going_on else stamp,
            retry_at=until,
            tries=prev.tries + 1 if prev is not None and going_on else 1,
            message=message,
            reserved=reserved,
        )
        return replace(new, submission=replace(new.submission, queued=queued))

    if not owned_merge(run_id, owner, change, deps):
        return lost_claim(run_id, "while queueing it for a rate limit")
    log.info("run %s queued until %s (%s): %s", run_id, until, reason, message)
    return Outcome(Said.QUEUED, reason)


def attempt_policy(settings: Settings) -> attempt_rules.AttemptPolicy:
    return attempt_rules.AttemptPolicy(
        settings.max_job_attempts, settings.wait_backoff_seconds, settings.wait_give_up_seconds
    )


def wait_step(
    reason: str, now: datetime, policy: attempt_rules.AttemptPolicy
) -> Callable[[RunRecord | None], tuple[RunRecord | None, RunState | None]]:
    """Send the run WAITING for capacity (FAILED once it has waited past the policy's give-up); result: its state."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, RunState | None]:
        new = None if cur is None else attempt_rules.waited(cur, reason, now=now, policy=policy)
        return new, None if new is None else new.state

    return step


__all__ = [
    "QUEUE_SLEEP_MAX_SECONDS",
    "RATE_LIMIT_BACKOFF_SECONDS",
    "attempt_policy",
    "queue",
    "queue_over",
    "queue_rate_limited",
    "queued_tries",
    "rate_limited",
    "reserved",
    "slot_region",
    "wait_for_slot",
    "wait_step",
]
