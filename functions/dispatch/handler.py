"""Dispatcher: validate a TrainingRequest, record the run, plan it and submit its CustomJob exactly once.

Exactly once: the run id comes from the request's idempotency key (create-if-absent), submission is claimed
under a lease in a transaction, every CreateCustomJob attempt is recorded before it is made, and a delivery that
finds an expired claim looks for the labelled job before submitting again.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from functions.dispatch import job_spec
from functions.dispatch.request_rules import request_problems
from functions.envelopes import PubSubMessage
from functions.errors import PermanentError, TransientError
from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import CapacityError, JobView, VertexJobs
from functions.records.run_rules import ClaimOutcome, Doc, iso
from functions.settings import Settings
from schemas.errors import SchemaError
from schemas.run_record import TERMINAL_STATES, RunState
from schemas.training_request import TrainingRequest, parse_training_request, run_id_for

log = logging.getLogger("landfall.dispatch")


class PlanLike(Protocol):
    region: str
    machine_type: str

    def to_dict(self) -> dict[str, Any]: ...


class OutcomeLike(Protocol):
    plan: Any
    fallbacks: tuple[Any, ...]
    rejection: str | None


@dataclass(frozen=True)
class DispatchDeps:
    settings: Settings
    store: RunsStore
    vertex: VertexJobs
    plan: Callable[[TrainingRequest], OutcomeLike]
    now: Callable[[], datetime]


def new_run_doc(run_id: str, request: dict[str, Any], now: datetime, state: RunState = RunState.RECEIVED,
                detail: str = "") -> Doc:
    stamp = iso(now)
    return {
        "schema_version": 1, "run_id": run_id, "state": state.value, "request": request,
        "created_at": stamp, "updated_at": stamp,
        "history": [{"state": state.value, "at": stamp, "detail": detail}],
        "plan": None, "vertex": None, "artifacts": None, "metrics": None, "error": None,
        "timings": {"created_at": stamp}, "cost": {}, "submission": {},
    }


def handle_training_request(message: PubSubMessage, deps: DispatchDeps) -> str:
    """Process one delivery; returns what happened (for logs and tests). Raises TransientError to be retried."""
    now = deps.now()
    try:
        request = parse_training_request(message.data)
    except SchemaError as exc:
        return _reject_unreadable(message, str(exc), deps)
    run_id = request.run_id
    doc, created = deps.store.create_if_absent(new_run_doc(run_id, request.to_dict(), now))
    state = RunState(doc["state"])
    if not created and (state in TERMINAL_STATES or state in (RunState.SUBMITTED, RunState.RUNNING)):
        log.info("run %s already %s: duplicate delivery of %s ignored", run_id, state, message.message_id)
        return f"duplicate:{state}"
    if state == RunState.RECEIVED:
        problems = request_problems(request, deps.settings, now)
        if problems:
            return _reject(run_id, "invalid-request", "; ".join(problems), deps)
        outcome = deps.plan(request)
        if outcome.plan is None:
            return _reject(run_id, "infeasible", outcome.rejection or "no machine shape fits this request", deps)
        plan = outcome.plan.to_dict()
        deps.store.transition(run_id, RunState.PLANNED, now=deps.now(), detail=_plan_summary(plan), updates={
            "plan": plan,
            "cost": {"estimated_usd": plan.get("estimated_cost_usd")},
            "submission": {"fallbacks": [p.to_dict() for p in outcome.fallbacks[:3]], "attempts": []},
        })
    return _submit(run_id, request, deps)


def _submit(run_id: str, request: TrainingRequest, deps: DispatchDeps) -> str:
    owner = uuid.uuid4().hex
    claim = deps.store.claim_submission(run_id, owner=owner, now=deps.now(),
                                        lease_seconds=deps.settings.submission_lease_seconds)
    if claim.outcome == ClaimOutcome.BUSY:
        raise TransientError(f"run {run_id}: another delivery is submitting it; retry after its lease")
    if claim.outcome == ClaimOutcome.DONE:
        return f"duplicate:{claim.doc['state']}"
    if claim.outcome == ClaimOutcome.NOT_READY:
        raise TransientError(f"run {run_id} is not planned yet")
    doc = claim.doc
    attempts: list[dict[str, Any]] = list(doc["submission"].get("attempts", []))
    if claim.outcome == ClaimOutcome.RECOVER:
        for region in sorted({a["region"] for a in attempts}):
            found = deps.vertex.find_by_run(region, run_id)
            if found is not None:
                log.info("run %s: found job %s from an earlier attempt; not submitting again", run_id, found.name)
                plan = next((a["plan"] for a in attempts if a["region"] == region), doc["plan"])
                _record_submitted(run_id, found, plan, attempts, deps)
                return "recovered"
    plans = [doc["plan"], *doc["submission"].get("fallbacks", [])]
    for plan in plans:
        attempt = {"region": plan["region"], "machine_type": plan["machine_type"], "at": iso(deps.now()),
                   "outcome": "pending", "plan": plan}
        attempts.append(attempt)
        deps.store.merge(run_id, {"submission": {"attempts": attempts}}, now=deps.now())
        try:
            job = deps.vertex.create(plan["region"], job_spec.custom_job(request, plan, deps.settings, run_id))
        except CapacityError as exc:
            attempt["outcome"] = f"capacity: {exc}"
            log.warning("run %s: %s; trying the next plan", run_id, exc)
            continue
        except TransientError:
            deps.store.merge(run_id, {"submission": {"attempts": attempts, "lease_until": iso(deps.now())}},
                             now=deps.now())
            raise
        except PermanentError as exc:
            attempt["outcome"] = f"refused: {exc}"
            deps.store.transition(run_id, RunState.FAILED, now=deps.now(), detail="submission refused", updates={
                "error": {"code": "submit-refused", "message": str(exc)}, "submission": {"attempts": attempts}})
            return "failed:submit-refused"
        attempt["outcome"] = "created"
        _record_submitted(run_id, job, plan, attempts, deps)
        return "submitted"
    reasons = "; ".join(a["outcome"] for a in attempts if a["outcome"].startswith("capacity"))
    deps.store.transition(run_id, RunState.FAILED, now=deps.now(), detail="no capacity", updates={
        "error": {"code": "no-capacity", "message": f"every planned shape was refused for capacity: {reasons}. "
                  "Allow more regions or GPU kinds, or raise quota."},
        "submission": {"attempts": attempts}})
    return "failed:no-capacity"


def _record_submitted(run_id: str, job: JobView, plan: dict[str, Any], attempts: list[dict[str, Any]],
                      deps: DispatchDeps) -> None:
    now = deps.now()
    deps.store.transition(run_id, RunState.SUBMITTED, now=now, detail=f"Vertex job {job.name}", updates={
        "plan": plan,
        "vertex": {"job_name": job.name, "job_id": job.job_id, "region": job.region,
                   "display_name": job.display_name, "state": job.state},
        "artifacts": job_spec.artifacts(deps.settings, run_id, plan.get("region")),
        "timings": {"submitted_at": iso(now)},
        "submission": {"attempts": attempts, "lease_until": iso(now)},
    })


def _reject(run_id: str, code: str, reason: str, deps: DispatchDeps) -> str:
    log.warning("run %s rejected (%s): %s", run_id, code, reason)
    deps.store.transition(run_id, RunState.REJECTED, now=deps.now(), detail=reason,
                          updates={"error": {"code": code, "message": reason}})
    return f"rejected:{code}"


def _reject_unreadable(message: PubSubMessage, reason: str, deps: DispatchDeps) -> str:
    """A message that is not a valid TrainingRequest: a REJECTED run when it is readable enough to name one."""
    try:
        raw = json.loads(message.data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raw = None
    if not isinstance(raw, dict):
        log.error("unreadable TrainingRequest (message %s) acknowledged without a run: %s", message.message_id, reason)
        return "dropped:unreadable"
    key = raw.get("idempotency_key")
    key = key if isinstance(key, str) and key.strip() else f"pubsub-message:{message.message_id}"
    run_id = run_id_for(key)
    kept = {k: raw[k] for k in list(raw)[:20]}
    doc = new_run_doc(run_id, kept, deps.now(), RunState.REJECTED, detail=reason)
    doc["error"] = {"code": "invalid-request", "message": reason}
    deps.store.create_if_absent(doc)
    log.warning("run %s rejected: %s", run_id, reason)
    return "rejected:invalid-request"


def _plan_summary(plan: dict[str, Any]) -> str:
    gpus = f"{plan.get('accelerator_count')} x {plan.get('accelerator_type')}" if plan.get("accelerator_type") \
        else "no GPU"
    return (f"{plan.get('replica_count', 1)} x {plan['machine_type']} ({gpus}) in {plan['region']}, "
            f"{plan.get('strategy')}, {'spot' if plan.get('spot') else 'on-demand'}")
