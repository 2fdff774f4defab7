"""Waking a team's waiting runs when room frees (functions/records/team_wakes.py, docs/teams.md "Waiting and
priority"), against the fakes: which runs a wake picks, that a run's end wakes the team's longest-waiting run without a
reconcile pass, that a woken run finding no room waits on with its first wait kept, and that the reconciler wakes team
waits once per team instead of retrying each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

from deploy.teams import Teams
from functions.dispatch.handler import resubmit
from functions.dispatch.team_rules import admitted_claim
from functions.reconciler.handler import reconcile, reconcile_run
from functions.reconciler.team_looks import TeamLooks
from functions.records.run_rules import claim_submission
from functions.records.team_ledger import Admission, Verdict, settle_step, team_waited
from functions.records.team_wakes import TeamWaker, has_room, to_wake, woken, woken_lately, writes_ledger
from schemas.run_record import RunRecord, RunState
from schemas.team_ledger import TeamLedger
from schemas.times import format_timestamp
from tests.fakes.teams import FakeLedger
from tests.fakes.world import World
from tests.unit.test_team_dispatch import _teams, gpu_plan, request, run_id, world

ONE_GPU = gpu_plan(1)
"""Cap 3 T4s: three runs in flight, the rest wait team-cap."""


def _burst(n: int) -> tuple[World, FakeLedger]:
    """n runs of team churn delivered a second apart: 3 submitted, the rest WAITING team-cap (oldest first)."""
    w, ledger = world(plan=ONE_GPU)
    for i in range(1, n + 1):
        said = w.deliver(request(i), message_id=f"m-{i}")
        assert said == ("submitted" if i <= 3 else "waiting:team-cap"), (i, said)
        w.clock.now += timedelta(seconds=1)
    return w, ledger


def _waker(w: World, ledger: FakeLedger, teams: Teams) -> TeamWaker:
    return TeamWaker(
        teams=lambda: teams,
        ledger_of=ledger.ledger,
        waiting_of=ledger.waiting_of,
        runs=w.runs,
        hand_over=lambda run: resubmit(run.run_id, w.dispatch_deps),
        now=w.clock,
    )


def _end_job(w: World, n: int) -> str:
    name = w.job_name(run_id(n))
    w.vertex.set_state(name, "JOB_STATE_SUCCEEDED", start=w.clock.now, end=w.clock.now + timedelta(seconds=10))
    w.clock.now += timedelta(seconds=20)
    return w.job_event(name.rsplit("/", 1)[-1])


def test_a_wake_picks_the_longest_waiting_runs_that_fit_the_ledger() -> None:
    w, ledger = _burst(6)
    team = _teams().named("churn")
    assert team is not None
    waiting = [w.run(run_id(i)) for i in (6, 4, 5)]  # any order: the wake sorts by when each first waited
    full = ledger.ledger("churn")
    assert full is not None and full.gpus == {"NVIDIA_TESLA_T4": 3}
    assert to_wake(team, full, waiting, w.clock.now) == []
    assert not has_room(team, full, w.clock.now)
    one_free = replace(full, gpus={"NVIDIA_TESLA_T4": 2})
    assert [r.run_id for r in to_wake(team, one_free, waiting, w.clock.now)] == [run_id(4)]
    assert has_room(team, one_free, w.clock.now)
    assert [r.run_id for r in to_wake(team, TeamLedger(team="churn"), waiting, w.clock.now)] == [
        run_id(4),
        run_id(5),
        run_id(6),
    ]
    # A run no longer waiting for its team (claimed meanwhile) is never picked.
    submitted = w.run(run_id(1))
    assert to_wake(team, TeamLedger(team="churn"), [submitted], w.clock.now) == []


def test_a_run_ending_wakes_its_teams_longest_waiting_run_without_a_reconcile_pass() -> None:
    w, ledger = _burst(5)
    ledger.waker = _waker(w, ledger, _teams()).wake
    assert _end_job(w, 1) == "recorded:SUCCEEDED"
    # Run 1's GPU freed: run 4 (waiting longest) is submitted at once, run 5 still waits; the cap holds.
    fourth, fifth = w.run(run_id(4)), w.run(run_id(5))
    assert fourth.state == RunState.SUBMITTED and fourth.team is not None and fourth.team.held
    assert fifth.state == RunState.WAITING
    assert ledger.ledger("churn").gpus == {"NVIDIA_TESLA_T4": 3}  # type: ignore[union-attr]
    assert len(w.vertex.jobs) == 4
    assert _end_job(w, 2) == "recorded:SUCCEEDED"
    assert w.run(run_id(5)).state == RunState.SUBMITTED


def test_a_wake_reads_the_teams_as_the_file_says_at_the_wake() -> None:
    """The waker asks for the teams at each wake (the file is read again when it changes), not once per instance."""
    w, ledger = _burst(5)
    now: list[Teams] = [Teams(())]
    waker = TeamWaker(
        teams=lambda: now[0],
        ledger_of=ledger.ledger,
        waiting_of=ledger.waiting_of,
        runs=w.runs,
        hand_over=lambda run: resubmit(run.run_id, w.dispatch_deps),
        now=w.clock,
    )
    ledger.waker = waker.wake
    assert _end_job(w, 1) == "recorded:SUCCEEDED"
    assert w.run(run_id(4)).state == RunState.WAITING, "no team named churn in the file then: nobody woken"
    now[0] = _teams()  # the teams file edited while the functions run
    assert waker.wake("churn") == 1 and w.run(run_id(4)).state == RunState.SUBMITTED


def test_without_room_a_wake_changes_nothing() -> None:
    w, ledger = _burst(5)
    before = {i: w.run(run_id(i)) for i in (4, 5)}
    assert _waker(w, ledger, _teams()).wake("churn") == 0
    assert {i: w.run(run_id(i)) for i in (4, 5)} == before


def test_a_woken_run_that_finds_no_room_waits_on_keeping_when_it_first_waited() -> None:
    w, _ = _burst(4)
    first = w.run(run_id(4))
    assert first.submission.waiting is not None
    assert w.runs.apply(run_id(4), woken(now=w.clock.now)) == "woken"
    assert w.runs.apply(run_id(4), woken(now=w.clock.now)) == "not-waiting"  # a second wake loses
    # Its delivery's claim re-admits it against the ledger: still full, so it waits again.
    assert resubmit(run_id(4), w.dispatch_deps) == "waiting:team-cap"
    again = w.run(run_id(4))
    assert again.state == RunState.WAITING and again.submission.waiting is not None
    assert again.submission.waiting.since == first.submission.waiting.since
    assert again.submission.waiting.tries == first.submission.waiting.tries + 1


def test_a_team_wait_after_a_job_ran_starts_its_own_clock() -> None:
    w, _ = _burst(4)
    run = replace(w.run(run_id(4)), state=RunState.SUBMITTING)
    prior = run.submission.waiting
    assert prior is not None
    w.clock.now += timedelta(minutes=5)
    full = Admission(Verdict.WAIT_CAP, "full")
    kept = team_waited(run, full, now=w.clock.now, wait_seconds=60)
    assert kept is not None and kept.submission.waiting is not None
    assert kept.submission.waiting.since == prior.since  # woken, never submitted: the same wait goes on
    ran = replace(run, vertex=w.run(run_id(1)).vertex)
    fresh = team_waited(ran, full, now=w.clock.now, wait_seconds=60)
    assert fresh is not None and fresh.submission.waiting is not None
    assert fresh.submission.waiting.since == format_timestamp(w.clock.now) and fresh.submission.waiting.tries == 1


def _recording(resubmitted: list[str]) -> Callable[[str], str]:
    def resubmit_stub(rid: str) -> str:
        resubmitted.append(rid)
        return "submitted"

    return resubmit_stub


def _looks(ledger: FakeLedger, woke: list[str], priority: dict[str, int] | None = None) -> TeamLooks:
    def wake(name: str) -> int:
        woke.append(name)
        return 0

    return TeamLooks(
        priority=lambda n: (priority or {}).get(n, 0),
        held_to_settle=ledger.held_to_settle,
        settle=lambda r: False,
        wake=wake,
    )


def test_the_reconciler_wakes_team_waits_once_per_team_instead_of_retrying_each() -> None:
    w, ledger = _burst(6)
    w.clock.now += timedelta(seconds=w.dispatch_deps.settings.wait_backoff_seconds + 1)  # every retry_at has come
    woke: list[str] = []
    resubmitted: list[str] = []
    deps = replace(w.reconciler_deps(), teams=_looks(ledger, woke), resubmit=_recording(resubmitted))
    said = reconcile(deps)
    assert "team-waiting=3" in said, said
    assert woke == ["churn"] and resubmitted == []
    assert all(w.run(run_id(i)).state == RunState.WAITING for i in (4, 5, 6))


def test_a_team_wait_past_the_give_up_time_still_fails_in_the_pass() -> None:
    w, ledger = _burst(4)
    w.clock.now += timedelta(seconds=w.dispatch_deps.settings.wait_give_up_seconds + 1)
    woke: list[str] = []
    deps = replace(w.reconciler_deps(), teams=_looks(ledger, woke))
    assert reconcile_run(w.run(run_id(4)), deps) == "failed"
    assert "team-waiting" not in reconcile(deps)
    assert w.run(run_id(4)).state == RunState.FAILED


def test_the_reconciler_leaves_a_woken_run_to_its_delivery_for_a_lease() -> None:
    w, _ = _burst(4)
    assert w.runs.apply(run_id(4), woken(now=w.clock.now)) == "woken"
    run: RunRecord = w.run(run_id(4))
    lease = w.dispatch_deps.settings.submission_lease_seconds
    assert woken_lately(run, w.clock.now, lease)
    resubmitted: list[str] = []
    deps = replace(w.reconciler_deps(), resubmit=_recording(resubmitted))
    assert reconcile_run(run, deps) == "unchanged" and resubmitted == []
    w.clock.now += timedelta(seconds=lease + 1)
    assert not woken_lately(run, w.clock.now, lease)
    assert reconcile_run(run, deps).startswith("resubmitted") and resubmitted == [run_id(4)]


def test_a_claim_the_plain_read_ledger_puts_over_the_cap_is_decided_without_the_ledger() -> None:
    w, ledger = _burst(4)
    team = _teams().named("churn")
    assert team is not None
    assert w.runs.apply(run_id(4), woken(now=w.clock.now)) == "woken"
    run = w.run(run_id(4))
    claim = admitted_claim(
        team,
        claim_submission(run_id(4), owner="o", now=w.clock.now, lease_seconds=120),
        before=None,
        now=w.clock.now,
        wait_seconds=60,
    )
    full = ledger.ledger("churn")
    assert not writes_ledger(claim, run, full)  # waits: written in a transaction over the run alone
    assert writes_ledger(claim, run, replace(full, gpus={"NVIDIA_TESLA_T4": 2}) if full else None)  # fits
    ended = replace(w.run(run_id(1)), state=RunState.SUCCEEDED)
    assert writes_ledger(settle_step(now=w.clock.now), ended, full)  # an ended run's settle
    assert not writes_ledger(settle_step(now=w.clock.now), run, full)  # nothing held: nothing to settle
