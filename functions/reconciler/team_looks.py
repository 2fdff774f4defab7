"""The reconciler's looks for teams and budgets (docs/teams.md):

- runs WAITING for their team's room (team-cap, team-budget) are retried after every other open run of the pass
  (whose ended jobs free room first), the higher team priority first, then the longest waiting; with a waker, once
  per team: what fits the team's ledger is woken (functions/records/team_wakes.py), the rest left waiting;
- reservations still held by runs that ended or wait (a settle that failed after the run's own write) are settled;
- a run whose cost while running (time since its job started x its plan's hourly price) passes its own
  `constraints.budget_usd` is cancelled, with that reason (error code budget-exceeded). The reconciler, not the
  listener: a running job sends no event while its cost grows, and every pass reads every open run's record anyway
  (no Vertex call is needed: the record has the start time and the price). Exactly once: the cancel request is
  recorded in a transaction that keeps the first one, and only then is Vertex asked;
- a run whose job has cost more than its team reserved for it, when the team's month (settled, reserved, and what
  its running jobs cost past their reservations) reaches its monthly budget, is cancelled the same way (its trainer
  checkpoints on the cancel's SIGTERM): a run is admitted on its estimate, but runs as long as its code likes, so the
  month is held by the pass, and ends above the budget by at most one pass's interval of the team's running jobs'
  price (`team_overruns`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime

from functions.gcp.vertex import VertexJobs
from functions.reconciler.cancel import cancel_step
from functions.records.run_rules import RunsRules
from functions.records.team_ledger import month_of, running_cost
from functions.records.team_wakes import waits_for_team
from schemas.money import usd_text
from schemas.record_bounds import CANCEL_BY_KEPT, cut_within
from schemas.run_record import RunRecord, RunState
from schemas.team_ledger import TeamLedger
from schemas.vocabulary import BUDGET_EXCEEDED

log = logging.getLogger("landfall.reconciler")


@dataclass(frozen=True)
class TeamLooks:
    priority: Callable[[str], int]
    """A team's priority by name (0 for a team the file no longer has)."""
    held_to_settle: Callable[[], Iterable[RunRecord]]
    settle: Callable[[RunRecord], bool]
    wake: Callable[[str], int] | None = None
    """Wakes what fits of a team's waiting runs (functions/records/team_wakes.py TeamWaker.wake), returning how many;
    None: each team wait is retried at its retry_at, one claim at a time."""
    known: Callable[[str], bool] = lambda name: True
    """Whether the teams file has the team (a wait of a team no longer there is retried the old way)."""
    budgets: Callable[[], Mapping[str, float]] = dict
    """Each team's monthly budget by name ({}: no team's month is held while its runs run)."""
    ledgers: Callable[[Iterable[str]], Mapping[str, TeamLedger]] = lambda names: {}
    """The named teams' stored ledgers (a team with none yet left out)."""


def woken_by_team(run: RunRecord, looks: TeamLooks | None, gives_up: Callable[[RunRecord], bool]) -> str | None:
    """The team whose wake stands for this run's retry in the pass (None: the run is reconciled one by one): a run
    waiting for a known team's room is not retried alone at its retry_at; once per pass per team, after every other
    run, the team's waiting runs that fit the ledger are woken (`wake_teams`). A pass thus claims no more runs than
    the teams have room for, and never outlives its tick retrying waits that cannot fit. A run that has waited past
    the give-up time is still ended one by one."""
    if looks is None or looks.wake is None or not waits_for_team(run) or run.team is None:
        return None
    if not looks.known(run.team.name) or gives_up(run):
        return None
    return run.team.name


def wake_teams(teams: Iterable[str], looks: TeamLooks) -> Counter[str]:
    """Wake each team's waiting runs that fit, the higher priority first; counts team-woken."""
    counts: Counter[str] = Counter()
    if looks.wake is None:
        return counts
    for name in sorted(dict.fromkeys(teams), key=lambda n: -looks.priority(n)):
        try:
            woke = looks.wake(name)
        except Exception as exc:  # one team's failed wake leaves the others'
            log.warning("team %s: waiting runs not woken this pass: %s: %s", name, type(exc).__name__, exc)
            counts["team-wake-error"] += 1
            continue
        if woke:
            counts["team-woken"] += woke
    return counts


def in_pass_order(runs: Iterable[RunRecord], looks: TeamLooks | None) -> Iterator[RunRecord]:
    """The pass's runs, those waiting for their team last, by priority (higher first) then time waited."""
    if looks is None:
        yield from runs
        return
    later: list[RunRecord] = []
    for run in runs:
        if waits_for_team(run):
            later.append(run)
        else:
            yield run
    later.sort(
        key=lambda r: (
            -looks.priority(r.team.name if r.team else ""),
            r.submission.waiting.since if r.submission.waiting else "",
        )
    )
    yield from later


def settle_leftovers(looks: TeamLooks) -> Counter[str]:
    counts: Counter[str] = Counter()
    for run in looks.held_to_settle():
        try:
            counts["team-settled" if looks.settle(run) else "unchanged"] += 1
        except Exception as exc:  # one run's failed settle leaves the others'
            log.warning("run %s: reservation not settled this pass: %s: %s", run.run_id, type(exc).__name__, exc)
            counts["team-settle-error"] += 1
    return counts


def over_budget(run: RunRecord, now: datetime) -> str | None:
    """Why the run is over its own budget while running (cost so far above constraints.budget_usd), or None."""
    budget = float(run.request.get("constraints", {}).get("budget_usd") or 0.0)
    if budget <= 0 or run.state not in (RunState.SUBMITTED, RunState.RUNNING) or run.vertex is None:
        return None
    cost = running_cost(run, now)
    if cost <= budget:
        return None
    return (
        f"{BUDGET_EXCEEDED}: its cost while running ({usd_text(cost)}: time since its job started x the plan's "
        f"{usd_text(run.plan.hourly_cost_usd if run.plan else 0)}/h) passed its constraints.budget_usd "
        f"{usd_text(budget)}"
    )


def team_overruns(
    runs: Iterable[RunRecord], budgets: Mapping[str, float], ledgers: Mapping[str, TeamLedger], now: datetime
) -> dict[str, str]:
    """The runs to cancel because their team's month has reached its budget, by run id, each with why.

    A team's month as it stands now: what it settled, what its runs in flight reserved, and what its running jobs
    have cost beyond their reservations (time since the job started x the plan's hourly price, as `running_cost`).
    When that reaches the monthly budget, each running job past its reservation is cancelled: it is what took the
    month over (the others are within what they were admitted with). `runs`: every open run the pass read (all
    shards: each pass works out the same and cancels the runs of its own shard)."""
    held: dict[tuple[str, str], list[RunRecord]] = {}
    for run in runs:
        charge = run.team
        if charge is None or not charge.held or charge.name not in budgets:
            continue
        if run.state in (RunState.SUBMITTED, RunState.RUNNING) and run.vertex is not None:
            # each run counts in the month its hold was reserved in (and settles there), whichever month it is now
            held.setdefault((charge.name, charge.month or month_of(now)), []).append(run)
    out: dict[str, str] = {}
    for (name, month), running in held.items():
        past = {  # beyond its reservation and what it settled already (its earlier jobs, when it waited)
            r.run_id: running_cost(r, now) - (r.team.reserved_usd + r.team.settled_usd if r.team else 0.0)
            for r in running
        }
        over = sum(max(p, 0.0) for p in past.values())
        spend = (ledgers.get(name) or TeamLedger(team=name)).month(month)
        budget = budgets[name]
        if over <= 0 or spend.total_usd + over < budget:
            continue
        for run in running:
            if past[run.run_id] > 0 and run.submission.cancel is None:
                out[run.run_id] = cut_within(
                    f"{BUDGET_EXCEEDED}: team {name!r} reached its monthly budget {usd_text(budget)} for {month}; "
                    f"this job ran {usd_text(past[run.run_id])} past its estimate (retry with budget left, or raise "
                    "the team's monthly_budget_usd)",
                    CANCEL_BY_KEPT,
                )
    return out


def cancel_over_budget(run: RunRecord, why: str, store: RunsRules, vertex: VertexJobs, now: datetime) -> str:
    """Record the cancel (first request wins) and ask Vertex to cancel the job; the listener records CANCELLED."""
    outcome, after = store.apply(run.run_id, cancel_step(why, now))
    if outcome != "job" or after is None or after.vertex is None or after.submission.cancel is None:
        return "unchanged"
    if not after.submission.cancel.by.startswith(BUDGET_EXCEEDED):
        return "unchanged"  # someone else's cancel came first: it stands
    vertex.cancel(after.vertex.job_name)
    return "budget-cancelled"


__all__ = [
    "TeamLooks",
    "cancel_over_budget",
    "in_pass_order",
    "over_budget",
    "settle_leftovers",
    "team_overruns",
    "waits_for_team",
    "wake_teams",
    "woken_by_team",
]
