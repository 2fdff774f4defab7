"""Every job of a run is paid for: a job that ran before it ended for capacity, and a canary, count in the run's
cost (cost.earlier_usd, then actual_usd) and, while the run runs, against its team's month (running_cost); the
next job's time is its own, so nothing is counted twice."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest

from functions.dispatch.handler import attempt_policy, resubmit
from functions.records.team_ledger import running_cost
from schemas.canary import CanaryFigures
from schemas.run_record import RunState
from tests.fakes.world import FALLBACK_1, NOW, PLAN, World
from tests.unit.test_canary import STEP, canary_world, end_canary

PREEMPTED = "The VM was preempted (Spot)."


def _world() -> World:
    w = World()
    w.vertex.now = w.clock
    w.listener_deps = replace(
        w.listener_deps,
        resubmit=lambda run_id: resubmit(run_id, w.dispatch_deps),
        policy=attempt_policy(w.dispatch_deps.settings),
    )
    return w


def _event(w: World, name: str) -> str:
    return w.job_event(name.rsplit("/", 1)[-1])


def test_a_job_that_ran_then_ended_for_capacity_is_paid_for_once_with_the_next_one() -> None:
    w = _world()
    assert w.deliver() == "submitted"
    first = w.job_name()
    w.vertex.set_state(first, "JOB_STATE_RUNNING", start=NOW)
    _event(w, first)
    w.clock.now = NOW + timedelta(hours=1)
    w.vertex.set_state(first, "JOB_STATE_FAILED", end=w.clock.now, error=(14, PREEMPTED))
    assert _event(w, first) == "resubmitted:submitted"
    run = w.run()
    assert run.cost.earlier_usd == pytest.approx(PLAN.hourly_cost_usd)  # an hour on the first plan
    assert run.timings.started_at is None  # the next job's time is its own
    # while the next job has not started, the team's month counts the hour, not the hour again since it began
    assert running_cost(run, NOW + timedelta(hours=3)) == pytest.approx(PLAN.hourly_cost_usd)

    second = w.job_name()
    w.vertex.set_state(second, "JOB_STATE_RUNNING", start=NOW + timedelta(hours=1, minutes=5))
    _event(w, second)
    running = w.run()
    at = NOW + timedelta(hours=1, minutes=35)
    assert running_cost(running, at) == pytest.approx(PLAN.hourly_cost_usd + FALLBACK_1.hourly_cost_usd / 2)
    w.vertex.set_state(second, "JOB_STATE_SUCCEEDED", end=NOW + timedelta(hours=1, minutes=35))
    artifacts = w.run().artifacts
    assert artifacts is not None
    w.objects[f"{artifacts.model_dir}metrics.json"] = json.dumps({"steps": 10})
    _event(w, second)
    done = w.run()
    assert done.state == RunState.SUCCEEDED
    assert done.cost.actual_usd == pytest.approx(PLAN.hourly_cost_usd + FALLBACK_1.hourly_cost_usd / 2, abs=1e-6)
    assert done.cost.actual_basis is not None and "its earlier jobs cost" in done.cost.actual_basis
    _event(w, second)  # a repeated delivery adds nothing
    assert w.run().cost == done.cost


def test_a_job_refused_before_it_ran_costs_nothing() -> None:
    w = _world()
    assert w.deliver() == "submitted"
    first = w.job_name()
    w.vertex.set_state(
        first,
        "JOB_STATE_FAILED",
        end=NOW + timedelta(minutes=20),
        error=(8, "Resources are insufficient in region: us-central1."),
    )
    assert _event(w, first) == "resubmitted:submitted"
    assert w.run().cost.earlier_usd is None


def test_a_canary_is_paid_for_whether_the_run_goes_on_or_ends_with_it() -> None:
    w = canary_world()
    assert w.deliver() == "submitted"
    assert end_canary(w, CanaryFigures(steps=8, step_seconds=STEP)).startswith("canary-passed")
    three_minutes = PLAN.hourly_cost_usd * 3 / 60
    assert w.run().cost.earlier_usd == pytest.approx(three_minutes)
    assert w.run().timings.started_at is None

    failed = canary_world()
    assert failed.deliver() == "submitted"
    assert end_canary(failed, None) == "canary-failed:failed"
    run = failed.run()
    assert run.cost.actual_usd == pytest.approx(three_minutes, abs=1e-6)
    assert run.cost.actual_basis is not None and "canary" in run.cost.actual_basis


def test_a_run_that_waited_settles_its_earlier_jobs_once_and_the_rest_when_it_ends() -> None:
    """A run settles when it waits (what its earlier jobs cost) and again when it ends: the second settle is what
    it cost beyond the first, so the team's month holds the run's whole cost once."""
    from functions.records import team_ledger as rules
    from schemas.run_record import Cost
    from schemas.team_ledger import RunCharge

    w = _world()
    assert w.deliver() == "submitted"
    base = w.run()
    ledger, charge = rules.reserved(None, RunCharge("vision"), {"NVIDIA_TESLA_T4": 1}, 10.0, NOW)
    waiting = replace(base, state=RunState.WAITING, team=charge, cost=Cost(earlier_usd=3.0))
    _, ledger_after, done = rules.settle_step(now=NOW)(waiting, ledger)
    assert done and ledger_after is not None and ledger_after.month(charge.month).settled_usd == pytest.approx(3.0)
    assert waiting.team is not None
    held_again, charge_again = rules.reserved(ledger_after, replace(waiting.team, held=False), {}, 10.0, NOW)
    ended = replace(
        waiting,
        state=RunState.SUCCEEDED,
        team=replace(charge_again, settled_usd=3.0),
        cost=Cost(earlier_usd=3.0, actual_usd=8.0),
    )
    _, final, _ = rules.settle_step(now=NOW)(ended, held_again)
    assert final is not None and final.month(charge.month).settled_usd == pytest.approx(8.0)
