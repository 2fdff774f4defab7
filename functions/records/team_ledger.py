"""Pure rules of the team ledger (docs/teams.md): a team's use against its limits, whether a run may be submitted now
(fits, waits for room, or can never fit: the hard limit), and what reserving and settling a run do to the team's
ledger (schemas/team_ledger.py). The Firestore adapter (functions/gcp/team_ledger_store.py) applies them in one
transaction with the run's own document; the fakes under a lock.

Counting: a run's GPUs are its plan's accelerator_count x replica_count, of the plan's accelerator type (a CPU-only
plan counts none); its reservation is the plan's estimated cost, in the month (UTC) it was reserved; settling puts
the run's actual cost (elapsed time x the plan's hourly price when Vertex reported no better) in its place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar

from deploy.teams import ALL_GPUS, Team, Teams
from functions.records.attempts import candidates
from functions.records.leases import Claim, ClaimOutcome
from functions.records.run_rules import Step, transitioned
from schemas.money import usd_text
from schemas.plan import Plan
from schemas.record_bounds import REASON_KEPT, cut
from schemas.run_record import AttemptKind, RunError, RunRecord, RunState, Waiting
from schemas.team_ledger import MONTHS_KEPT, MonthSpend, RunCharge, TeamLedger
from schemas.times import format_timestamp, parse_timestamp_or_none
from schemas.vocabulary import TEAM_BUDGET, TEAM_CAP, TEAM_LIMIT, TEAM_WAIT_REASONS

T = TypeVar("T")


def month_of(now: datetime) -> str:
    """The calendar month (UTC) a reservation made at `now` counts in: "YYYY-MM"."""
    return f"{now.year:04d}-{now.month:02d}"


def plan_gpus(plan: Plan) -> dict[str, int]:
    """The GPUs a plan holds while in flight, per Vertex accelerator type ({} for a CPU-only plan)."""
    if not plan.accelerator_type or plan.accelerator_count <= 0:
        return {}
    return {plan.accelerator_type: plan.accelerator_count * max(plan.replica_count, 1)}


def _money(value: float) -> float:
    """Dollars as stored: to a millionth, never below 0 (sums of floats drift)."""
    return max(round(value, 6), 0.0)


@dataclass(frozen=True)
class TeamUse:
    """One team's use against its limits (what `landfall teams` and the dashboard show)."""

    team: str
    priority: int
    month: str
    gpus: dict[str, int]
    """GPUs in flight per kind."""
    gpu_cap: dict[str, int]
    """The team's caps: ALL_GPUS and/or per kind ({} = none)."""
    reserved_usd: float
    """Estimates of the month's runs in flight."""
    settled_usd: float
    """Actual costs of the month's settled runs."""
    budget_usd: float
    run_limit_usd: float
    """The hard limit of one run's estimate."""
    runs: int = 0
    """Runs reserved this month."""
    requests_topic: str = ""
    owns: tuple[str, ...] = ()
    updated_at: str = ""
    over: tuple[str, ...] = field(default=())
    """Limits reached now ("gpus all 16/16", "budget"): a new run there waits."""

    @property
    def gpus_total(self) -> int:
        return sum(self.gpus.values())

    @property
    def spent_usd(self) -> float:
        return _money(self.reserved_usd + self.settled_usd)

    def to_dict(self) -> dict[str, Any]:
        return {
            "team": self.team,
            "priority": self.priority,
            "month": self.month,
            "gpus": dict(self.gpus),
            "gpus_total": self.gpus_total,
            "gpu_cap": dict(self.gpu_cap),
            "reserved_usd": self.reserved_usd,
            "settled_usd": self.settled_usd,
            "spent_usd": self.spent_usd,
            "budget_usd": self.budget_usd,
            "run_limit_usd": self.run_limit_usd,
            "runs": self.runs,
            "requests_topic": self.requests_topic,
            "owns": list(self.owns),
            "updated_at": self.updated_at,
            "over": list(self.over),
        }


def _in_flight(gpus: dict[str, int], kind: str) -> int:
    return sum(gpus.values()) if kind == ALL_GPUS else gpus.get(kind, 0)


def use_of(team: Team, ledger: TeamLedger | None, now: datetime) -> TeamUse:
    """The team's use against its limits this month, from its ledger (None: nothing recorded yet)."""
    ledger = ledger or TeamLedger(team=team.name)
    month = month_of(now)
    spend = ledger.month(month)
    over = tuple(
        f"gpus {kind} {_in_flight(ledger.gpus, kind)}/{cap}"
        for kind, cap in team.gpu_cap.items()
        if _in_flight(ledger.gpus, kind) >= cap
    )
    if spend.total_usd >= team.monthly_budget_usd:
        over = (*over, f"budget {usd_text(spend.total_usd)}/{usd_text(team.monthly_budget_usd)}")
    return TeamUse(
        team=team.name,
        priority=team.priority,
        month=month,
        gpus={k: v for k, v in ledger.gpus.items() if v},
        gpu_cap=dict(team.gpu_cap),
        reserved_usd=spend.reserved_usd,
        settled_usd=spend.settled_usd,
        budget_usd=team.monthly_budget_usd,
        run_limit_usd=team.run_limit_usd,
        runs=spend.runs,
        requests_topic=team.requests_topic,
        owns=tuple(str(o) for o in team.owns),
        updated_at=ledger.updated_at,
        over=over,
    )


def uses_of(teams: Teams, ledgers: dict[str, TeamLedger], now: datetime) -> list[TeamUse]:
    """Every team's use, in the file's order (ledgers by team name; a team without one has used nothing)."""
    return [use_of(team, ledgers.get(team.name), now) for team in teams.teams]


class Verdict(StrEnum):
    FITS = "fits"
    """Room and budget for the run now: reserve it."""
    WAIT_CAP = TEAM_CAP
    WAIT_BUDGET = TEAM_BUDGET
    REJECT = TEAM_LIMIT
    """The run alone passes a hard limit: it can never run under this team's limits."""


@dataclass(frozen=True)
class Admission:
    verdict: Verdict
    message: str = ""
    """Why it waits or is refused, and what to do."""


def _gpus_text(gpus: dict[str, int]) -> str:
    return " + ".join(f"{n} x {kind}" for kind, n in gpus.items()) or "no GPU"


def admit(team: Team, ledger: TeamLedger | None, gpus: dict[str, int], estimate_usd: float, now: datetime) -> Admission:
    """Whether a run needing `gpus` and estimated at `estimate_usd` may be submitted now under the team's limits.

    Hard limits first (the run alone, whatever else is in flight: REJECT), then the caps against what is in flight
    (WAIT_CAP), then the month's budget against what is reserved and settled (WAIT_BUDGET)."""
    name = f"team {team.name!r}"
    for kind, cap in team.gpu_cap.items():
        own = _in_flight(gpus, kind)
        if own > cap:
            return Admission(
                Verdict.REJECT,
                f"the run needs {_gpus_text(gpus)}, above {name}'s cap of {cap} GPUs ({kind}) even with nothing else "
                "in flight: ask for fewer GPUs (constraints.max_gpus, constraints.gpu_allowlist) or have the cap "
                "raised in the teams file (LANDFALL_TEAMS_FILE, deploy/teams.toml)",
            )
    if estimate_usd > team.run_limit_usd:
        limit = "max_run_usd" if team.max_run_usd is not None else "monthly budget"
        return Admission(
            Verdict.REJECT,
            f"the run's estimate {usd_text(estimate_usd)} is above {name}'s hard limit of "
            f"{usd_text(team.run_limit_usd)} per run "
            f"({limit}): lower constraints.budget_usd or the work asked for, or have the limit raised in the teams "
            "file",
        )
    ledger = ledger or TeamLedger(team=team.name)
    for kind, cap in team.gpu_cap.items():
        in_flight, own = _in_flight(ledger.gpus, kind), _in_flight(gpus, kind)
        if own and in_flight + own > cap:
            return Admission(
                Verdict.WAIT_CAP,
                f"{name} has {in_flight} of its {cap} GPUs ({kind}) in flight and this run needs {own}: it waits "
                "until the team's runs free them",
            )
    spend = ledger.month(month_of(now))
    if spend.total_usd + estimate_usd > team.monthly_budget_usd:
        return Admission(
            Verdict.WAIT_BUDGET,
            f"{name} has {usd_text(spend.total_usd)} of its {usd_text(team.monthly_budget_usd)} monthly budget "
            f"reserved or spent in {month_of(now)} and this run is estimated at {usd_text(estimate_usd)}: it waits "
            "until runs settle below their estimates or the month ends, or have the budget raised in the teams file",
        )
    return Admission(Verdict.FITS)


def _trimmed(months: dict[str, MonthSpend]) -> dict[str, MonthSpend]:
    return {m: months[m] for m in sorted(months)[-MONTHS_KEPT:]}


def reserved(
    ledger: TeamLedger | None, charge: RunCharge, gpus: dict[str, int], estimate_usd: float, now: datetime
) -> tuple[TeamLedger, RunCharge]:
    """The ledger with the run's estimate reserved and its GPUs in flight, and the run's charge now held."""
    ledger = ledger or TeamLedger(team=charge.name)
    month = month_of(now)
    spend = ledger.month(month)
    counted = dict(ledger.gpus)
    for kind, n in gpus.items():
        counted[kind] = counted.get(kind, 0) + n
    months = dict(ledger.months)
    months[month] = replace(spend, reserved_usd=_money(spend.reserved_usd + estimate_usd), runs=spend.runs + 1)
    held = replace(charge, held=True, month=month, gpus=dict(gpus), reserved_usd=_money(estimate_usd))
    return (
        replace(ledger, gpus=counted, months=_trimmed(months), updated_at=format_timestamp(now)),
        held,
    )


def _less(counted: dict[str, int], gpus: dict[str, int]) -> dict[str, int]:
    """GPUs in flight per kind with `gpus` no longer counted (a kind at 0 left out)."""
    out = dict(counted)
    for kind, n in gpus.items():
        left = out.get(kind, 0) - n
        if left > 0:
            out[kind] = left
        else:
            out.pop(kind, None)
    return out


def released(ledger: TeamLedger | None, charge: RunCharge) -> TeamLedger:
    """The ledger without a held charge: its GPUs no longer in flight, its reservation and its run taken out of the
    month it was reserved in (nothing settled: the run goes on, held again on another plan by `reserved`)."""
    ledger = ledger or TeamLedger(team=charge.name)
    if not charge.held:
        return ledger
    counted = _less(ledger.gpus, charge.gpus)
    months = dict(ledger.months)
    spend = months.get(charge.month, MonthSpend())
    months[charge.month] = replace(
        spend, reserved_usd=_money(spend.reserved_usd - charge.reserved_usd), runs=max(spend.runs - 1, 0)
    )
    return replace(ledger, gpus=counted, months=months)


def settled(
    ledger: TeamLedger | None, charge: RunCharge, actual_usd: float, now: datetime
) -> tuple[TeamLedger, RunCharge]:
    """The ledger with a held charge settled: its reservation replaced by `actual_usd` in the month it was reserved
    in, its GPUs released; the charge no longer held. A charge not held settles nothing (a repeated event)."""
    ledger = ledger or TeamLedger(team=charge.name)
    if not charge.held:
        return ledger, charge
    counted = _less(ledger.gpus, charge.gpus)
    months = dict(ledger.months)
    spend = months.get(charge.month, MonthSpend())
    months[charge.month] = replace(
        spend,
        reserved_usd=_money(spend.reserved_usd - charge.reserved_usd),
        settled_usd=_money(spend.settled_usd + actual_usd),
    )
    done = replace(charge, held=False, gpus={}, settled_usd=_money(charge.settled_usd + actual_usd))
    return (
        replace(ledger, gpus=counted, months=_trimmed(months), updated_at=format_timestamp(now)),
        done,
    )


__all__ = [
    "Admission",
    "TeamUse",
    "Verdict",
    "actual_cost",
    "admit",
    "claim_admitted",
    "holds_for",
    "month_of",
    "plan_gpus",
    "readmitted",
    "released",
    "reserved",
    "running_cost",
    "settle_step",
    "settled",
    "settles",
    "team_waited",
    "use_of",
    "uses_of",
]


# Steps over a run and its team's ledger, applied in one transaction (functions/gcp/team_ledger_store.py) ----------


PairResult = tuple[RunRecord | None, TeamLedger | None, T]


def claim_admitted(
    team: Team, claim: Step[Claim[RunRecord]], *, now: datetime, wait_seconds: int
) -> Callable[[RunRecord | None, TeamLedger | None], PairResult[tuple[Claim[RunRecord], Admission | None]]]:
    """The submission claim with the team's ledger: a fresh claim (or a takeover) of a run holding no reservation
    is admitted against the team's limits first. Fits: the claim is written with the run's estimate reserved and its
    GPUs in flight, and the ledger with them. Over a cap or the budget: the run WAITS instead (reason team-cap or
    team-budget, retried by the reconciler after `wait_seconds`, or sooner when the team has room; no claim is held).
    Over a hard limit (the teams file changed since the run was planned): the run FAILS with the reason. The claim's
    outcome is then DONE; the admission says why."""

    def step(run: RunRecord | None, ledger: TeamLedger | None) -> PairResult[tuple[Claim[RunRecord], Admission | None]]:
        new, result = claim(run)
        taken = result.outcome in (ClaimOutcome.CLAIMED, ClaimOutcome.RECOVER)
        if new is None or not taken or new.team is None or new.team.held:
            return new, None, (result, None)
        plans = candidates(new)
        plan = plans[0] if plans else new.plan
        gpus = plan_gpus(plan) if plan is not None else {}
        estimate = plan.estimated_cost_usd if plan is not None else 0.0
        admission = admit(team, ledger, gpus, estimate, now)
        if admission.verdict == Verdict.FITS:
            after, held = reserved(ledger, new.team, gpus, estimate, now)
            claimed_run = replace(new, team=held)
            return claimed_run, after, (Claim(result.outcome, claimed_run), admission)
        if admission.verdict == Verdict.REJECT:
            error = RunError(TEAM_LIMIT, cut(admission.message))
            ended = transitioned(
                _unclaimed(new, now), RunState.FAILED, now=now, detail=cut(admission.message), change=_with(error)
            )
            return ended, None, (Claim(ClaimOutcome.DONE, ended or new), admission)
        waiting = team_waited(new, admission, now=now, wait_seconds=wait_seconds)
        return waiting, None, (Claim(ClaimOutcome.DONE, waiting or new), admission)

    return step


def holds_for(charge: RunCharge, plan: Plan) -> bool:
    """Whether the run's held charge stands for the plan as it is: the same GPUs in flight (a plan needing fewer
    gives the rest back to the team), an estimate within its reservation."""
    return charge.held and plan_gpus(plan) == charge.gpus and plan.estimated_cost_usd <= charge.reserved_usd


def readmitted(
    team: Team, plan: Plan, *, owner: str, now: datetime
) -> Callable[[RunRecord | None, TeamLedger | None], PairResult[tuple[Admission, RunCharge] | None]]:
    """A plan the claimed run is about to be submitted on (a fallback after a capacity refusal, a canary's re-plan,
    the next plan of a resubmission), admitted against the team's limits before its job is created: the run's own
    hold is set aside, the plan's GPUs and estimate are admitted against the rest of the ledger, and where they fit
    the hold moves to them (the ledger and the run written together). A plan the hold already covers fits as it
    is. Where it does not fit, nothing is written and the admission says why (the plan is then not tried: the caps
    and the budget hold for every job a run makes, not only its first). The result: the admission and the run's
    charge after it; None when the run's claim is no longer this delivery's (`owner`)."""
    gpus, estimate = plan_gpus(plan), plan.estimated_cost_usd

    def step(run: RunRecord | None, ledger: TeamLedger | None) -> PairResult[tuple[Admission, RunCharge] | None]:
        if run is None or run.team is None or run.submission.owner != owner:
            return None, None, None
        charge = run.team
        if holds_for(charge, plan):
            return None, None, (Admission(Verdict.FITS), charge)
        admission = admit(team, released(ledger, charge), gpus, estimate, now)
        if admission.verdict != Verdict.FITS:
            return None, None, (admission, charge)
        after, held = reserved(released(ledger, charge), replace(charge, held=False), gpus, estimate, now)
        return replace(run, team=held), after, (admission, held)

    return step


def _with(error: RunError) -> Callable[[RunRecord], RunRecord]:
    return lambda r: replace(r, error=error)


def _unclaimed(run: RunRecord, now: datetime) -> RunRecord:
    """The run without the claim's pending attempt and lease: nothing was tried."""
    attempts = tuple(a for a in run.submission.attempts or () if a.result.kind != AttemptKind.PENDING)
    return replace(
        run,
        submission=replace(run.submission, attempts=attempts or None, owner="", lease_until=format_timestamp(now)),
    )


def team_waited(run: RunRecord, admission: Admission, *, now: datetime, wait_seconds: int) -> RunRecord | None:
    """The run WAITING for its team's room (reason team-cap or team-budget): retried at retry_at by the reconciler
    (the same WAITING machinery as capacity waits, and the same give-up time), or sooner when its team has room."""
    prior = run.submission.waiting
    # A run woken (functions/records/team_wakes.py) that finds no room after all waits on: it keeps when it first
    # waited, so the longest waiting stays first.
    going_on = prior is not None and (
        run.state == RunState.WAITING or (prior.reason in TEAM_WAIT_REASONS and run.vertex is None)
    )
    since = prior.since if prior is not None and going_on else format_timestamp(now)
    wait = Waiting(
        reason=str(admission.verdict),
        retry_at=format_timestamp(now + timedelta(seconds=wait_seconds)),
        since=since,
        tries=(prior.tries + 1) if prior is not None and going_on else 1,
        note=cut(admission.message, REASON_KEPT),
    )
    return transitioned(
        _unclaimed(run, now),
        RunState.WAITING,
        now=now,
        detail=f"waiting for its team ({admission.verdict}) until {wait.retry_at}: {cut(admission.message)}",
        change=lambda r: replace(r, submission=replace(r.submission, waiting=wait)),
    )


def settles(run: RunRecord) -> bool:
    """Whether the run's reservation is to be settled now: it holds one, and it ended or waits (no job in flight)."""
    return run.team is not None and run.team.held and (run.state.terminal or run.state == RunState.WAITING)


def actual_cost(run: RunRecord, now: datetime) -> float:
    """What the run's held reservation turned into: its recorded actual cost, else its running time (started to
    ended, or to now) x its plan's hourly price; 0 for a run that never started a job."""
    if run.cost.actual_usd is not None:
        return run.cost.actual_usd
    return running_cost(run, now)


def running_cost(run: RunRecord, now: datetime) -> float:
    """The run's cost so far: what its earlier jobs cost (cost.earlier_usd: its canary, a job ended for capacity),
    plus the time since its job started (until it ended) x its plan's hourly price."""
    earlier = run.cost.earlier_usd or 0.0
    started = parse_timestamp_or_none(run.timings.started_at or "")
    if started is None or run.plan is None:
        return earlier
    ended = parse_timestamp_or_none(run.timings.ended_at or "") or now
    return earlier + max((ended - started).total_seconds(), 0.0) / 3600 * run.plan.hourly_cost_usd


def settle_step(*, now: datetime) -> Callable[[RunRecord | None, TeamLedger | None], PairResult[bool]]:
    """Settle the run's reservation if it is still held and the run ended or waits: exactly once, whichever of the
    listener, the reconciler or the dispatcher gets there first (the held flag is read in the same transaction)."""

    def step(run: RunRecord | None, ledger: TeamLedger | None) -> PairResult[bool]:
        if run is None or run.team is None or not settles(run):
            return None, None, False
        # what a run that waited settled then (its earlier jobs) is not settled again when it ends
        owed = max(actual_cost(run, now) - run.team.settled_usd, 0.0)
        after, done = settled(ledger, run.team, owed, now)
        return replace(run, team=done), after, True

    return step
