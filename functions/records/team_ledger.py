"""Pure rules of the team ledger (docs/teams.md): a team's use against its limits, whether a run may be submitted now
(fits, waits for room, or can never fit: the hard limit), and what reserving and settling a run do to the team's
ledger (schemas/team_ledger.py). The Firestore adapter (functions/gcp/team_ledger_store.py) applies them in one
transaction with the run's own document; the fakes under a lock.

Counting: a run's GPUs are its plan's accelerator_count x replica_count, of the plan's accelerator type (a CPU-only
plan counts none); its reservation is the plan's estimated cost, in the month (UTC) it was reserved; settling puts
the run's actual cost (elapsed time x the plan's hourly price when Vertex reported no better) in its place.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from deploy.teams import ALL_GPUS, Team, Teams
from schemas.plan import Plan
from schemas.team_ledger import MONTHS_KEPT, MonthSpend, RunCharge, TeamLedger
from schemas.times import format_timestamp
from schemas.vocabulary import TEAM_BUDGET, TEAM_CAP, TEAM_LIMIT


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
        over = (*over, f"budget ${spend.total_usd:.2f}/${team.monthly_budget_usd:.2f}")
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
            f"the run's estimate ${estimate_usd:.2f} is above {name}'s hard limit of ${team.run_limit_usd:.2f} per run "
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
            f"{name} has ${spend.total_usd:.2f} of its ${team.monthly_budget_usd:.2f} monthly budget reserved or "
            f"spent in {month_of(now)} and this run is estimated at ${estimate_usd:.2f}: it waits until runs settle "
            "below their estimates or the month ends, or have the budget raised in the teams file",
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


def settled(
    ledger: TeamLedger | None, charge: RunCharge, actual_usd: float, now: datetime
) -> tuple[TeamLedger, RunCharge]:
    """The ledger with a held charge settled: its reservation replaced by `actual_usd` in the month it was reserved
    in, its GPUs released; the charge no longer held. A charge not held settles nothing (a repeated event)."""
    ledger = ledger or TeamLedger(team=charge.name)
    if not charge.held:
        return ledger, charge
    counted = dict(ledger.gpus)
    for kind, n in charge.gpus.items():
        left = counted.get(kind, 0) - n
        if left > 0:
            counted[kind] = left
        else:
            counted.pop(kind, None)
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
    "admit",
    "month_of",
    "plan_gpus",
    "reserved",
    "settled",
    "use_of",
    "uses_of",
]
