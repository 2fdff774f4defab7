"""One reconciler pass (scheduled function `reconcile_runs`, or `landfall reconcile`): page through the runs that
have not ended and bring each in line with what is true.

- SUBMITTED / RUNNING: re-read the job; an ended job is recorded as the listener would (record_job_state).
- RECEIVED or PLANNED a lease's time after its last change, or SUBMITTING past its lease: the delivery that
  recorded it died (a dispatcher failing every delivery after recording the run dead-letters its message, and its
  dataset version, already answered, is not republished), so the dispatcher's exactly-once path takes it over from
  the request kept on the run: planning a RECEIVED run, then claiming it as a delivery would (adopting the labelled
  job when one exists, else submitting).
- WAITING: at retry_at the next round starts (or the run FAILS when it has waited long enough).
- A job QUEUED or PENDING longer than LANDFALL_LONG_WAIT_SECONDS: why it waits is noted on the run (`long_wait`,
  functions/records/long_waits.py), written again only when that changes.
- Ended runs whose RunFinished was not marked published are announced (functions/records/results.py).
- Labelled jobs no run accounts for are recorded as orphans, and cancelled when configured (orphans.py).
- Dataset versions PUBLISHED whose run does not exist after a grace period are published again (republish.py).
With `changes` set (as deployed), a pass reads from Vertex only what changed since the last one: one ListCustomJobs
per region (changes.py says when a job is still read one by one, and how passes are sharded).
Every change is one transaction on one record, claimed before any call it leads to, so two passes at once change
nothing twice.

Each run is reconciled on its own: whatever one run raises (a store or Vertex error, a bug, a document the reader
refuses) is logged with its run id and counted (`error`), the run is marked (`reconcile_errors`: passes in a row,
the last error, when the first and last were; removed once a pass reconciles it again), and the pass goes on to the
other runs and its other looks, which fail alone the same way. A pass succeeds whatever its runs raise.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from functions.errors import LandfallError
from functions.fault_points import fault_point
from functions.gcp.vertex import JobView, VertexJobs
from functions.job_states import JobStateDeps, record_job_state
from functions.reconciler.changes import ChangeDeps, PassLook, start_pass
from functions.reconciler.orphans import OrphanDeps, find_orphans
from functions.reconciler.republish import RepublishDeps, republish_unanswered
from functions.reconciler.team_looks import (
    TeamLooks,
    cancel_over_budget,
    in_pass_order,
    over_budget,
    settle_leftovers,
    team_overruns,
    wake_teams,
    woken_by_team,
)
from functions.records.attempts import AttemptPolicy, gives_up, wait_over
from functions.records.long_waits import WAITING_JOB_STATES, long_wait_noted
from functions.records.run_rules import submission_lease
from functions.records.team_wakes import woken_lately
from functions.records.unreadable_runs import UnreadableRun
from schemas.run_record import RunRecord, RunState
from schemas.times import parse_timestamp, parse_timestamp_or_none

log = logging.getLogger("landfall.reconciler")
T = TypeVar("T")

ENDED_JOB_STATES = frozenset(
    {
        "JOB_STATE_SUCCEEDED",
        "JOB_STATE_FAILED",
        "JOB_STATE_CANCELLED",
        "JOB_STATE_EXPIRED",
        "JOB_STATE_PARTIALLY_SUCCEEDED",
    }
)
OPEN_STATES = (
    RunState.RECEIVED,
    RunState.PLANNED,
    RunState.SUBMITTING,
    RunState.SUBMITTED,
    RunState.RUNNING,
    RunState.WAITING,
)


class ReconcileMarks(Protocol):
    """Where a pass marks the runs it could not reconcile (the runs store)."""

    def mark_reconcile_error(self, run_id: str, error: str, now: datetime) -> None: ...
    def clear_reconcile_errors(self, run_id: str) -> None: ...


@dataclass(frozen=True)
class ReconcilerDeps:
    open_runs: Callable[[], Iterable[RunRecord | UnreadableRun]]
    """Every run in OPEN_STATES, paged through by the store (a document the reader refuses as an UnreadableRun)."""
    vertex: VertexJobs
    listener: JobStateDeps
    resubmit: Callable[[str], str]
    """The dispatcher's exactly-once submission of one run (functions.dispatch.handler.resubmit)."""
    policy: AttemptPolicy
    lease_seconds: int
    now: Callable[[], datetime]
    grace_seconds: int = 0
    """A job that ended less than this long ago is left to the listener (settings.reconcile_grace_seconds)."""
    unannounced: Callable[[], Iterable[RunRecord | UnreadableRun]] = tuple
    """Ended runs whose RunFinished is not marked published (the store's `unannounced`)."""
    announce: Callable[[str], str] | None = None
    """Publishes RunFinished for one run (functions.records.results.announce); None: nothing is announced."""
    long_wait_seconds: int = 900
    """A job QUEUED or PENDING this long gets the reason noted on its run (settings.long_wait_seconds)."""
    orphans: OrphanDeps | None = None
    """Where and how to look for orphan jobs; None: not looked for."""
    republish: RepublishDeps | None = None
    """How to republish unanswered dataset versions; None: not looked for."""
    changes: ChangeDeps | None = None
    """Watermarks and shards (changes.py): a pass lists what changed since the last; None: every open run's job is
    read and every labelled job listed, each pass."""
    teams: TeamLooks | None = None
    """Team priorities and leftover reservations (team_looks.py); None: no teams."""
    marks: ReconcileMarks | None = None
    """Where runs that could not be reconciled are marked (`reconcile_errors`); None: only logged and counted."""


_PASS = threading.Lock()
"""One pass at a time per instance (Google runs one instance, concurrency 1: deploy/topology.toml). Ticks that come
while a pass runs are acknowledged at once: overlapping passes only queue on the same runs' transactions, and on
the Firestore emulator such a queue outlasts its lock timeout and makes every writer of those runs fail."""


def reconcile(deps: ReconcilerDeps) -> str:
    """One pass; returns a count of what happened to runs, e.g. "recorded:SUCCEEDED=2 unchanged=5"."""
    if not _PASS.acquire(blocking=False):
        return "skipped: a pass is running"
    try:
        return _reconcile(deps)
    finally:
        _PASS.release()


def _reconcile(deps: ReconcilerDeps) -> str:
    counts: Counter[str] = Counter()
    regions: dict[str, None] = {}
    look = None if deps.changes is None else start_pass(deps.changes, deps.now())
    listed = _listed("open runs", deps.open_runs, counts)
    runs, unreadable = _readable(listed or [])
    overruns = _team_overruns(runs, deps, counts)
    if look is not None:
        runs = look.shard_runs(runs)
        unreadable = [u for u in unreadable if look.mine(u.run_id)]
    for bad in unreadable:
        _failed(deps, bad.run_id, f"its document cannot be read: {bad.error}", counts)
    to_wake: list[str] = []
    for run in in_pass_order(runs, deps.teams):
        fault_point("reconciler.after_read_runs")
        try:
            outcome, team = _one_run(run, deps, look, regions, overruns.get(run.run_id))
        except Exception as exc:
            if look is not None:
                look.failed(run)
            _failed(deps, run.run_id, exc, counts)
            fault_point("reconciler.after_run")
            continue
        fault_point("reconciler.after_run")
        if team is not None:
            to_wake.append(team)
        if outcome != "unchanged":
            log.info("run %s (%s): %s", run.run_id, run.state, outcome)
        counts[outcome.split(":", 2)[0] if outcome.startswith("resubmitted") else outcome] += 1
        if run.reconcile_errors is not None:
            _reconciled_again(deps, run.run_id, counts)
    if deps.announce is not None:
        _announce_all(deps, deps.announce, counts)
    orphans, republish = deps.orphans, deps.republish
    if orphans is not None:
        jobs_in = None if look is None else (lambda region: look.jobs_for_orphans(region, deps.vertex))
        counts.update(
            _look(
                "orphan",
                lambda: find_orphans(orphans, deps.vertex, now=deps.now(), also_regions=regions, jobs_in=jobs_in),
            )
        )
    if republish is not None:
        counts.update(_look("republish", lambda: republish_unanswered(republish, now=deps.now())))
    teams = deps.teams
    if teams is not None:
        counts.update(_look("team", lambda: settle_leftovers(teams)))
        counts.update(_look("team-wake", lambda: wake_teams(to_wake, teams)))
    if look is not None:
        if listed is None:
            counts["watermark-kept"] += 1  # the open runs were not seen: the next pass lists these changes again
        else:
            counts.update(_finish(look))
    return " ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "no open runs"


def _one_run(
    run: RunRecord, deps: ReconcilerDeps, look: PassLook | None, regions: dict[str, None], overrun: str | None = None
) -> tuple[str, str | None]:
    """The run's outcome this pass, or the team whose wake stands for its retry (team_looks.woken_by_team).
    `overrun`: why its team's month stops it (team_looks.team_overruns), None when it does not."""
    team = woken_by_team(run, deps.teams, lambda r: gives_up(r, deps.now(), deps.policy))
    if team is not None:
        return "team-waiting", team
    if overrun is not None and run.vertex is not None and run.submission.cancel is None:
        return cancel_over_budget(run, overrun, deps.listener.store, deps.vertex, deps.now()), None
    regions.update(
        dict.fromkeys(r for r in (run.vertex.region if run.vertex else "", run.plan.region if run.plan else "") if r)
    )
    return reconcile_run(run, deps, None if look is None else _job_of(look, deps)), None


def _team_overruns(runs: list[RunRecord], deps: ReconcilerDeps, counts: Counter[str]) -> dict[str, str]:
    """The runs their team's month stops this pass (team_looks.team_overruns), from every open run the pass read;
    {} without teams, or when the ledgers could not be read (logged and counted: the next pass looks again)."""
    looks = deps.teams
    if looks is None:
        return {}
    try:
        budgets = looks.budgets()
        names = {r.team.name for r in runs if r.team is not None and r.team.held and r.team.name in budgets}
        return team_overruns(runs, budgets, looks.ledgers(names), deps.now()) if names else {}
    except Exception as exc:
        _log_failure("team budgets not looked at this pass", exc)
        counts["team-budget-error"] += 1
        return {}


def _listed(what: str, listing: Callable[[], Iterable[T]], counts: Counter[str]) -> list[T] | None:
    """The listing read whole; None (logged and counted) when the store failed it."""
    try:
        return list(listing())
    except Exception as exc:
        _log_failure(f"{what} not listed this pass", exc)
        counts[f"{what.replace(' ', '-')}-error"] += 1
        return None


def _readable(listed: Iterable[RunRecord | UnreadableRun]) -> tuple[list[RunRecord], list[UnreadableRun]]:
    runs: list[RunRecord] = []
    unreadable: list[UnreadableRun] = []
    for item in listed:
        if isinstance(item, UnreadableRun):
            unreadable.append(item)
        else:
            runs.append(item)
    return runs, unreadable


def _announce_all(deps: ReconcilerDeps, announce: Callable[[str], str], counts: Counter[str]) -> None:
    runs, unreadable = _readable(_listed("unannounced runs", deps.unannounced, counts) or [])
    for bad in unreadable:
        _failed(deps, bad.run_id, f"its document cannot be read: {bad.error}", counts, what="RunFinished not published")
    for run in runs:
        try:
            said = announce(run.run_id)
        except Exception as exc:
            _log_failure(f"run {run.run_id}: RunFinished not published this pass", exc)
            said = "error"
        counts["announced" if said.startswith("announced") else said] += 1


def _failed(
    deps: ReconcilerDeps,
    run_id: str,
    error: Exception | str,
    counts: Counter[str],
    *,
    what: str = "not reconciled",
) -> None:
    """One run failed this pass: logged with its id, counted, and marked on its record."""
    _log_failure(f"run {run_id}: {what} this pass", error)
    counts["error"] += 1
    if deps.marks is not None:
        marks = deps.marks
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        counts.update(_look("reconcile-errors-mark", lambda: _marked(marks, run_id, text, deps.now())))


def _reconciled_again(deps: ReconcilerDeps, run_id: str, counts: Counter[str]) -> None:
    """A marked run reconciled this pass: its mark is removed."""
    if deps.marks is not None:
        marks = deps.marks
        counts.update(_look("reconcile-errors-clear", lambda: _cleared(marks, run_id)))


def _marked(marks: ReconcileMarks, run_id: str, error: str, now: datetime) -> Counter[str]:
    marks.mark_reconcile_error(run_id, error, now)
    return Counter()


def _cleared(marks: ReconcileMarks, run_id: str) -> Counter[str]:
    marks.clear_reconcile_errors(run_id)
    return Counter()


def _log_failure(what: str, error: Exception | str) -> None:
    """An expected failure (a store or Vertex error, a document the reader refuses) as a warning; anything else with
    its traceback: it is a bug, and the pass goes on without it."""
    if isinstance(error, str | LandfallError):
        log.warning("%s: %s", what, error)
    else:
        log.error("%s: %s: %s", what, type(error).__name__, error, exc_info=error)


def _job_of(look: PassLook, deps: ReconcilerDeps) -> Callable[[RunRecord], JobView | None]:
    """The pass's read of a run's job (changes.py); a job that ended within the grace holds its region's watermark
    so that the next pass lists it again."""

    def job_of(run: RunRecord) -> JobView | None:
        now = deps.now()
        job = look.read_job(run, deps.vertex, now=now, long_wait_seconds=deps.long_wait_seconds)
        if job is not None and job.state in ENDED_JOB_STATES and _ended_within(job, now, deps.grace_seconds):
            look.ended_within_grace(job)
        return job

    return job_of


def _finish(look: PassLook) -> Counter[str]:
    """Store the shard's watermark; counts the regions read in full (vertex-full) and the shard when sharded."""
    counts: Counter[str] = Counter()
    full = sum(1 for r in look.regions.values() if r.full)
    if full:
        counts["vertex-full"] = full
    if look.deps.shards > 1:
        counts[f"shard-{look.watermark.shard}-of-{look.deps.shards}"] = 1
    try:
        look.finish()
    except Exception as exc:
        _log_failure(f"watermark {look.watermark.watermark_id} not stored this pass", exc)
        counts["watermark-error"] += 1
    return counts


def _look(name: str, look: Callable[[], Counter[str]]) -> Counter[str]:
    """One of the pass's looks beyond open runs; whatever fails it is logged and counted, the pass goes on."""
    try:
        return look()
    except Exception as exc:
        _log_failure(f"{name} look not finished this pass", exc)
        return Counter({f"{name}-error": 1})


def reconcile_run(
    run: RunRecord, deps: ReconcilerDeps, job_of: Callable[[RunRecord], JobView | None] | None = None
) -> str:
    """One run brought in line; `job_of` reads its job (default GetCustomJob; None from it: the job did not change
    since the last pass, so nothing is read or done)."""
    now = deps.now()
    if run.state == RunState.WAITING:
        outcome = deps.listener.store.apply(run.run_id, wait_over(now=now, policy=deps.policy))
        return (
            f"resubmitted:{deps.resubmit(run.run_id)}"
            if outcome == "resubmit"
            else ("unchanged" if outcome in ("not-yet", "not-waiting") else outcome)
        )
    if run.state in (RunState.RECEIVED, RunState.PLANNED, RunState.SUBMITTING):
        if _lease_live(run, now) or (run.state != RunState.SUBMITTING and _younger_than_lease(run, now, deps)):
            return "unchanged"
        if woken_lately(run, now, deps.lease_seconds):
            return "unchanged"  # woken for its team's room: its request is on its way to the dispatcher
        return f"resubmitted:{deps.resubmit(run.run_id)}"
    if run.vertex is None:
        return "unchanged"
    over = over_budget(run, now) if run.submission.cancel is None else None
    if over is not None:
        return cancel_over_budget(run, over, deps.listener.store, deps.vertex, now)
    job = deps.vertex.get(run.vertex.job_name) if job_of is None else job_of(run)
    if job is None:
        return "unchanged"
    if run.submission.cancel is not None and job.state not in ENDED_JOB_STATES and job.state != "JOB_STATE_CANCELLING":
        deps.vertex.cancel(job.name)
        return "cancel-requested"
    if job.state in ENDED_JOB_STATES and _ended_within(job, now, deps.grace_seconds):
        return "unchanged"  # the listener's events about it are on their way
    outcome = "unchanged"
    if job.state in ENDED_JOB_STATES or job.state != run.vertex.state:
        outcome = record_job_state(run, job, deps.listener)
    if job.state in WAITING_JOB_STATES:
        noted = deps.listener.store.apply(
            run.run_id, long_wait_noted(job, now=now, threshold_seconds=deps.long_wait_seconds)
        )
        if noted == "noted":
            return "long-wait"
    return outcome


def _ended_within(job: JobView, now: datetime, seconds: int) -> bool:
    end = parse_timestamp_or_none(job.end_time)
    return seconds > 0 and end is not None and (now - end).total_seconds() < seconds


def _lease_live(run: RunRecord, now: datetime) -> bool:
    lease = submission_lease(run.submission)
    return lease is not None and lease.live(now)


def _younger_than_lease(run: RunRecord, now: datetime, deps: ReconcilerDeps) -> bool:
    """A RECEIVED or PLANNED run is its delivery's for one lease's time after it was recorded or planned."""
    return (now - parse_timestamp(run.updated_at, field="updated_at")).total_seconds() < deps.lease_seconds


def job_is_ended(job: JobView) -> bool:
    return job.state in ENDED_JOB_STATES


__all__ = ["OPEN_STATES", "ReconcileMarks", "ReconcilerDeps", "job_is_ended", "reconcile", "reconcile_run"]
