"""Which team a request counts against, and the team checks the dispatcher makes before and in the submission claim
(docs/teams.md). Teams come from the teams file (deploy/teams.py); with none, every request is allowed as before.

A request names its team by where it comes from: the team's own requests topic (Pub/Sub IAM decides who may publish
there), or ingest, for data under the team's prefixes (the team owning the longest matching prefix). A request on a
team's topic for data outside that team's prefixes is REJECTED (team-prefix); one from anyone else (the shared
requests topic) for a team's data is REJECTED (team-caller): it is never charged to the team; data no team owns runs
as before, or is REJECTED when the file says unowned = "reject" (team-unowned-data, the default with teams). A run
whose own GPUs or estimate pass a hard limit is REJECTED when planned (team-limit); the caps and the budget are
checked in the claim's transaction (functions/records/team_ledger.py claim_admitted).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol, TypeVar

from deploy.teams import Team, Teams
from functions.records.leases import Claim
from functions.records.run_rules import Step, after
from functions.records.team_ledger import (
    Admission,
    Verdict,
    admit,
    claim_admitted,
    holds_for,
    plan_gpus,
    readmitted,
    team_waited,
)
from schemas.plan import Plan
from schemas.run_record import AttemptKind, RunRecord, RunState, SubmissionAttempt
from schemas.team_ledger import RunCharge, TeamLedger
from schemas.training_request import TrainingRequest
from schemas.vocabulary import TEAM_CALLER, TEAM_LIMIT, TEAM_PREFIX, TEAM_UNOWNED

T = TypeVar("T")


class LedgerPort(Protocol):
    """The team ledger store (functions/gcp/team_ledger_store.py TeamLedgerStore; the tests' fake)."""

    def apply(
        self,
        run_id: str,
        team: str,
        step: Callable[[RunRecord | None, TeamLedger | None], tuple[RunRecord | None, TeamLedger | None, T]],
    ) -> T:
        """Read the run and the team's ledger, run step, write what it returns, all atomically."""
        ...


@dataclass(frozen=True)
class TeamRefusal:
    code: str
    reason: str


def team_of(
    request: TrainingRequest,
    teams: Teams | None,
    *,
    topic: str = "",
    subscription: str = "",
    ingested: Callable[[TrainingRequest], bool] = lambda request: False,
) -> tuple[RunCharge | None, TeamRefusal | None]:
    """The team the request counts against (None: no team), or why it is refused. `topic`, `subscription`: where it
    arrived ("" when not known, e.g. a run the reconciler takes over). `ingested`: whether ingest made the request
    (its dataset version is in ingest's outbox under the run's id, written by Landfall's functions only): asked only
    for a request not on a team's own topic whose data a team owns."""
    if not teams:
        return None, None
    bucket, prefix = request.dataset.bucket, request.dataset.prefix
    by_topic = (teams.by_topic(topic) if topic else None) or (
        teams.by_subscription(subscription) if subscription else None
    )
    if by_topic is not None:
        if not by_topic.owns_data(bucket, prefix):
            owned = ", ".join(str(o) for o in by_topic.owns)
            return None, TeamRefusal(
                TEAM_PREFIX,
                f"the request came on team {by_topic.name!r}'s topic {by_topic.requests_topic} but its data "
                f"gs://{bucket}/{prefix} is outside the team's prefixes ({owned}); publish it for data the team owns, "
                "or have the data's prefix given to the team in the teams file",
            )
        return RunCharge(by_topic.name, via="topic"), None
    owner = teams.owner_of(bucket, prefix)
    if owner is not None:
        if ingested(request):
            return RunCharge(owner.name, via="route"), None
        return None, TeamRefusal(TEAM_CALLER, _not_the_caller(owner, bucket, prefix))
    if teams.unowned == "reject":
        return None, TeamRefusal(
            TEAM_UNOWNED,
            f"no team owns gs://{bucket}/{prefix} and the teams file ({teams.source}) rejects data no team owns; "
            "add the prefix to a team's `owns`",
        )
    return None, None


def _not_the_caller(owner: Team, bucket: str, prefix: str) -> str:
    """Why a request from outside the team (the shared requests topic) is not charged to the team owning its data,
    and how the team's members start such a run."""
    if owner.requests_topic:
        way = (
            f"its members publish on the team's own topic {owner.requests_topic} (`landfall submit --team "
            f"{owner.name}`; Pub/Sub IAM decides who may)"
        )
    else:
        way = "the team has no requests topic of its own (`requests_topic` in the teams file gives it one)"
    return (
        f"the request came on the shared requests topic, but team {owner.name!r} owns gs://{bucket}/{prefix}, and a "
        f"team's runs are charged to it only when they come from the team: {way}, or ingest starts them from data "
        "dropped under the team's prefixes"
    )


def team_rejection(teams: Teams | None, charge: RunCharge | None, plan: Plan, now: datetime) -> TeamRefusal | None:
    """Why a planned run can never run under its team's limits (its GPUs pass a cap alone, or its estimate the hard
    limit per run), or None."""
    team = teams.named(charge.name) if teams is not None and charge is not None else None
    if team is None:
        return None
    admission = admit(team, None, plan_gpus(plan), plan.estimated_cost_usd, now)
    return TeamRefusal(TEAM_LIMIT, admission.message) if admission.verdict == Verdict.REJECT else None


def admitted_claim(
    team: Team,
    claim: Step[Claim[RunRecord]],
    *,
    before: Step[object] | None,
    now: datetime,
    wait_seconds: int,
) -> Callable[
    [RunRecord | None, TeamLedger | None],
    tuple[RunRecord | None, TeamLedger | None, tuple[Claim[RunRecord], Admission | None]],
]:
    """The claim (after `before`, the move to PLANNED, in the same transaction) admitted against the team's ledger."""
    return claim_admitted(team, claim if before is None else after(before, claim), now=now, wait_seconds=wait_seconds)


def next_plan_refusal(
    teams: Teams | None,
    ledger: LedgerPort | None,
    run_id: str,
    run: RunRecord,
    plan: Plan,
    *,
    owner: str,
    now: datetime,
) -> tuple[str | None, RunRecord]:
    """Why the run's team does not admit `plan` now, as "team-cap: ...", or None where it does; "" when the claim
    is no longer this delivery's (`owner`). With it, the run with its charge as it now stands (its hold moved to
    the plan where it needed to). Every plan a claimed run is submitted on passes here: a plan its hold covers at
    once, any other in a transaction over the run and the team's ledger (functions/records/team_ledger.py
    readmitted). A run of no team, or of a team the file no longer has, is admitted."""
    team = teams.named(run.team.name) if teams is not None and run.team is not None else None
    if team is None or ledger is None or run.team is None or holds_for(run.team, plan):
        return None, run
    decided = ledger.apply(run_id, team.name, readmitted(team, plan, owner=owner, now=now))
    if decided is None:
        return "", run
    admission, charge = decided
    if admission.verdict == Verdict.FITS:
        return None, replace(run, team=charge)
    return f"{admission.verdict}: {admission.message}", run


def allowed_fallbacks(
    teams: Teams | None, charge: RunCharge | None, fallbacks: Sequence[Plan], now: datetime
) -> tuple[Plan, ...]:
    """The fallbacks the team's hard limits allow (a GPU kind its cap excludes, an estimate above its limit per run
    can never run: they are not kept to be tried)."""
    return tuple(p for p in fallbacks if team_rejection(teams, charge, p, now) is None)


def team_wait_step(
    admission: Admission, now: datetime, wait_seconds: int
) -> Callable[[RunRecord | None], tuple[RunRecord | None, RunState | None]]:
    """Send the run WAITING for its team's room (team-cap or team-budget), as a claim that does not fit does; result:
    its state."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, RunState | None]:
        new = None if cur is None else team_waited(cur, admission, now=now, wait_seconds=wait_seconds)
        return new, None if new is None else new.state

    return step


def kept_back(run: RunRecord, attempts: Sequence[SubmissionAttempt]) -> Admission | None:
    """The team's verdict when every plan of the run's current round was kept back by its team's cap or budget
    (none refused by Vertex for capacity), as an admission to wait on; None otherwise (a capacity wait, as before).
    A wait for the team is woken when the team has room, which a wait for capacity is not."""
    number = run.submission.round or 0
    refused = [
        a for a in attempts if a.round == number and a.result.kind in (AttemptKind.CAPACITY, AttemptKind.NOT_ADMITTED)
    ]
    if not refused or any(a.result.kind != AttemptKind.NOT_ADMITTED for a in refused):
        return None
    verdicts = [a.result.detail.partition(": ")[0] for a in refused]
    if not set(verdicts) <= {Verdict.WAIT_CAP.value, Verdict.WAIT_BUDGET.value, Verdict.REJECT.value}:
        return None
    waits = [(v, a.result.detail) for v, a in zip(verdicts, refused, strict=True) if v != Verdict.REJECT.value]
    if not waits:
        return None
    verdict, detail = waits[-1]
    return Admission(Verdict(verdict), detail.partition(": ")[2])


__all__ = [
    "LedgerPort",
    "TeamRefusal",
    "admitted_claim",
    "allowed_fallbacks",
    "kept_back",
    "next_plan_refusal",
    "team_of",
    "team_rejection",
    "team_wait_step",
]
