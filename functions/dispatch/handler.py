"""Dispatcher: validate a TrainingRequest, record the run, plan it and submit its CustomJob exactly once.

Exactly once: the run id comes from the request's idempotency key (create-if-absent), submission is claimed
under a lease in a transaction, every CreateCustomJob attempt is recorded before it is made, and a delivery that
finds an expired claim looks for the labelled job before submitting again. A delivery that fails before it calls
CreateCustomJob gives the claim back at once; one that finds a cancel recorded (in the claim's transaction, or
before a further plan) ends the run CANCELLED without creating, and cancels at once a job it created meanwhile.

This module reads as the steps of one delivery; each policy it applies has its module beside it: deps.py (what it is
handed), rejections.py (a refused request), ownership.py (the submission claim every change under it checks),
queueing.py (rate limits: a run is queued on its plan, never moved to a fallback for one), job_record.py (the
attempts and the job on the run), canary_replan.py (planning again from a canary's figures); outcomes.py names what a
delivery came to.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from functions.dispatch import job_record, job_spec
from functions.dispatch.canary_replan import replan_from_canary
from functions.dispatch.code_versions import code_uris, code_versions, outside_team_folder
from functions.dispatch.dataset_check import HeadAhead, check_dataset, read_head_ahead
from functions.dispatch.deps import DispatchDeps
from functions.dispatch.job_record import (
    FALLBACKS_KEPT,
    cancelled_before_create,
    first_attempt,
    next_attempt_step,
    pending_attempt,
    plan_summary,
)
from functions.dispatch.outcomes import Outcome, Said
from functions.dispatch.ownership import give_back, lease_live, lease_used, lost_claim, owned_merge
from functions.dispatch.queueing import attempt_policy, queue_rate_limited, slot_region, wait_for_slot, wait_step
from functions.dispatch.rejections import INVALID_REQUEST, reject, reject_unreadable
from functions.dispatch.request_rules import request_problems
from functions.dispatch.team_rules import (
    admitted_claim,
    allowed_fallbacks,
    kept_back,
    next_plan_refusal,
    team_of,
    team_rejection,
    team_wait_step,
)
from functions.envelopes import PubSubMessage
from functions.errors import MissingPermission, PermanentError, TransientError
from functions.fault_points import fault_point
from functions.gcp.vertex import CapacityError, RateLimitedError
from functions.records import attempts as attempt_rules
from functions.records import canary as canary_rules
from functions.records import run_rules
from functions.records.bounds import stored_plan
from functions.records.capacity_events import call_refused
from functions.records.leases import ClaimOutcome
from schemas.code_version import CodeObject, pins
from schemas.errors import SchemaError
from schemas.record_bounds import cut
from schemas.run_record import (
    TERMINAL_STATES,
    AttemptKind,
    AttemptOutcome,
    CancelRequest,
    RunRecord,
    RunState,
    SubmissionAttempt,
    new_run,
)
from schemas.team_ledger import RunCharge
from schemas.times import format_timestamp
from schemas.training_request import RUN_ID_ATTRIBUTE, TrainingRequest, parse_training_request

log = logging.getLogger("landfall.dispatch")


def handle_training_request(message: PubSubMessage, deps: DispatchDeps) -> str:
    """Process one delivery; returns what happened (for logs and tests). Raises TransientError to be retried."""
    return str(_delivered(message, deps))


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
        return str(
            _plan_and_submit(run_id, request, deps, topic=team.requests_topic if team is not None and via_topic else "")
        )
    return str(_submit(run_id, request, deps, team=run.team.name if run.team else None))


def _delivered(message: PubSubMessage, deps: DispatchDeps) -> Outcome:
    now = deps.now()
    try:
        request = parse_training_request(message.data)
    except SchemaError as exc:
        return reject_unreadable(message, str(exc), deps)
    run_id = request.run_id
    # The run is created first (Firestore create(): one delivery wins), which a first delivery, the common case,
    # needs anyway; a duplicate learns from the create's refusal and one read what the run is. States only move
    # forward, so a stale read can only be behind. A request Landfall handed over for a run that exists (a woken
    # run, RUN_ID_ATTRIBUTE) reads the run first instead.
    handed = message.attributes.get(RUN_ID_ATTRIBUTE) == run_id
    ahead = None
    # Reads, beside the create below: the check and the plan that follow take them. Never of a bucket Landfall does
    # not read from (its request is rejected for it below): the account may not read it, nor should it try.
    if not handed and request.dataset.bucket in deps.settings.allowed_buckets:
        if deps.prefetch is not None:
            deps.prefetch(request)
        ahead = read_head_ahead(request, deps.objects) if deps.objects is not None else None
    found = deps.store.get(run_id) if handed else None
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
        return Outcome(Said.DUPLICATE, run.state.value)
    if not created and run.state == RunState.SUBMITTING and lease_live(run, now):
        raise TransientError(f"run {run_id}: another delivery is submitting it; retry after its lease")
    fault_point("dispatch.after_record")
    if run.state == RunState.RECEIVED:
        return _plan_and_submit(
            run_id, request, deps, topic=message.topic, subscription=message.subscription, ahead=ahead
        )
    return _submit(run_id, request, deps, team=run.team.name if run.team else None)


def _plan_and_submit(
    run_id: str,
    request: TrainingRequest,
    deps: DispatchDeps,
    *,
    topic: str = "",
    subscription: str = "",
    ahead: HeadAhead | None = None,
) -> Outcome:
    """Check and plan a RECEIVED run, then claim and submit it (a delivery, or the reconciler taking over a run whose
    delivery died after recording it: the subscription it came on is not known then, and the team is its data's)."""
    problems = request_problems(request, deps.settings, deps.now())
    if problems:
        return reject(run_id, INVALID_REQUEST, "; ".join(problems), deps)
    charge, refused = team_of(
        request, deps.teams, topic=topic, subscription=subscription, ingested=deps.ingested or _not_ingested
    )
    if refused is not None:
        return reject(run_id, refused.code, refused.reason, deps)
    folder_team = charge.name if charge is not None else ""
    refusal = (
        check_dataset(request, deps.objects, deps.settings, ahead, team=folder_team)
        if deps.objects is not None
        else None
    )
    if refusal is not None:
        return reject(run_id, refusal.code, refusal.reason, deps)
    code: tuple[CodeObject, ...] = ()
    if charge is not None and deps.settings.team_service_account and code_uris(request):
        outside = outside_team_folder(request, charge.name, deps.settings.code_bucket)
        if outside is not None:  # its own identity could not read it: refused now, not as a 403 in the job
            return reject(run_id, INVALID_REQUEST, outside, deps)
    if deps.objects is not None and code_uris(request):  # the exact version of the team's code, before planning
        code, missing = code_versions(request, deps.objects)
        if missing is not None:
            return reject(run_id, INVALID_REQUEST, missing, deps)
    outcome = deps.plan(request)
    if outcome.plan is None:
        return reject(run_id, "infeasible", outcome.rejection or "no machine shape fits this request", deps)
    # The run keeps each plan with its best few alternatives (schemas/record_bounds.py); `landfall plan` lists all.
    # A fallback the team's hard limits exclude (a GPU kind its cap leaves out) is never kept to be tried.
    allowed = allowed_fallbacks(deps.teams, charge, outcome.fallbacks, deps.now())
    plan, fallbacks = stored_plan(outcome.plan), tuple(stored_plan(p) for p in allowed[:FALLBACKS_KEPT])
    over = team_rejection(deps.teams, charge, plan, deps.now())
    if over is not None:
        return reject(run_id, over.code, over.reason, deps)
    fault_point("dispatch.after_plan")
    # Recorded with the claim, in its transaction (one write instead of two on the way to CreateCustomJob).
    planned = run_rules.transition(
        RunState.PLANNED,
        now=deps.now(),
        detail=plan_summary(plan),
        change=lambda r: replace(
            r,
            plan=plan,
            cost=replace(r.cost, estimated_usd=plan.estimated_cost_usd),
            submission=replace(r.submission, fallbacks=fallbacks, attempts=()),
            team=charge or r.team,
            code=code or r.code,
        ),
    )
    return _submit(run_id, request, deps, planned=planned, team=charge.name if charge else None)


def _not_ingested(request: TrainingRequest) -> bool:
    return False


def _settled(state: RunState) -> bool:
    """A delivery that finds the run in this state has nothing to do: its job was submitted, or it ended."""
    return state in TERMINAL_STATES or state in (RunState.SUBMITTED, RunState.RUNNING, RunState.WAITING)


def _came_for_team(request: TrainingRequest, message: PubSubMessage, deps: DispatchDeps) -> RunCharge | None:
    """The team whose own requests topic delivered the request, recorded with the new run (so a takeover knows it)."""
    if not deps.teams or not (message.topic or message.subscription):
        return None
    team = (deps.teams.by_topic(message.topic) if message.topic else None) or (
        deps.teams.by_subscription(message.subscription) if message.subscription else None
    )
    return RunCharge(team.name, via="topic") if team is not None else None


def _submit(
    run_id: str,
    request: TrainingRequest,
    deps: DispatchDeps,
    planned: run_rules.Step[object] | None = None,
    team: str | None = None,
) -> Outcome:
    """Claim the run's submission (after `planned`, the move to PLANNED, in the same transaction) and make its
    CreateCustomJob attempts. A fresh claim records the first attempt with the claim itself.

    A delivery that fails before it has called CreateCustomJob gives the claim back at once: it created nothing, so
    its redelivery (or the reconciler) need not wait out the lease (Vertex answering UNAVAILABLE to a recovering
    delivery's look for an earlier job would otherwise keep the run unsubmitted for the whole lease)."""
    owner = uuid.uuid4().hex
    now = deps.now()
    lease_seconds = deps.settings.submission_lease_seconds
    known = deps.teams.named(team) if deps.teams is not None and team is not None else None
    if known is not None and deps.ledger is not None:
        # The claim and the team's ledger written together: two deliveries never both pass a cap (docs/teams.md).
        claim_step = run_rules.claim_submission(
            run_id,
            owner=owner,
            now=now,
            lease_seconds=lease_seconds,
            first_attempt=first_attempt(format_timestamp(now)),
        )
        admitted = admitted_claim(
            known, claim_step, before=planned, now=now, wait_seconds=deps.settings.wait_backoff_seconds
        )
        claim, admission = deps.ledger.apply(run_id, known.name, admitted)
        if admission is not None and admission.verdict != "fits":
            log.info("run %s: %s (%s)", run_id, admission.verdict, admission.message)
            waits = claim.doc.state == RunState.WAITING
            return Outcome(Said.WAITING if waits else Said.FAILED, admission.verdict)
    else:
        claim = deps.store.claim_submission(
            run_id,
            owner=owner,
            now=now,
            lease_seconds=lease_seconds,
            first_attempt=first_attempt(format_timestamp(now)),
            before=planned,
        )
    if claim.outcome == ClaimOutcome.BUSY:
        raise TransientError(f"run {run_id}: another delivery is submitting it; retry after its lease")
    if claim.outcome == ClaimOutcome.DONE:
        return Outcome(Said.DUPLICATE, claim.doc.state.value)
    if claim.outcome == ClaimOutcome.NOT_READY:
        raise TransientError(f"run {run_id} is not planned yet")
    creating = _Creating()
    # The first plan's limiter slot, taken in the claim's own write where that was one Commit (slot_region).
    taken = deps.limiter.taken_with_claim(run_id) if deps.limiter is not None else None
    ridden = dict([taken]) if taken is not None else {}
    try:
        return _submit_claimed(run_id, request, claim.outcome, claim.doc, owner, deps, creating, ridden)
    except Exception as exc:
        if not creating.called:
            give_back(run_id, owner, exc, deps)
        raise


@dataclass
class _Creating:
    """Whether this delivery has called CreateCustomJob yet (from then on a job may exist that it must account for)."""

    called: bool = False


def _submit_claimed(
    run_id: str,
    request: TrainingRequest,
    outcome: ClaimOutcome,
    run: RunRecord,
    owner: str,
    deps: DispatchDeps,
    creating: _Creating,
    ridden: dict[str, datetime],
) -> Outcome:
    """The claimed part of _submit: adopt an earlier attempt's job (RECOVER), else stop for a recorded cancel, else
    make the CreateCustomJob attempts. `ridden`: the slot the claim's Commit took, by region, used for the first call
    there instead of taking another."""
    fault_point("dispatch.after_claim")
    if run.plan is None:
        raise PermanentError(
            f"run {run_id} is {run.state} but its record has no plan (edited by hand?); delete "
            "the run document and publish the request again"
        )
    attempts = list(run.submission.attempts or ())
    canary_why = canary_rules.canary_reason(
        run, deps.settings.canary_min_hours, first_runs=deps.settings.canary_first_runs
    )
    canary = bool(canary_why)
    if outcome == ClaimOutcome.RECOVER:
        recovered = _recover(run_id, run, attempts, owner, deps, canary=canary)
        if recovered is not None:
            return recovered
    if run.submission.cancel is not None:  # read in the claim's transaction
        return cancelled_before_create(run_id, owner, attempts, run.submission.cancel, deps)
    if run.canary is not None and run.canary.status == "replan":
        replanned = replan_from_canary(run_id, request, run, owner, deps)
        if isinstance(replanned, Outcome):
            return replanned
        run, attempts = replanned, []
    recorded = outcome == ClaimOutcome.CLAIMED and bool(attempts) and attempts[-1].result.kind == AttemptKind.PENDING
    team = run.team.name if run.team is not None else ""  # its folder, and its identity where teams have their own
    for plan in attempt_rules.candidates(run):
        not_admitted, run = next_plan_refusal(deps.teams, deps.ledger, run_id, run, plan, owner=owner, now=deps.now())
        if not_admitted is not None:
            if not not_admitted:
                return lost_claim(run_id, "before admitting its next plan against its team's limits")
            if not recorded:
                attempts.append(pending_attempt(plan, format_timestamp(deps.now()), run))
            attempts[-1] = attempts[-1].ended(AttemptOutcome(AttemptKind.NOT_ADMITTED, cut(not_admitted)))
            recorded = False
            log.warning("run %s: %s (%s); trying the next plan", run_id, plan.machine_type, not_admitted)
            continue
        made = attempts[:-1] if recorded else attempts  # the claim's pending attempt: not made
        queued = wait_for_slot(run_id, owner, run, plan, made, deps, ridden)
        if queued is not None:
            return queued
        # The claim's own write recorded the first attempt under the lease it granted; a wait for the limiter since
        # then (or a slow take) may have used that lease up, so the claim is checked and renewed before the call (a
        # takeover meanwhile would otherwise make a second job: found by the e2e test killing the dispatcher).
        renew = not recorded or lease_used(run.submission.lease_until, deps)
        if not recorded:
            attempts.append(pending_attempt(plan, format_timestamp(deps.now()), run))
        recorded = False
        if renew:
            renewed = format_timestamp(deps.now() + timedelta(seconds=deps.settings.submission_lease_seconds))
            held = deps.store.apply(run_id, next_attempt_step(owner, deps.now(), attempts, renewed))
            if isinstance(held, CancelRequest):
                return cancelled_before_create(run_id, owner, attempts[:-1], held, deps)
            if not held:
                return lost_claim(run_id, "before creating its job")
        fault_point("dispatch.after_record_attempt")
        creating.called = True
        try:
            if canary:
                spec = job_spec.canary_job(request, plan, deps.settings, run_id, pins=pins(run.code), team=team)
            else:
                extra = deps.champion(request) if deps.champion is not None else None
                spec = job_spec.custom_job(request, plan, deps.settings, run_id, extra, pins=pins(run.code), team=team)
            job = deps.vertex.create(plan.region, spec)
        except CapacityError as exc:
            if deps.capacity is not None:  # for the planner: this shape was refused here (functions/planning/risk.py)
                deps.capacity(call_refused(run_id, attempts[-1], str(exc), deps.now()))
            attempts[-1] = attempts[-1].ended(AttemptOutcome(AttemptKind.CAPACITY, cut(str(exc))))
            log.warning("run %s: %s; trying the next plan", run_id, exc)
            continue
        except RateLimitedError as exc:  # before TransientError, which it is: queued on this same plan
            return queue_rate_limited(run_id, owner, attempts, plan, run.submission.queued, str(exc), deps)
        except TransientError:
            released = format_timestamp(deps.now())
            owned_merge(run_id, owner, attempt_rules.with_attempts(attempts, lease_until=released), deps)
            raise
        except MissingPermission as exc:
            if not deps.settings.grants_settling(deps.now()):
                return _refused(run_id, attempts, exc, deps)
            # a grant the deploy made may not have reached Vertex yet: the delivery retries (with back-off)
            released = format_timestamp(deps.now())
            owned_merge(run_id, owner, attempt_rules.with_attempts(attempts, lease_until=released), deps)
            raise TransientError(
                f"{exc} (within {deps.settings.grants_settle_seconds} s of the deploy: retried)"
            ) from exc
        except PermanentError as exc:
            return _refused(run_id, attempts, exc, deps)
        fault_point("dispatch.after_create_job")
        made_kind = AttemptKind.CREATED_CANARY if canary else AttemptKind.CREATED
        attempts[-1] = attempts[-1].ended(AttemptOutcome(made_kind))
        said = job_record.record_submitted(
            run_id, job, plan, attempts, owner, deps, canary=canary, canary_why=canary_why, team=team
        )
        fault_point("dispatch.after_record_submission")
        return said
    return _no_capacity(run_id, run, attempts, owner, deps)


def _refused(run_id: str, attempts: list[SubmissionAttempt], exc: PermanentError, deps: DispatchDeps) -> Outcome:
    """Vertex refused the job for good: the run ends FAILED `submit-refused` with Vertex's words."""
    attempts[-1] = attempts[-1].ended(AttemptOutcome(AttemptKind.REFUSED, cut(str(exc))))
    deps.store.transition(
        run_id,
        RunState.FAILED,
        now=deps.now(),
        detail="submission refused",
        change=job_record.failed("submit-refused", str(exc), attempts),
    )
    return Outcome(Said.FAILED, "submit-refused")


def _recover(
    run_id: str, run: RunRecord, attempts: list[SubmissionAttempt], owner: str, deps: DispatchDeps, *, canary: bool
) -> Outcome | None:
    """A claim taken over from a delivery whose lease ran out: adopt the job an earlier attempt made, if any (None:
    none found, submit)."""
    # Only an attempt still pending may have made a job: one refused for capacity or a rate limit created none.
    for region in sorted({a.region for a in attempts if not a.result.kind.made_no_job}):
        # the canary's job while the run is due one, else the long job (each by its labels)
        found = (
            deps.vertex.find_by_run(region, run_id, canary=True) if canary else deps.vertex.find_by_run(region, run_id)
        )
        if found is not None and not attempt_rules.is_earlier_job(run, found.name):
            log.info("run %s: found job %s from an earlier attempt; not submitting again", run_id, found.name)
            plan = next((a.plan for a in attempts if a.region == region), run.plan)
            assert plan is not None
            team = run.team.name if run.team is not None else ""
            said = job_record.record_submitted(run_id, found, plan, attempts, owner, deps, canary=canary, team=team)
            if said.kind != Said.KNOWN:
                return Outcome(Said.RECOVERED, "" if said == Outcome(Said.SUBMITTED) else str(said))
            log.warning(
                "run %s: job %s was recorded as ended or superseded since this delivery read the run (its "
                "creator cancelled it); submitting a new job instead of adopting it",
                run_id,
                found.name,
            )
    return None


def _no_capacity(
    run_id: str, run: RunRecord, attempts: list[SubmissionAttempt], owner: str, deps: DispatchDeps
) -> Outcome:
    """Every plan of the round was refused for capacity: the run WAITS for the next round (or FAILS, waited out)."""
    if not owned_merge(
        run_id, owner, attempt_rules.with_attempts(attempts, lease_until=format_timestamp(deps.now())), deps
    ):
        return lost_claim(run_id, "after every plan was refused for capacity")
    this_round = run.submission.round or 0
    refused = (AttemptKind.CAPACITY, AttemptKind.NOT_ADMITTED)
    reasons = "; ".join(a.outcome for a in attempts if a.result.kind in refused and a.round == this_round)
    why = (
        f"every planned shape was refused for capacity or by its team's limits in round {this_round}: {reasons}. "
        "Allow more regions or GPU kinds, or raise quota or the team's limits."
    )
    admission = kept_back(run, attempts)
    if (
        admission is not None
    ):  # only the team's cap or budget held it back: it waits for its team, woken when it has room
        wait = deps.settings.wait_backoff_seconds
        waited = deps.store.apply(run_id, team_wait_step(admission, deps.now(), wait))
        return Outcome(Said.WAITING if waited == RunState.WAITING else Said.FAILED, str(admission.verdict))
    state = deps.store.apply(run_id, wait_step(why, deps.now(), attempt_policy(deps.settings)))
    return Outcome(Said.FAILED if state == RunState.FAILED else Said.WAITING, "no-capacity")


__all__ = ["DispatchDeps", "attempt_policy", "handle_training_request", "resubmit", "slot_region"]
