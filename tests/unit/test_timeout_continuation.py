"""A job that reaches its timeout while training advanced goes on as the run's next attempt from its newest
checkpoint (functions/records/continuation.py), through the listener and the dispatcher's fakes; one that did not
advance, or has no budget, deadline or extensions left, ends FAILED `timeout` saying why."""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from functions.dispatch.handler import resubmit
from functions.records.attempts import AttemptPolicy, candidates, waited
from functions.records.continuation import Committed, ContinuationPolicy, JobTimes, extension
from functions.settings import SettingsError, settings_from_env
from landfall.commands.runs import describe
from landfall.ui.views import run_row
from schemas.record_bounds import DOCUMENT_BOUND_BYTES, JOBS_KEPT, document_size
from schemas.run_record import RunRecord, RunState, TimeoutExtension, parse_run_record
from schemas.times import format_timestamp
from schemas.vocabulary import TIMEOUT, TIMEOUT_EXTENDED
from tests.fakes.vertex import timestamp
from tests.fakes.world import NOW, PLAN, REQUEST_JSON, World

CREATED = NOW + timedelta(seconds=30)
STARTED = NOW + timedelta(minutes=2)
ENDED = STARTED + timedelta(seconds=PLAN.timeout_seconds)
TIMEOUT_ERROR = (
    4,
    f"The job ran longer than its scheduling timeout of {PLAN.timeout_seconds} seconds and was stopped.",
)
ENV = {"GOOGLE_CLOUD_PROJECT": "p"}
POLICY = ContinuationPolicy(max_extensions=3, margin=1.5, min_timeout_seconds=60)


def at(seconds: float) -> datetime:
    """seconds after the job started."""
    return STARTED + timedelta(seconds=seconds)


def running(request: dict[str, object] | None = None) -> tuple[World, str, str]:
    """A world whose run's job is RUNNING on PLAN; the listener reads `checkpoints` and resubmits."""
    w = World()
    body = json.loads(REQUEST_JSON)
    body.update(request or {})
    assert w.deliver(json.dumps(body).encode()) == "submitted"
    (name,) = w.vertex.jobs
    w.vertex.set_state(name, "JOB_STATE_RUNNING", start=STARTED)
    w.clock.now = STARTED
    w.job_event(name.rsplit("/", 1)[-1])
    return w, name, name.rsplit("/", 1)[-1]


def with_checkpoints(w: World, committed: list[Committed]) -> None:
    w.listener_deps = replace(
        w.listener_deps,
        checkpoints=lambda run: committed,
        continuation=POLICY,
        resubmit=lambda run_id: resubmit(run_id, w.dispatch_deps),
    )


def timed_out(w: World, name: str) -> str:
    w.vertex.set_state(name, "JOB_STATE_FAILED", end=ENDED, error=TIMEOUT_ERROR)
    w.clock.now = ENDED + timedelta(seconds=5)
    return w.job_event(name.rsplit("/", 1)[-1])


def test_a_job_that_timed_out_while_training_advanced_goes_on_from_its_newest_checkpoint() -> None:
    w, name, job_id = running()
    # step 3 at 400 s, step 9 at 1400 s: 0.006 steps/s; training began 3 / 0.006 = 500 s before step 3: at -100 s,
    # so start-up is 0 s after the job's start plus its 90 s of provisioning (created 30 s, started 120 s after NOW)
    w.vertex.jobs[name].create_time = timestamp(CREATED)
    with_checkpoints(w, [Committed(3, at(400)), Committed(6, at(900)), Committed(9, at(1400))])
    before = w.run()
    outcome = timed_out(w, name)
    assert outcome.startswith(f"{TIMEOUT_EXTENDED}:")

    run = w.run()
    assert run.state == RunState.SUBMITTED, run.history[-3:]
    ext = run.submission.extension
    assert ext is not None and (ext.number, ext.from_step, ext.job_name) == (1, 9, name)
    assert ext.steps_per_second == pytest.approx(0.006)
    assert ext.timeout_seconds == pytest.approx((PLAN.estimated_steps - 9) / 0.006 * 1.5 + 90, abs=1)
    assert ext.spent_usd == pytest.approx(PLAN.hourly_cost_usd * PLAN.timeout_seconds / 3600, rel=1e-4)
    # the timed-out job is an earlier attempt's now: its events are ignored, its id kept
    (ended,) = run.submission.jobs or ()
    assert (ended.job_name, ended.reason) == (name, TIMEOUT)
    assert job_id in (run.submission.job_ids or ())
    assert w.job_event(job_id) == "ignored:earlier-attempt"
    # the next job: the same shape, the new timeout, the attempt says why
    (second,) = [j for j in w.vertex.jobs if j != name]
    assert w.vertex.jobs[second].job_spec.scheduling.timeout.total_seconds() == ext.timeout_seconds  # type: ignore[attr-defined]
    last = (run.submission.attempts or ())[-1]
    assert (last.reason, last.region, last.machine_type) == (TIMEOUT_EXTENDED, PLAN.region, PLAN.machine_type)
    assert last.plan.timeout_seconds == ext.timeout_seconds
    assert len(run.submission.attempts or ()) == len(before.submission.attempts or ()) + 1
    assert "timeout extended (1)" in run.history[-2].detail
    # the stored document reads back as written; `landfall run` says what happened
    assert parse_run_record(json.loads(json.dumps(run.to_dict()))) == run
    text = describe(run)
    assert f"extended  once: job {job_id} reached its timeout at step 9" in text
    assert f"with a {ext.timeout_seconds} s timeout" in text and ext.basis in text
    assert run_row(run)["extended"].startswith(f"once: job {job_id} reached its timeout at step 9")


def test_the_cost_of_a_continued_run_counts_its_timed_out_jobs() -> None:
    w, name, _ = running()
    with_checkpoints(w, ADVANCED)
    timed_out(w, name)
    spent = w.run().submission.extension.spent_usd  # type: ignore[union-attr]
    (second,) = [j for j in w.vertex.jobs if j != name]
    w.vertex.set_state(second, "JOB_STATE_RUNNING", start=ENDED + timedelta(minutes=1))
    w.objects[f"{w.run().artifacts.model_dir}metrics.json"] = "{}"  # type: ignore[union-attr]
    w.vertex.set_state(second, "JOB_STATE_SUCCEEDED", end=ENDED + timedelta(minutes=31))
    assert w.job_event(second.rsplit("/", 1)[-1]) == "recorded:SUCCEEDED"
    run = w.run()
    assert run.cost.actual_usd == pytest.approx(spent + PLAN.hourly_cost_usd * 0.5, abs=1e-6)
    assert run.cost.actual_basis is not None and "timed-out jobs" in run.cost.actual_basis


@pytest.mark.parametrize(
    ("committed", "why"),
    [
        ([], "no checkpoint past step 0 was committed after the job started"),
        # the previous job's checkpoints only: this one trained nothing it could keep
        ([Committed(40, STARTED - timedelta(minutes=5))], "no checkpoint past step 40"),
        # a checkpoint written while it ran, of the step it started from (a SIGTERM save before any new step)
        ([Committed(40, STARTED - timedelta(minutes=5)), Committed(40, at(30))], "no checkpoint past step 40"),
    ],
)
def test_a_job_whose_training_did_not_advance_ends_failed_timeout_saying_so(
    committed: list[Committed], why: str
) -> None:
    w, name, _ = running()
    with_checkpoints(w, committed)
    assert timed_out(w, name) == "recorded:FAILED"
    run = w.run()
    assert run.state == RunState.FAILED and run.error is not None and run.error.reason == TIMEOUT
    assert "Not continued: its training did not advance" in run.error.message and why in run.error.message
    assert run.submission.extension is None and len(w.vertex.jobs) == 1


def _run(request: dict[str, object] | None = None, extension_number: int = 0) -> RunRecord:
    w, _, _ = running(request)
    run = w.run()
    if extension_number:
        prior = TimeoutExtension(extension_number, "j", PLAN.region, PLAN.machine_type, 60, 1, 1.0, 0.5, "t", "")
        run = replace(run, submission=replace(run.submission, extension=prior))
    return run


ADVANCED = [Committed(2, at(100)), Committed(4, at(200))]
"""0.02 steps/s from the start; 11 of PLAN's 15 steps left: 550 s x 1.5 + 90 s of provisioning = 915 s."""
TIMES = JobTimes(CREATED, STARTED, at(1800))


def test_extensions_are_bounded() -> None:
    run = _run(extension_number=3)
    got = extension(run, "j", ADVANCED, TIMES, now=at(1800), policy=POLICY)
    assert got == "its timeout was extended 3 times already (LANDFALL_TIMEOUT_EXTENSIONS)"
    assert isinstance(
        extension(_run(extension_number=2), "j", ADVANCED, TIMES, now=at(1800), policy=POLICY), TimeoutExtension
    )


def test_the_budget_caps_the_next_timeout_and_a_spent_budget_ends_the_run() -> None:
    hourly = PLAN.hourly_cost_usd
    spent = hourly * 1800 / 3600  # the timed-out job's 30 minutes
    # a budget that pays 10 more minutes: the timeout is capped there
    run = _run({"constraints": {"budget_usd": round(spent + hourly / 6, 6)}})
    got = extension(run, "j", ADVANCED, TIMES, now=at(1800), policy=POLICY)
    assert isinstance(got, TimeoutExtension)
    assert got.timeout_seconds == pytest.approx(600, abs=2) and "left of the budget pays" in got.basis
    # a budget the timed-out job used up
    run = _run({"constraints": {"budget_usd": round(spent, 6)}})
    got = extension(run, "j", ADVANCED, TIMES, now=at(1800), policy=POLICY)
    assert isinstance(got, str) and got.startswith("no budget left to go on")


def test_the_deadline_caps_the_next_timeout_and_a_passed_deadline_ends_the_run() -> None:
    now = at(1800)
    run = _run({"constraints": {"deadline": format_timestamp(now + timedelta(minutes=10))}})
    got = extension(run, "j", ADVANCED, TIMES, now=now, policy=POLICY)
    assert isinstance(got, TimeoutExtension) and got.timeout_seconds == 600 and "deadline" in got.basis
    run = _run({"constraints": {"deadline": format_timestamp(now + timedelta(seconds=30))}})
    got = extension(run, "j", ADVANCED, TIMES, now=now, policy=POLICY)
    assert isinstance(got, str) and got.startswith("no time left before the request's constraints.deadline")


def test_one_checkpoint_gives_a_rate_counted_from_the_job_s_start() -> None:
    run = _run()
    got = extension(run, "j", [Committed(5, at(500))], TIMES, now=at(1800), policy=POLICY)
    assert isinstance(got, TimeoutExtension) and got.steps_per_second == pytest.approx(0.01)
    assert "start-up included" in got.basis


def test_only_the_timed_out_shape_gets_the_extended_timeout() -> None:
    run = _run()
    ext = TimeoutExtension(1, "j", PLAN.region, PLAN.machine_type, 4321, 10, 1.0, 0.5, "t", "")
    run = replace(run, submission=replace(run.submission, extension=ext))
    plans = candidates(run)
    assert [p.timeout_seconds for p in plans if (p.region, p.machine_type) == (PLAN.region, PLAN.machine_type)] == [
        4321
    ]
    assert all(p.timeout_seconds != 4321 for p in plans if p.region != PLAN.region)


def test_a_run_waiting_for_capacity_gives_up_at_its_constraints_deadline() -> None:
    run = _run({"constraints": {"deadline": format_timestamp(at(600))}})
    assert waited(run, "stockout on every plan", now=at(500), policy=AttemptPolicy()).state == RunState.WAITING  # type: ignore[union-attr]
    gone = waited(run, "stockout on every plan", now=at(700), policy=AttemptPolicy())
    assert gone is not None and gone.state == RunState.FAILED and gone.error is not None
    assert f"the request's deadline {format_timestamp(at(600))} has passed" in gone.error.message


def test_a_run_past_its_plan_s_step_count_gets_as_long_again_as_its_job_trained() -> None:
    run = _run()
    # 40 steps where the plan counted 15; the job ran 1800 s, 90 s of them provisioning
    got = extension(run, "j", [Committed(20, at(900)), Committed(40, at(1700))], TIMES, now=at(1800), policy=POLICY)
    assert isinstance(got, TimeoutExtension) and "past the plan's 15 steps at step 40" in got.basis
    assert got.timeout_seconds > 1800


def _committed(found: list[Committed], run: RunRecord) -> list[Committed]:
    return found


def test_a_run_extended_as_often_as_allowed_stays_within_its_document_bound() -> None:
    w, name, _ = running()
    most = settings_from_env({**ENV, "LANDFALL_TIMEOUT_EXTENSIONS": str(JOBS_KEPT)}).timeout_extensions
    with pytest.raises(SettingsError, match="LANDFALL_TIMEOUT_EXTENSIONS must be a whole number from 1 to 12"):
        settings_from_env({**ENV, "LANDFALL_TIMEOUT_EXTENSIONS": str(JOBS_KEPT + 1)})
    w.listener_deps = replace(
        w.listener_deps,
        continuation=replace(POLICY, max_extensions=most),
        resubmit=lambda run_id: resubmit(run_id, w.dispatch_deps),
    )
    for number in range(most + 1):
        start = w.clock.now + timedelta(minutes=1)
        w.vertex.set_state(name, "JOB_STATE_RUNNING", start=start)
        found = [Committed(1 + number, start + timedelta(seconds=60))]
        w.listener_deps = replace(w.listener_deps, checkpoints=functools.partial(_committed, found))
        w.vertex.set_state(name, "JOB_STATE_FAILED", end=start + timedelta(minutes=30), error=TIMEOUT_ERROR)
        w.clock.now = start + timedelta(minutes=31)
        w.job_event(name.rsplit("/", 1)[-1])
        run = w.run()
        assert document_size(f"runs/{run.run_id}", w.runs.docs[run.run_id]) < DOCUMENT_BOUND_BYTES
        if number < most:
            assert run.state == RunState.SUBMITTED and run.submission.extension is not None
            assert run.submission.extension.number == number + 1
            name = run.vertex.job_name  # type: ignore[union-attr]
    assert run.state == RunState.FAILED and run.error is not None
    assert f"extended {most} times already (LANDFALL_TIMEOUT_EXTENSIONS)" in run.error.message
