"""Dispatcher: validate a TrainingRequest, record the run, plan it and submit its CustomJob exactly once.

Exactly once: the run id comes from the request's idempotency key (create-if-absent), submission is claimed
under a lease in a transaction, every CreateCustomJob attempt is recorded before it is made, and a delivery that
finds an expired claim looks for the labelled job before submitting again. A delivery that fails before it calls
CreateCustomJob gives the claim back at once; one that finds a cancel recorded (in the claim's transaction, or
before a further plan) ends the run CANCELLED without creating, and cancels at once a job it created meanwhile.

Rate limits are not capacity (issue 26): every CreateCustomJob first takes a slot from the region's limiter
(LANDFALL_VERTEX_CREATE_PER_MINUTE, functions/records/rate_limits.py); a slot more than QUEUE_SLEEP_MAX_SECONDS
away, or Vertex answering RESOURCE_EXHAUSTED for a per-minute request quota, queues the run on the same plan
(`submission.queued`, the lease held until its retry time, when the reconciler takes it over); it never moves to a
fallback plan for it.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from deploy.teams import Teams
from functions.dispatch import job_spec
from functions.dispatch.canary_replan import replan_note
from functions.dispatch.dataset_check import DatasetObjects, check_dataset
from functions.dispatch.request_rules import request_problems
from functions.dispatch.team_rules import LedgerPort, admitted_claim, team_of, team_rejection
from functions.envelopes import PubSubMessage
from functions.errors import PermanentError, TransientError
from functions.fault_points import fault_point
from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import CapacityError, JobView, RateLimitedError, VertexJobs
from functions.records import attempts as attempt_rules
from functions.records import canary as canary_rules
from functions.records import run_rules
from functions.records.bounds import stored_plan
from functions.records.leases import Claim, ClaimOutcome
from functions.records.run_rules import Rider, submission_lease, transitioned
from functions.records.team_ledger import Admission
from functions.settings import Settings
from schemas import json_text
from schemas.canary import CanaryFigures, CanaryRecord
from schemas.errors import SchemaError
from schemas.fields import INT64_MAX, INT64_MIN
from schemas.plan import Plan
from schemas.record_bounds import cut
from schemas.run_record import (
    TERMINAL_STATES,
    Artifacts,
    CancelRequest,
    JobAttempt,
    Queued,
    RunError,
    RunRecord,
    RunState,
    SubmissionAttempt,
    VertexJobRef,
    new_run,
)
from schemas.team_ledger import RunCharge
from schemas.times import format_timestamp, parse_timestamp
from schemas.training_request import RUN_ID_ATTRIBUTE, TrainingRequest, parse_training_request, run_id_for
from schemas.vocabulary import SUBMIT_RATE, VERTEX_RATE_LIMIT

log = logging.getLogger("landfall.dispatch")

# How many next-best plans a run keeps to fall back on when a region refuses the chosen one for capacity.
FALLBACKS_KEPT = 3

_REFUSED_OUTCOMES = ("capacity", "rate-limited")
"""Outcomes of CreateCustomJob attempts Vertex refused: no job exists for them."""

QUEUE_SLEEP_MAX_SECONDS = 10.0
"""A limiter slot at most this far away (and at most a quarter of the submission lease) is waited for in the
delivery, holding its claim; a later one queues the run until then, and the delivery is acknowledged."""

RATE_LIMIT_BACKOFF_SECONDS = (5, 10, 20, 40, 60)
"""After Vertex answers a rate limit, the run is tried again this long later (by its n-th time, the last value from
then on), plus up to 20 % jitter: the quota refills each minute."""


class OutcomeLike(Protocol):
    """What the planner answers (functions.planning.PlanOutcome). Read-only members, so that a frozen dataclass
    (PlanOutcome, the tests' Outcome) satisfies it."""

    @property
    def plan(self) -> Plan | None: ...
    @property
    def fallbacks(self) -> tuple[Plan, ...]: ...
    @property
    def rejection(self) -> str | None: ...


@dataclass(frozen=True)
class DispatchDeps:
    settings: Settings
    store: RunsStore
    vertex: VertexJobs
    plan: Callable[[TrainingRequest], OutcomeLike]
    now: Callable[[], datetime]
    objects: DatasetObjects | None = None
    """The dataset's objects, checked before planning (dataset_check); None skips the check (unit tests)."""
    limiter: SubmitLimiter | None = None
    """The per-region CreateCustomJob limiter (functions/gcp/rate_limits_store.py); None = none (unit tests)."""
    sleep: Callable[[float], None] = time.sleep
    """How the delivery waits for a limiter slot a few seconds away (tests pass their clock's)."""
    champion: Callable[[TrainingRequest], dict[str, str]] | None = None
    """The job's variables naming the route's production model for the trainer to score on the new data
    (functions/records/model_registration.py champion_env); None or {}: no champion to score."""
    replan: Callable[[TrainingRequest, Plan, CanaryFigures], OutcomeLike] | None = None
    """Plans a run again from its canary's figures (functions/dispatch/canary_replan.py); None = `plan` (tests)."""
    teams: Teams | None = None
    """The teams file (deploy/teams.py); None or no teams: every run allowed, no ledger (docs/teams.md)."""
    ledger: LedgerPort | None = None
    """The team ledger, changed in the claim's transaction (functions/gcp/team_ledger_store.py)."""


class SubmitLimiter(Protocol):
    """Hands out CreateCustomJob slots per region (functions/records/rate_limits.py)."""

    @property
    def per_minute(self) -> int:
        """The calls per region and minute it allows."""
        ...

    def take(self, region: str, now: datetime) -> datetime:
        """Reserve the next slot in region: now, or the later moment this call may be made."""
        ...

    def rider(self, region_of: Callable[[object], str | None], now: datetime) -> SlotRiding:
        """A slot to take in the claim's own Commit, in the region region_of(claim) names (None: none)."""
        ...


class SlotRiding(Rider, Protocol):
    """A slot that rode in the claim's Commit (functions/gcp/rate_limits_store.py SlotRider): `slot` is set when it
    did (the runs store wrote the claim in one Commit of its own), None otherwise."""

    @property
    def region(self) -> str | None: ...
    @property
    def slot(self) -> datetime | None: ...


def handle_training_request(message: PubSubMessage, deps: DispatchDeps) -> str:
    """Process one delivery; returns what happened (for logs and tests). Raises TransientError to be retried."""
    now = deps.now()
    try:
        request = parse_training_request(message.data)
    except SchemaError as exc:
        return _reject_unreadable(message, str(exc), deps)
    run_id = request.run_id
    # The run is created first (Firestore create(): one delivery wins), which a first delivery, the common case,
    # needs anyway; a duplicate learns from the create's refusal and one read what the run is. States only move
    # forward, so a stale read can only be behind. A request Landfall handed over for a run that exists (a woken
    # run, RUN_ID_ATTRIBUTE) reads the run first instead.
    handed = message.attributes.get(RUN_ID_ATTRIBUTE) == run_id
    found = deps.store.get_to_change(run_id) if handed else None
    if found is not None:
        run, created = found, False
    else:
        run, created = deps.store.create_if_absent(
            replace(
                new_run(run_id, request.to_dict(), now=now),
                retry_of=request.retry_of or None,
                team=_came_for_team(request, message, deps),
            )
        )
    if not created and _settled(run.state):
        log.info("run %s already %s: duplicate delivery of %s ignored", run_id, run.state, message.message_id)
        return f"duplicate:{run.state}"
    if not created and run.state == RunState.SUBMITTING and _lease_live(run, now):
        raise TransientError(f"run {run_id}: another delivery is submitting it; retry after its lease")
    fault_point("dispatch.after_record")
    if run.state == RunState.RECEIVED:
        return _plan_and_submit(run_id, request, deps, topic=message.topic, subscription=message.subscription)
    return _submit(run_id, request, deps, team=run.team.name if run.team else None)


def _plan_and_submit(
    run_id: str, request: TrainingRequest, deps: DispatchDeps, *, topic: str = "", subscription: str = ""
) -> str:
    """Check and plan a RECEIVED run, then claim and submit it (a delivery, or the reconciler taking over a run whose
    delivery died after recording it: the subscription it came on is not known then, and the team is its data's)."""
    problems = request_problems(request, deps.settings, deps.now())
    if problems:
        return _reject(run_id, "invalid-request", "; ".join(problems), deps)
    charge, refused = team_of(request, deps.teams, topic=topic, subscription=subscription)
    if refused is not None:
        return _reject(run_id, refused.code, refused.reason, deps)
    refusal = check_dataset(request, deps.objects, deps.settings) if deps.objects is not None else None
    if refusal is not None:
        return _reject(run_id, refusal.code, refusal.reason, deps)
    outcome = deps.plan(request)
    if outcome.plan is None:
        return _reject(run_id, "infeasible", outcome.rejection or "no machine shape fits this request", deps)
    # The run keeps each plan with its best few alternatives (schemas/record_bounds.py); `landfall plan` lists all.
    plan, fallbacks = stored_plan(outcome.plan), tuple(stored_plan(p) for p in outcome.fallbacks[:FALLBACKS_KEPT])
    over = team_rejection(deps.teams, charge, plan, deps.now())
    if over is not None:
        return _reject(run_id, over.code, over.reason, deps)
    fault_point("dispatch.after_plan")
    # Recorded with the claim, in its transaction (one write instead of two on the way to CreateCustomJob).
    planned = run_rules.transition(
        RunState.PLANNED,
        now=deps.now(),
        detail=_plan_summary(plan),
        change=lambda r: replace(
            r,
            plan=plan,
            cost=replace(r.cost, estimated_usd=plan.estimated_cost_usd),
            submission=replace(r.submission, fallbacks=fallbacks, attempts=()),
            team=charge or r.team,
        ),
    )
    return _submit(run_id, request, deps, planned=planned, team=charge.name if charge else None)


def _pending_attempt(plan: Plan, at: str, round_number: int | None) -> SubmissionAttempt:
    return SubmissionAttempt(
        region=plan.region,
        machine_type=plan.machine_type,
        at=at,
        outcome="pending",
        plan=plan,
        round=round_number or 0,
    )


def _first_attempt(at: str) -> run_rules.FirstAttempt:
    def first(run: RunRecord) -> SubmissionAttempt | None:
        plans = attempt_rules.candidates(run)
        return _pending_attempt(plans[0], at, run.submission.round) if plans else None

    return first


def _lease_live(run: RunRecord, now: datetime) -> bool:
    lease = submission_lease(run.submission)
    return lease is not None and lease.live(now)


def _settled(state: RunState) -> bool:
    """A delivery that finds the run in this state has nothing to do: its job was submitted, or it ended."""
    return state in TERMINAL_STATES or state in (RunState.SUBMITTED, RunState.RUNNING, RunState.WAITING)


def _submit(
    run_id: str,
    request: TrainingRequest,
    deps: DispatchDeps,
    planned: run_rules.Step[object] | None = None,
    team: str | None = None,
) -> str:
    """Claim the run's submission (after `planned`, the move to PLANNED, in the same transaction) and make its
    CreateCustomJob attempts. A fresh claim records the first attempt with the claim itself.

    A delivery that fails before it has called CreateCustomJob gives the claim back at once: it created nothing, so
    its redelivery (or the reconciler) need not wait out the lease (issue 28: Vertex answering UNAVAILABLE to the
    recovering delivery's look for an earlier job kept the run unsubmitted for the 120 s lease)."""
    owner = uuid.uuid4().hex
    now = deps.now()
    # The first plan's limiter slot rides in the claim's Commit where the claim is one (one call, not two; taken if
    # and only if the claim is written, and only for a claim that goes on to CreateCustomJob: slot_region).
    rider = deps.limiter.rider(slot_region, now) if deps.limiter is not None else None
    known = deps.teams.named(team) if deps.teams is not None and team is not None else None
    if known is not None and deps.ledger is not None:
        # The claim and the team's ledger written together: two deliveries never both pass a cap (docs/teams.md).
        claim, admission = deps.ledger.apply(
            run_id,
            known.name,
            admitted_claim(
                known,
                run_rules.claim_submission(
                    run_id,
                    owner=owner,
                    now=now,
                    lease_seconds=deps.settings.submission_lease_seconds,
                    first_attempt=_first_attempt(format_timestamp(now)),
                ),
                before=planned,
                now=now,
                wait_seconds=deps.settings.wait_backoff_seconds,
            ),
            # written by the ledger's store, not this one: on the copy this store wrote (one conditional Commit with
            # the ledger and the slot), and the store keeps the run as it left it, for the job's record to be one
            # conditional Commit on it
            written=lambda doc, when, record: deps.store.written(run_id, doc, when, record),
            known=deps.store.copy_of(run_id),
            rider=rider,
        )
        if admission is not None and admission.verdict != "fits":
            log.info("run %s: %s (%s)", run_id, admission.verdict, admission.message)
            return f"{'waiting' if claim.doc.state == RunState.WAITING else 'failed'}:{admission.verdict}"
    else:
        claim = deps.store.claim_submission(
            run_id,
            owner=owner,
            now=now,
            lease_seconds=deps.settings.submission_lease_seconds,
            first_attempt=_first_attempt(format_timestamp(now)),
            before=planned,
            rider=rider,
        )
    if claim.outcome == ClaimOutcome.BUSY:
        raise TransientError(f"run {run_id}: another delivery is submitting it; retry after its lease")
    if claim.outcome == ClaimOutcome.DONE:
        return f"duplicate:{claim.doc.state}"
    if claim.outcome == ClaimOutcome.NOT_READY:
        raise TransientError(f"run {run_id} is not planned yet")
    creating = _Creating()
    ridden = (rider.region, rider.slot) if rider is not None and rider.region and rider.slot else None
    try:
        return _submit_claimed(run_id, request, claim.outcome, claim.doc, owner, deps, creating, ridden)
    except Exception as exc:
        if not creating.called:
            _give_back(run_id, owner, exc, deps)
        raise


@dataclass
class _Creating:
    """Whether this delivery has called CreateCustomJob yet (from then on a job may exist that it must account for)."""

    called: bool = False


def _give_back(run_id: str, owner: str, exc: Exception, deps: DispatchDeps) -> None:
    """End this delivery's lease now, while it still holds it (nothing written otherwise): it created nothing."""
    released = format_timestamp(deps.now())
    try:
        given = _owned_merge(
            run_id,
            owner,
            lambda r: replace(r, submission=replace(r.submission, lease_until=released)),
            deps,
        )
    except Exception as lost:  # the store failing too: the lease then lapses by itself
        log.warning("run %s: the submission claim could not be given back (%s); it lapses by itself", run_id, lost)
        return
    if given:
        log.info("run %s: failed before creating a job (%s); submission claim given back", run_id, exc)


def _submit_claimed(
    run_id: str,
    request: TrainingRequest,
    outcome: ClaimOutcome,
    run: RunRecord,
    owner: str,
    deps: DispatchDeps,
    creating: _Creating,
    ridden: tuple[str, datetime] | None = None,
) -> str:
    """The claimed part of _submit: adopt an earlier attempt's job (RECOVER), else stop for a recorded cancel, else
    make the CreateCustomJob attempts. `ridden`: the region and slot the claim's Commit took, used for the first
    call there instead of taking another."""
    fault_point("dispatch.after_claim")
    if run.plan is None:
        raise PermanentError(
            f"run {run_id} is {run.state} but its record has no plan (edited by hand?); delete "
            "the run document and publish the request again"
        )
    attempts = list(run.submission.attempts or ())
    canary = canary_rules.canary_due(run, deps.settings.canary_min_hours)
    if outcome == ClaimOutcome.RECOVER:
        # Only an attempt still pending may have made a job: one refused for capacity or a rate limit created none.
        for region in sorted({a.region for a in attempts if not a.outcome.startswith(_REFUSED_OUTCOMES)}):
            # the canary's job while the run is due one, else the long job (each by its labels)
            found = (
                deps.vertex.find_by_run(region, run_id, canary=True)
                if canary
                else deps.vertex.find_by_run(region, run_id)
            )
            if found is not None and not attempt_rules.is_earlier_job(run, found.name):
                log.info("run %s: found job %s from an earlier attempt; not submitting again", run_id, found.name)
                plan = next((a.plan for a in attempts if a.region == region), run.plan)
                said = _record_submitted(run_id, found, plan, attempts, owner, deps, canary=canary)
                if said != KNOWN:
                    return "recovered" if said == "submitted" else f"recovered:{said}"
                log.warning(
                    "run %s: job %s was recorded as ended or superseded since this delivery read the run (its "
                    "creator cancelled it); submitting a new job instead of adopting it",
                    run_id,
                    found.name,
                )
    if run.submission.cancel is not None:  # read in the claim's transaction
        return _cancelled_before_create(run_id, owner, attempts, run.submission.cancel, deps)
    if run.canary is not None and run.canary.status == "replan":
        replanned = _replan_from_canary(run_id, request, run, owner, deps)
        if isinstance(replanned, str):
            return replanned
        run, attempts = replanned, []
    recorded = outcome == ClaimOutcome.CLAIMED and bool(attempts) and attempts[-1].outcome == "pending"
    for plan in attempt_rules.candidates(run):
        if not _reserved(run.submission.queued, plan.region) and deps.limiter is not None:
            if ridden is not None and ridden[0] == plan.region:
                slot, ridden = ridden[1], None
            else:
                slot = deps.limiter.take(plan.region, deps.now())
            wait = (slot - deps.now()).total_seconds()
            if wait > min(QUEUE_SLEEP_MAX_SECONDS, deps.settings.submission_lease_seconds / 4):
                before = attempts[:-1] if recorded else attempts  # the claim's pending attempt: not made
                limit = deps.limiter.per_minute
                why = f"{plan.region} allows {limit} CreateCustomJob calls a minute (LANDFALL_VERTEX_CREATE_PER_MINUTE)"
                return _queue(run_id, owner, before, plan.region, SUBMIT_RATE, why, slot, deps, reserved=True)
            if wait > 0:
                deps.sleep(wait)
        # The claim's own write recorded the first attempt under the lease it granted; a wait for the limiter since
        # then (or a slow take) may have used that lease up, so the claim is checked and renewed before the call (a
        # takeover meanwhile would otherwise make a second job: found by the e2e test killing the dispatcher).
        renew = not recorded or _lease_used(run.submission.lease_until, deps)
        if not recorded:
            attempts.append(_pending_attempt(plan, format_timestamp(deps.now()), run.submission.round))
        recorded = False
        if renew:
            renewed = format_timestamp(deps.now() + timedelta(seconds=deps.settings.submission_lease_seconds))
            held = deps.store.apply(run_id, _next_attempt_step(owner, deps.now(), attempts, renewed))
            if isinstance(held, CancelRequest):
                return _cancelled_before_create(run_id, owner, attempts[:-1], held, deps)
            if not held:
                return _lost_claim(run_id, "before creating its job")
        fault_point("dispatch.after_record_attempt")
        creating.called = True
        try:
            if canary:
                spec = job_spec.canary_job(request, plan, deps.settings, run_id)
            else:
                extra = deps.champion(request) if deps.champion is not None else None
                spec = job_spec.custom_job(request, plan, deps.settings, run_id, extra)
            job = deps.vertex.create(plan.region, spec)
        except CapacityError as exc:
            attempts[-1] = replace(attempts[-1], outcome=f"capacity: {cut(str(exc))}")
            log.warning("run %s: %s; trying the next plan", run_id, exc)
            continue
        except RateLimitedError as exc:  # before TransientError, which it is: queued on this same plan
            attempts[-1] = replace(attempts[-1], outcome=f"rate-limited: {cut(str(exc))}")
            # one rate-limited attempt per plan is kept (the latest): `queued.tries` counts them, and the record stays
            # bounded however long Vertex keeps refusing
            same = (plan.region, plan.machine_type)
            kept = [a for a in attempts[:-1] if not (_rate_limited(a) and (a.region, a.machine_type) == same)]
            attempts = [*kept, attempts[-1]]
            tries = _queued_tries(run.submission.queued)
            delay = RATE_LIMIT_BACKOFF_SECONDS[min(tries, len(RATE_LIMIT_BACKOFF_SECONDS) - 1)]
            retry_at = deps.now() + timedelta(seconds=delay * (1 + random.uniform(0, 0.2)))
            return _queue(run_id, owner, attempts, plan.region, VERTEX_RATE_LIMIT, cut(str(exc)), retry_at, deps)
        except TransientError:
            released = format_timestamp(deps.now())
            _owned_merge(run_id, owner, _with_attempts(attempts, lease_until=released), deps)
            raise
        except PermanentError as exc:
            attempts[-1] = replace(attempts[-1], outcome=f"refused: {cut(str(exc))}")
            deps.store.transition(
                run_id,
                RunState.FAILED,
                now=deps.now(),
                detail="submission refused",
                change=_failed("submit-refused", str(exc), attempts),
            )
            return "failed:submit-refused"
        fault_point("dispatch.after_create_job")
        attempts[-1] = replace(attempts[-1], outcome="created canary" if canary else "created")
        said = _record_submitted(run_id, job, plan, attempts, owner, deps, canary=canary)
        fault_point("dispatch.after_record_submission")
        return said
    if not _owned_merge(run_id, owner, _with_attempts(attempts, lease_until=format_timestamp(deps.now())), deps):
        return _lost_claim(run_id, "after every plan was refused for capacity")
    this_round = run.submission.round or 0
    reasons = "; ".join(a.outcome for a in attempts if a.outcome.startswith("capacity") and a.round == this_round)
    why = (
        f"every planned shape was refused for capacity in round {this_round}: {reasons}. Allow more regions or GPU "
        "kinds, or raise quota."
    )
    state = deps.store.apply(run_id, _wait_step(why, deps.now(), attempt_policy(deps.settings)))
    return f"{'failed:no-capacity' if state == RunState.FAILED else 'waiting:no-capacity'}"


def _next_attempt_step(
    owner: str, now: datetime, attempts: list[SubmissionAttempt], lease_until: str
) -> run_rules.Step[bool | CancelRequest]:
    """Record the next attempt, pending, and renew the lease, while this delivery holds the claim; result: True, False
    (the claim was taken over: nothing written) or the cancel request recorded meanwhile (nothing written)."""
    with_attempts = _with_attempts(attempts, lease_until=lease_until)

    def change(r: RunRecord) -> RunRecord:
        new = with_attempts(r)
        queued = new.submission.queued
        if queued is None or not queued.reserved:
            return new
        # the call about to be made uses the run's limiter slot: a later try takes a new one
        return replace(new, submission=replace(new.submission, queued=replace(queued, reserved=False)))

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, bool | CancelRequest]:
        if cur is None or cur.submission.owner != owner or cur.state != RunState.SUBMITTING:
            return None, False
        if cur.submission.cancel is not None:
            return None, cur.submission.cancel
        return transitioned(cur, cur.state, now=now, change=change), True

    return step


def _cancelled_before_create(
    run_id: str, owner: str, attempts: list[SubmissionAttempt], cancel: CancelRequest, deps: DispatchDeps
) -> str:
    """A cancel was recorded while the run was being submitted: end it CANCELLED, creating no job (issue 28: the
    next delivery created the job anyway and the run ended SUCCEEDED with the cancel request on it)."""
    message = f"cancelled by {cancel.by} at {cancel.at}, while it was being submitted; no job was created"
    stamp = format_timestamp(deps.now())
    with_attempts = _with_attempts(attempts, lease_until=stamp)
    now = deps.now()

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, bool]:
        if cur is None or cur.submission.owner != owner or cur.state != RunState.SUBMITTING:
            return None, False
        new = transitioned(
            cur,
            RunState.CANCELLED,
            now=now,
            detail=message,
            change=lambda r: replace(with_attempts(r), error=RunError("cancelled", message, reason="cancelled")),
        )
        return new, new is not None

    if not deps.store.apply(run_id, step):
        return _lost_claim(run_id, "while ending it for its cancel request")
    log.info("run %s: %s", run_id, message)
    return "cancelled:before-create"


def _owned_merge(run_id: str, owner: str, change: Callable[[RunRecord], RunRecord], deps: DispatchDeps) -> bool:
    """Apply change only while this delivery still holds the submission claim; False (nothing written) when another
    delivery took it over after this one's lease ran out."""
    now = deps.now()

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, bool]:
        if cur is None or cur.submission.owner != owner or cur.state != RunState.SUBMITTING:
            return None, False
        return transitioned(cur, cur.state, now=now, change=change), True

    return bool(deps.store.apply(run_id, step))


def _lost_claim(run_id: str, when: str) -> str:
    """This delivery outlived its lease and another took the submission over: it leaves the run to that one (the
    fault campaign found two jobs for one attempt where both went on)."""
    log.warning(
        "run %s: the submission claim was taken over by another delivery %s; leaving the run to it", run_id, when
    )
    return "lost-claim"


def _lease_used(lease_until: str | None, deps: DispatchDeps) -> bool:
    """Whether a quarter or more of the lease the claim granted (ending lease_until) has gone by."""
    if not lease_until:
        return True
    left = parse_timestamp(lease_until, field="submission.lease_until") - deps.now()
    return left < timedelta(seconds=deps.settings.submission_lease_seconds * 3 / 4)


def _rate_limited(attempt: SubmissionAttempt) -> bool:
    return attempt.outcome.startswith("rate-limited")


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
    if not plans or _reserved(run.submission.queued, plans[0].region):
        return None
    return plans[0].region


def _reserved(queued: Queued | None, region: str) -> bool:
    """Whether the run holds a limiter slot for region, taken when it was queued and not used yet."""
    return queued is not None and queued.reserved and queued.over_at is None and queued.region == region


def _queued_tries(queued: Queued | None) -> int:
    """How many times the run's current queueing has held it back (0: it is not queued now)."""
    return 0 if queued is None or queued.over_at is not None else queued.tries


def _queue_over(queued: Queued | None, stamp: str) -> Queued | None:
    return queued if queued is None or queued.over_at is not None else replace(queued, over_at=stamp, reserved=False)


def _queue(
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
) -> str:
    """Hold the run's submission back for a rate limit, on the same plan: it stays SUBMITTING, says why in
    `submission.queued`, and keeps its lease until retry_at, when the reconciler takes it over (a redelivery meanwhile
    finds the lease live). The delivery is acknowledged: nothing was created, and nothing is lost."""
    now = deps.now()
    stamp = format_timestamp(now)
    until = format_timestamp(retry_at)
    with_attempts = _with_attempts(attempts, lease_until=until)

    def change(r: RunRecord) -> RunRecord:
        new = with_attempts(r)
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

    if not _owned_merge(run_id, owner, change, deps):
        return _lost_claim(run_id, "while queueing it for a rate limit")
    log.info("run %s queued until %s (%s): %s", run_id, until, reason, message)
    return f"queued:{reason}"


def attempt_policy(settings: Settings) -> attempt_rules.AttemptPolicy:
    return attempt_rules.AttemptPolicy(
        settings.max_job_attempts, settings.wait_backoff_seconds, settings.wait_give_up_seconds
    )


def _wait_step(
    reason: str, now: datetime, policy: attempt_rules.AttemptPolicy
) -> Callable[[RunRecord | None], tuple[RunRecord | None, RunState | None]]:
    def step(cur: RunRecord | None) -> tuple[RunRecord | None, RunState | None]:
        new = None if cur is None else attempt_rules.waited(cur, reason, now=now, policy=policy)
        return new, None if new is None else new.state

    return step


def resubmit(run_id: str, deps: DispatchDeps) -> str:
    """Submit a run that was put back in SUBMITTING (a new attempt or round), or take over one whose delivery died
    (RECEIVED: planned first, from the request kept on the run), through the exactly-once path."""
    run = deps.store.get(run_id)
    if run is None:
        raise PermanentError(f"run {run_id} does not exist")
    try:
        request = parse_training_request(json.dumps(run.request).encode())
    except SchemaError as exc:
        raise PermanentError(
            f"run {run_id}: the request kept on it cannot be read ({exc}); publish the request again under a new "
            "idempotency key"
        ) from exc
    if run.state == RunState.RECEIVED:
        # A request that came on a team's own topic keeps that team (recorded with the run) when taken over.
        team = deps.teams.named(run.team.name) if deps.teams is not None and run.team is not None else None
        via_topic = team is not None and run.team is not None and run.team.via == "topic"
        return _plan_and_submit(
            run_id, request, deps, topic=team.requests_topic if team is not None and via_topic else ""
        )
    return _submit(run_id, request, deps, team=run.team.name if run.team else None)


def _came_for_team(request: TrainingRequest, message: PubSubMessage, deps: DispatchDeps) -> RunCharge | None:
    """The team whose own requests topic delivered the request, recorded with the new run (so a takeover knows it)."""
    if not deps.teams or not (message.topic or message.subscription):
        return None
    team = (deps.teams.by_topic(message.topic) if message.topic else None) or (
        deps.teams.by_subscription(message.subscription) if message.subscription else None
    )
    return RunCharge(team.name, via="topic") if team is not None else None


def _with_attempts(
    attempts: list[SubmissionAttempt], lease_until: str | None = None
) -> Callable[[RunRecord], RunRecord]:
    """The change recording every attempt so far (and, when given, the lease's new end)."""
    recorded = tuple(attempts)

    def change(r: RunRecord) -> RunRecord:
        until = r.submission.lease_until if lease_until is None else lease_until
        return replace(r, submission=replace(r.submission, attempts=recorded, lease_until=until))

    return change


def _failed(code: str, message: str, attempts: list[SubmissionAttempt]) -> Callable[[RunRecord], RunRecord]:
    with_attempts = _with_attempts(attempts)
    return lambda r: replace(with_attempts(r), error=RunError(code, message))


def _record_submitted(
    run_id: str,
    job: JobView,
    plan: Plan,
    attempts: list[SubmissionAttempt],
    owner: str,
    deps: DispatchDeps,
    *,
    canary: bool = False,
) -> str:
    """Record the job as the run's (SUBMITTED) while this delivery still holds the submission claim. A delivery that
    outlived its lease, and whose claim another delivery took over meanwhile, records nothing over the other's work:
    its job is either the one the other adopted, or a second job, which it cancels and records as superseded (found
    by the fault campaign: a slow CreateCustomJob past the lease made two jobs for one attempt)."""
    now = deps.now()
    stamp = format_timestamp(now)
    vertex = VertexJobRef(
        job_name=job.name, job_id=job.job_id, region=job.region, display_name=job.display_name, state=job.state
    )
    artifacts = Artifacts(**job_spec.artifacts(deps.settings, run_id, plan.region))
    with_attempts = _with_attempts(attempts, lease_until=stamp)
    started = (
        CanaryRecord(
            status="running",
            job_name=job.name,
            job_id=job.job_id,
            region=job.region,
            machine_type=plan.machine_type,
            submitted_at=stamp,
            planned_step_seconds=plan.estimated_step_time_seconds,
            planned_memory_bytes=plan.memory.total_bytes,
        )
        if canary
        else None
    )
    outcome = deps.store.apply(
        run_id,
        _submitted_step(
            job,
            owner,
            now,
            lambda r: replace(
                with_attempts(r),
                plan=plan,
                vertex=vertex,
                artifacts=artifacts,
                timings=replace(r.timings, submitted_at=stamp),
                submission=replace(with_attempts(r).submission, queued=_queue_over(r.submission.queued, stamp)),
                canary=started or r.canary,
            ).warned(job_spec.label_warnings(_labels_of(r))),
            canary=canary,
        ),
    )
    if outcome == CANCEL_AT_ONCE:
        return _cancel_at_once(run_id, job, deps)
    if outcome == "superseded":
        log.warning(
            "run %s: its submission claim was taken over while job %s was being created; the run has "
            "another job, so this one is cancelled and recorded as superseded",
            run_id,
            job.name,
        )
        try:
            deps.vertex.cancel(job.name)
        except (TransientError, PermanentError) as exc:
            log.warning(
                "run %s: cancelling superseded job %s failed (%s); it stays recorded on the run", run_id, job.name, exc
            )
    return outcome


def _labels_of(run: RunRecord) -> dict[str, Any]:
    """The labels of the request kept on the run."""
    labels = run.request.get("labels")
    return labels if isinstance(labels, dict) else {}


def _cancel_at_once(run_id: str, job: JobView, deps: DispatchDeps) -> str:
    """The job was created while a cancel was being recorded on the run: cancel it now, not at the next reconcile
    pass (the listener records CANCELLED when it stops; should Vertex not answer, the reconciler asks again)."""
    try:
        asked = deps.vertex.cancel(job.name)
    except (TransientError, PermanentError) as exc:
        log.warning("run %s: cancelling job %s failed (%s); the reconciler asks again", run_id, job.name, exc)
        return "submitted:cancel-pending"
    log.info("run %s: cancel recorded while job %s was being created; Vertex asked to cancel it", run_id, job.name)
    return "submitted:cancel-requested" if asked else "submitted:job-ended"


CANCEL_AT_ONCE = "submitted-cancel"
"""The outcome of recording a job on a run whose cancel was recorded while the job was being created."""

KNOWN = "known"
"""The outcome of adopting a job the run already records as ended or superseded: a recovering delivery read the run
before the job's creator, whose claim it took over, cancelled that job (found by `make test`: the recovered run was
recorded SUBMITTED with the cancelled job and ended CANCELLED). It is not adopted; a new job is submitted."""

SUPERSEDED = "superseded"
"""The JobAttempt reason of a second job a delivery created after its claim was taken over (not in any round)."""


def _submitted_step(
    job: JobView, owner: str, now: datetime, change: Callable[[RunRecord], RunRecord], *, canary: bool = False
) -> Callable[[RunRecord | None], tuple[RunRecord | None, str]]:
    def step(cur: RunRecord | None) -> tuple[RunRecord | None, str]:
        if cur is None:
            return None, "gone"
        if cur.submission.owner == owner:
            if attempt_rules.is_earlier_job(cur, job.name):
                return None, KNOWN
            what = "canary job" if canary else "Vertex job"
            new = transitioned(cur, RunState.SUBMITTED, now=now, detail=f"{what} {job.name}", change=change)
            if new is None:
                return None, f"unchanged:{cur.state}"
            return new, "submitted" if cur.submission.cancel is None else CANCEL_AT_ONCE
        if (cur.vertex is not None and cur.vertex.job_name == job.name) or attempt_rules.is_earlier_job(cur, job.name):
            return None, "adopted"
        stamp = format_timestamp(now)
        superseded = JobAttempt(
            job_name=job.name,
            region=job.region,
            machine_type=cur.plan.machine_type if cur.plan else "",
            reason=SUPERSEDED,
            message="created by a delivery whose submission claim was taken over; cancelled",
            at=stamp,
            round=-1,
        )
        sub = cur.submission
        new = transitioned(
            cur,
            cur.state,
            now=now,
            change=lambda r: replace(
                r,
                submission=replace(
                    sub, jobs=(*(sub.jobs or ()), superseded), job_ids=(*(sub.job_ids or ()), job.job_id)
                ),
            ),
        )
        return new, SUPERSEDED

    return step


def _replan_from_canary(
    run_id: str, request: TrainingRequest, run: RunRecord, owner: str, deps: DispatchDeps
) -> RunRecord | str:
    """Plan the run again from its canary's figures (canary.status replan), under this delivery's claim: the new plan
    says so in its reasons, and the run goes on with it (no second canary). A run nothing fits any more FAILS naming
    the canary's figures. Returns the run as now stored, or what happened when it did not go on."""
    assert run.canary is not None and run.plan is not None
    figures = run.canary.figures or CanaryFigures()
    outcome = deps.replan(request, run.plan, figures) if deps.replan is not None else deps.plan(request)
    if outcome.plan is None:
        message = f"planned again from the canary's figures ({run.canary.verdict}), no shape fits: {outcome.rejection}"
        now = deps.now()

        def fail(cur: RunRecord | None) -> tuple[RunRecord | None, bool]:
            if cur is None or cur.submission.owner != owner or cur.state != RunState.SUBMITTING:
                return None, False
            new = transitioned(
                cur,
                RunState.FAILED,
                now=now,
                detail="no plan fits the canary's figures",
                change=lambda r: replace(r, error=RunError("infeasible", cut(message))),
            )
            return new, new is not None

        if not deps.store.apply(run_id, fail):
            return _lost_claim(run_id, "while planning it again from its canary")
        return "failed:canary-replan"
    plan = stored_plan(outcome.plan)
    fallbacks = tuple(stored_plan(p) for p in outcome.fallbacks[:FALLBACKS_KEPT])
    note = replan_note(run.plan, figures, run.canary.verdict)
    if not deps.store.apply(run_id, canary_rules.replanned(plan, fallbacks, cut(note), owner=owner, now=deps.now())):
        return _lost_claim(run_id, "while planning it again from its canary")
    log.info("run %s planned again from its canary: %s", run_id, _plan_summary(plan))
    again = deps.store.get(run_id)
    if again is None:
        raise PermanentError(f"run {run_id} disappeared while it was planned again from its canary")
    return again


def _reject(run_id: str, code: str, reason: str, deps: DispatchDeps) -> str:
    log.warning("run %s rejected (%s): %s", run_id, code, reason)
    deps.store.transition(
        run_id,
        RunState.REJECTED,
        now=deps.now(),
        detail=reason,
        change=lambda r: replace(r, error=RunError(code, reason)),
    )
    return f"rejected:{code}"


def _reject_unreadable(message: PubSubMessage, reason: str, deps: DispatchDeps) -> str:
    """A message that is not a valid TrainingRequest: a REJECTED run when it is readable enough to name one."""
    try:
        raw = json_text.loads(message.data)
    except json_text.JsonTextError:
        raw = None
    if not isinstance(raw, dict):
        log.error("unreadable TrainingRequest (message %s) acknowledged without a run: %s", message.message_id, reason)
        return "dropped:unreadable"
    key = raw.get("idempotency_key")
    key = key if isinstance(key, str) and key.strip() else f"pubsub-message:{message.message_id}"
    run_id = run_id_for(key)
    kept = {k: _storable(raw[k]) for k in list(raw)[:20]}
    deps.store.create_if_absent(
        new_run(
            run_id,
            kept,
            now=deps.now(),
            state=RunState.REJECTED,
            detail=reason,
            error=RunError("invalid-request", reason),
        )
    )
    log.warning("run %s rejected: %s", run_id, reason)
    return "rejected:invalid-request"


KEPT_FIELD_CHARS = 16_000
"""The largest field of an invalid request a REJECTED run keeps as sent (as JSON text); a larger one is kept cut.
Twenty such fields stay far below Firestore's 1 MiB document, which a message of up to Pub/Sub's 10 MB could pass:
the write then failed, and the message was retried until dead-lettered instead of acknowledged with its reason."""


def _storable(value: object) -> object:
    """A field of an invalid request as the run record keeps it: as sent where Firestore can hold it and it is not
    large, else its JSON text, cut (integers past 64 bits and nesting past Firestore's 20 levels make the whole write
    fail, and so does a document past 1 MiB)."""
    text = json.dumps(value, default=str)
    if _fits_firestore(value, depth=1) and len(text) <= KEPT_FIELD_CHARS:
        return value
    return text if len(text) <= 1000 else f"{text[:1000]}... ({len(text)} characters)"


def _fits_firestore(value: object, depth: int) -> bool:
    if isinstance(value, dict):
        return depth < 20 and all(_fits_firestore(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return depth < 20 and all(_fits_firestore(v, depth + 1) for v in value)
    return not isinstance(value, int) or INT64_MIN <= value <= INT64_MAX


def _plan_summary(plan: Plan) -> str:
    gpus = f"{plan.accelerator_count} x {plan.accelerator_type}" if plan.accelerator_type else "no GPU"
    return (
        f"{plan.replica_count} x {plan.machine_type} ({gpus}) in {plan.region}, {plan.strategy}, "
        f"{'spot' if plan.spot else 'on-demand'}"
    )
