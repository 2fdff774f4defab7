"""Waking a team's waiting runs when room frees (docs/teams.md, "Waiting and priority").

A run over its team's cap or budget WAITS (team-cap, team-budget). When a run of the team settles its reservation
(its job ended, or it waits again), the team's waiting runs that now fit are woken at once instead of at their
retry_at: longest waiting first (the team's priority is the same for all of them), each admitted against the ledger
as plain-read, with the runs woken before it counted. Woken means moved back to SUBMITTING, as the reconciler's retry
at retry_at does (functions/records/attempts.py wait_over), and handed to the dispatcher, whose claim re-admits it
against the ledger in its transaction: that transaction decides, so a wake that loses (two settles waking two runs
for one GPU, a ledger read already stale) only sends the run back to WAITING, keeping when it first waited. A woken
run whose hand-over is lost is SUBMITTING past its lease, which the reconciler's next pass takes over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from deploy.teams import ALL_GPUS, Team, Teams
from functions.errors import LandfallError
from functions.records.attempts import candidates
from functions.records.run_rules import RunsRules, Step, transitioned
from functions.records.team_ledger import Verdict, admit, plan_gpus, reserved
from schemas.run_record import RunRecord, RunState
from schemas.team_ledger import RunCharge, TeamLedger
from schemas.times import format_timestamp, parse_timestamp_or_none
from schemas.vocabulary import TEAM_WAIT_REASONS

log = logging.getLogger("landfall.teams")

WAKE_LOOK = 20
"""At most this many of a team's longest-waiting runs are looked at per wake (a wake admits what fits now: with
caps of a few GPUs, a few runs)."""


def waits_for_team(run: RunRecord) -> bool:
    """The run is WAITING for its team's room (team-cap or team-budget)."""
    return (
        run.state == RunState.WAITING
        and run.submission.waiting is not None
        and run.submission.waiting.reason in TEAM_WAIT_REASONS
    )


def waited_since(run: RunRecord) -> str:
    return run.submission.waiting.since if run.submission.waiting is not None else ""


def _needs(run: RunRecord) -> tuple[dict[str, int], float]:
    """The GPUs and estimate the run's claim would be admitted with (as claim_admitted computes them)."""
    plans = candidates(run)
    plan = plans[0] if plans else run.plan
    return (plan_gpus(plan), plan.estimated_cost_usd) if plan is not None else ({}, 0.0)


def to_wake(team: Team, ledger: TeamLedger | None, waiting: Iterable[RunRecord], now: datetime) -> list[RunRecord]:
    """The team's waiting runs that fit now, in the order they are woken: longest waiting first, each admitted
    against `ledger` with the runs chosen before it reserved. A run that does not fit is passed over, as the claim
    would refuse it, and a smaller one behind it may fit (the same as the reconciler's retries in pass order)."""
    chosen: list[RunRecord] = []
    for run in sorted((r for r in waiting if waits_for_team(r)), key=waited_since):
        gpus, estimate = _needs(run)
        if admit(team, ledger, gpus, estimate, now).verdict != Verdict.FITS:
            continue
        ledger, _ = reserved(ledger, RunCharge(team.name), gpus, estimate, now)
        chosen.append(run)
    return chosen


def writes_ledger(
    step: Callable[[RunRecord | None, TeamLedger | None], tuple[RunRecord | None, TeamLedger | None, object]],
    run: RunRecord | None,
    ledger: TeamLedger | None,
) -> bool:
    """Whether a pair step (a claim admitted against the ledger, a settle) would write the team's ledger given the
    run and the ledger as plain-read: a claim that fits, a settle of a held run. One that would not (a run the ledger
    puts over its team's cap or budget goes WAITING) is written in a transaction over the run alone
    (functions/gcp/team_ledger_store.py); the steps are pure, so looking costs no write."""
    if run is None:
        return True
    _, new_ledger, _ = step(run, ledger)
    return new_ledger is not None


def has_room(team: Team, ledger: TeamLedger | None, now: datetime) -> bool:
    """Whether a one-GPU run of the team (of any kind it caps) would fit now: no wake is worth a query otherwise. A
    team with a cap per kind only has room when any kind has room; the budget is checked by to_wake per run."""
    ledger = ledger or TeamLedger(team=team.name)
    if not team.gpu_cap:
        return True
    kinds = [k for k in team.gpu_cap if k != ALL_GPUS] or ["any"]
    return any(admit(team, ledger, {kind: 1}, 0.0, now).verdict == Verdict.FITS for kind in kinds)


WOKEN = "woken, its team has room"
"""The history detail of a woken run's move to SUBMITTING (after "round N: ")."""


def woken_lately(run: RunRecord, now: datetime, seconds: int) -> bool:
    """A run woken less than `seconds` ago and not yet claimed: its request is on its way to the dispatcher, so
    the reconciler leaves it for that long (a lease's time) before taking it over."""
    last = run.history[-1] if run.history else None
    if run.state != RunState.SUBMITTING or run.submission.owner or last is None or not last.detail.endswith(WOKEN):
        return False
    at = parse_timestamp_or_none(last.at)
    return at is not None and (now - at).total_seconds() < seconds


def woken(*, now: datetime) -> Step[str]:
    """A run still WAITING for its team moved back to SUBMITTING (the next round, no owner, its lease over: the
    dispatcher's claim takes it); "woken", or "not-waiting" when it no longer waits for its team (another wake, a
    reconcile pass or a cancel came first). Its `waiting` stays, so a claim that finds no room keeps `since`."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, str]:
        if cur is None or not waits_for_team(cur):
            return None, "not-waiting"
        stamp = format_timestamp(now)
        nxt = (cur.submission.round or 0) + 1
        new = transitioned(
            cur,
            RunState.SUBMITTING,
            now=now,
            detail=f"round {nxt}: {WOKEN}",
            change=lambda r: replace(r, submission=replace(r.submission, round=nxt, lease_until=stamp, owner="")),
        )
        return new, "woken" if new is not None else "not-waiting"

    return step


@dataclass(frozen=True)
class TeamWaker:
    """Wakes a team's waiting runs that fit (to_wake) and hands each to the dispatcher."""

    teams: Callable[[], Teams]
    """The teams as the teams file says now (read again when it changes: a team added or a cap raised while the
    functions run wakes by its new limits)."""
    ledger_of: Callable[[str], TeamLedger | None]
    """The team's ledger, plain-read (None: none yet)."""
    waiting_of: Callable[[str, int], list[RunRecord]]
    """Up to n of the team's runs WAITING, longest waiting first."""
    runs: RunsRules
    hand_over: Callable[[RunRecord], object]
    """Gives a woken (SUBMITTING) run to the dispatcher: publishes its request on the requests topic (the dispatcher
    claims a SUBMITTING run whose lease is over), or, in tests, submits it at once."""
    now: Callable[[], datetime]

    def wake(self, team_name: str) -> int:
        """Wake what fits of the team's waiting runs; returns how many were woken. Never raises a LandfallError:
        a wake not made is made by the next settle of the team, or by the reconciler's pass."""
        team = self.teams().named(team_name)
        if team is None:
            return 0
        now = self.now()
        try:
            ledger = self.ledger_of(team_name)
            if not has_room(team, ledger, now):
                return 0
            chosen = to_wake(team, ledger, self.waiting_of(team_name, WAKE_LOOK), now)
        except LandfallError as exc:
            log.warning("team %s: waiting runs not woken now (the reconciler's pass will): %s", team_name, exc)
            return 0
        woke = 0
        for run in chosen:
            try:
                if self.runs.apply(run.run_id, woken(now=now)) != "woken":
                    continue
                woke += 1
                self.hand_over(run)
            except LandfallError as exc:
                log.warning("run %s: woken but not handed over now (the reconciler's pass will): %s", run.run_id, exc)
        if woke:
            log.info("team %s: %d waiting run(s) woken", team_name, woke)
        return woke


__all__ = [
    "WAKE_LOOK",
    "WOKEN",
    "TeamWaker",
    "has_room",
    "to_wake",
    "waited_since",
    "waits_for_team",
    "woken",
    "woken_lately",
    "writes_ledger",
]
