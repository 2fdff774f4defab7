"""Runs end in their true state, against the fakes: failure reasons, fallback after submission, waiting for capacity,
cancel, and the reconciler's pass over open runs."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from functions.dispatch.handler import attempt_policy, resubmit
from functions.reconciler.cancel import cancel_run
from functions.reconciler.handler import ReconcilerDeps, reconcile
from functions.records.failure_reasons import classify
from schemas.run_record import RunState
from schemas.times import format_timestamp
from schemas.trainer_failure import FAILURE_FILE, TrainerFailure
from tests.fakes.world import FALLBACK_1, NOW, World

STOCKOUT = "Resources are insufficient in region: {}. Try a different region or use a different accelerator."


@pytest.mark.parametrize(
    ("kind", "text", "code", "reason", "replica", "exit_code"),
    [
        (
            "DataError",
            "The replica workerpool0-0 exited with a non-zero status of 3. Termination reason: Error.",
            3,
            "bad-data",
            "workerpool0-0",
            3,
        ),
        (
            "ConfigError",
            "The replica workerpool0-0 exited with a non-zero status of 2.",
            3,
            "bad-config",
            "workerpool0-0",
            2,
        ),
        (
            "OutOfMemory",
            "The replica workerpool0-0 exited with a non-zero status of 4.",
            3,
            "out-of-memory",
            "workerpool0-0",
            4,
        ),
        (
            None,
            "The replica workerpool1-0 ran out of memory and exited with a non-zero status of 137",
            3,
            "out-of-memory",
            "workerpool1-0",
            137,
        ),
        (
            "ValueError",
            "The replica workerpool0-0 exited with a non-zero status of 1.",
            3,
            "user-code",
            "workerpool0-0",
            1,
        ),
        (None, STOCKOUT.format("us-central1"), 8, "stockout", None, None),
        (None, "The following quota metrics exceed quota limits: x", 8, "quota", None, None),
        (
            None,
            "The job ran longer than its scheduling timeout of 5 seconds and was stopped.",
            4,
            "timeout",
            None,
            None,
        ),
        (None, "CustomJob was cancelled.", 1, "cancelled", None, None),
        (None, "", 1, "cancelled", None, None),
        (None, "something broke inside Vertex", 13, "platform", None, None),
    ],
)
def test_reason_table(
    kind: str | None, text: str, code: int, reason: str, replica: str | None, exit_code: int | None
) -> None:
    assert classify(kind, text, code) == classify(kind, text, code)
    found = classify(kind, text, code)
    assert (found.reason, found.replica, found.exit_code) == (reason, replica, exit_code)


def submitted(w: World | None = None) -> tuple[World, str]:
    w = w or World()
    w.listener_deps = replace(
        w.listener_deps,
        resubmit=lambda run_id: resubmit(run_id, w.dispatch_deps),
        policy=attempt_policy(w.dispatch_deps.settings),
    )
    assert w.deliver() == "submitted"
    return w, w.job_name()


def job_id(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def stockout(w: World, name: str) -> str:
    w.vertex.set_state(name, "JOB_STATE_FAILED", start=NOW, end=NOW, error=(8, STOCKOUT.format(name.split("/")[3])))
    return w.job_event(job_id(name))


def test_a_stockout_after_acceptance_resubmits_on_the_next_plan_and_keeps_both_attempts() -> None:
    w, first = submitted()
    assert stockout(w, first) == "resubmitted:submitted"
    run = w.run()
    assert run.state == RunState.SUBMITTED and run.vertex is not None and run.vertex.region == FALLBACK_1.region
    (ended,) = run.submission.jobs or ()
    assert (ended.job_name, ended.reason, ended.region) == (first, "stockout", "us-central1")
    assert [h.state for h in run.history] == [
        "RECEIVED",
        "PLANNED",
        "SUBMITTING",
        "SUBMITTED",
        "SUBMITTING",
        "SUBMITTED",
    ]
    assert run.history[4].detail.startswith("attempt 2: ")
    # the old job's event again: the run is not moved back, nothing is recorded twice
    w.objects[f"{w.model_dir()}metrics.json"] = "{}"
    assert w.job_event(job_id(first)) == "ignored:earlier-attempt"
    second = run.vertex.job_name
    w.vertex.set_state(second, "JOB_STATE_SUCCEEDED", start=NOW, end=NOW)
    assert w.job_event(job_id(second)) == "recorded:SUCCEEDED"
    assert w.job_event(job_id(second)) == "recorded:SUCCEEDED"
    final = w.run()
    assert final.state == RunState.SUCCEEDED and len(final.submission.jobs or ()) == 1
    assert [h.state for h in final.history].count(RunState.SUCCEEDED) == 1


def test_capacity_refused_everywhere_waits_then_the_reconciler_succeeds_once_it_is_back() -> None:
    w, name = submitted()
    for _ in range(3):
        outcome = stockout(w, name)
        name = w.job_name() if w.run().vertex else name
    assert outcome == "waiting:stockout"
    run = w.run()
    assert run.state == RunState.WAITING and run.submission.waiting is not None
    assert len(run.submission.jobs or ()) == 3
    deps = reconciler(w)
    assert reconcile(deps) == "unchanged=1"  # before retry_at
    w.clock.now = NOW + timedelta(seconds=61)
    assert reconcile(deps) == "resubmitted=1"
    run = w.run()
    assert run.state == RunState.SUBMITTED and run.submission.round == 1
    w.objects[f"{w.model_dir()}metrics.json"] = "{}"
    w.vertex.set_state(w.job_name(), "JOB_STATE_SUCCEEDED", start=NOW, end=NOW)
    assert reconcile(deps) == "recorded:SUCCEEDED=1"
    assert w.run().state == RunState.SUCCEEDED
    assert reconcile(deps) == "no open runs"


def test_a_run_that_waits_past_its_give_up_time_fails_naming_every_attempt() -> None:
    w, name = submitted()
    for _ in range(3):
        stockout(w, name)
        name = w.job_name() if w.run().vertex else name
    w.clock.now = NOW + timedelta(days=2)
    assert reconcile(reconciler(w)) == "failed=1"
    run = w.run()
    assert run.state == RunState.FAILED and run.error is not None and run.error.reason == "stockout"
    for job in run.submission.jobs or ():
        assert job_id(job.job_name) in run.error.message


PREEMPTED_LINE = "stopped by a signal at step 12; the newest checkpoint resumes it"


def test_a_run_preempted_on_every_plan_fails_preempted_with_the_trainers_line() -> None:
    """Spot jobs preempted past Vertex's restarts: Vertex's text reads like a stockout, the trainer's record says
    Preempted; each plan is tried, the run waits, and when it gives up the reason is the last job's, `preempted`."""
    w, name = submitted()
    for _ in range(3):
        w.objects[f"{w.model_dir()}{FAILURE_FILE}"] = TrainerFailure(
            "Preempted", PREEMPTED_LINE, exit_code=143, step=12
        ).to_json()
        said = stockout(w, name)
        name = w.job_name() if w.run().vertex else name
    assert said == "waiting:preempted" and w.run().state == RunState.WAITING
    assert all(j.reason == "preempted" and PREEMPTED_LINE in j.message for j in w.run().submission.jobs or ())
    w.clock.now = NOW + timedelta(days=2)
    assert reconcile(reconciler(w)) == "failed=1"
    error = w.run().error
    assert error is not None and error.reason == "preempted" and PREEMPTED_LINE in error.message


def reconciler(w: World) -> ReconcilerDeps:
    return w.reconciler_deps()


def test_the_reconciler_records_jobs_that_ended_while_the_listener_was_away() -> None:
    w, name = submitted()
    w.objects[f"{w.model_dir()}metrics.json"] = '{"final": {"loss": 0.1}}'
    w.vertex.set_state(name, "JOB_STATE_SUCCEEDED", start=NOW, end=NOW + timedelta(minutes=1))
    assert reconcile(reconciler(w)) == "recorded:SUCCEEDED=1"
    assert w.run().metrics == {"final": {"loss": 0.1}}
    assert reconcile(reconciler(w)) == "no open runs"


def test_the_reconciler_takes_over_a_submission_stuck_past_its_lease_and_adopts_its_job() -> None:
    w = World()
    w.vertex.crash_on_create("us-central1", after_creating=True)
    with pytest.raises(BaseException, match="died after"):
        w.deliver()
    deps = reconciler(w)
    assert reconcile(deps) == "unchanged=1"  # lease still live
    w.clock.now = NOW + timedelta(seconds=121)
    assert reconcile(deps) == "resubmitted=1"
    assert w.run().state == RunState.SUBMITTED and len(w.vertex.jobs) == 1


def test_a_failed_job_carries_reason_replica_exit_code_and_the_trainers_line() -> None:
    w, name = submitted()
    w.objects[f"{w.model_dir()}{FAILURE_FILE}"] = TrainerFailure(
        "OutOfMemory", "CUDA out of memory: lower --batch-size", exit_code=4, step=7
    ).to_json()
    w.vertex.set_state(
        name,
        "JOB_STATE_FAILED",
        start=NOW,
        end=NOW,
        error=(3, "The replica workerpool0-0 exited with a non-zero status of 4. Termination reason: Error."),
    )
    assert w.job_event(job_id(name)) == "recorded:FAILED"
    error = w.run().error
    assert error is not None and (error.reason, error.replica, error.exit_code, error.step) == (
        "out-of-memory",
        "workerpool0-0",
        4,
        7,
    )
    assert error.message == "CUDA out of memory: lower --batch-size"


def test_cancel_a_running_job_ends_the_run_cancelled_with_who_and_when() -> None:
    w, name = submitted()
    said = cancel_run(w.run().run_id, by="ada@example.com", store=w.runs, vertex=w.vertex, now=NOW)  # type: ignore[arg-type]
    assert "asked Vertex to cancel" in said and w.vertex.cancelled == [name]
    assert w.job_event(job_id(name)) == "recorded:CANCELLED"
    run = w.run()
    assert run.state == RunState.CANCELLED and run.error is not None and run.error.reason == "cancelled"
    assert run.error.message == f"cancelled by ada@example.com at {format_timestamp(NOW)}"
    again = cancel_run(run.run_id, by="bob", store=w.runs, vertex=w.vertex, now=NOW)  # type: ignore[arg-type]
    assert "already ended CANCELLED; nothing changed" in again and w.run() == run


def test_cancel_a_waiting_run_stops_it_and_says_it_waited_after_its_jobs_ended() -> None:
    w, name = submitted()
    for _ in range(3):
        stockout(w, name)
        name = w.job_name() if w.run().vertex else name
    said = cancel_run(w.run().run_id, by="ada", store=w.runs, vertex=w.vertex, now=NOW)  # type: ignore[arg-type]
    # its three jobs had ended for capacity: it was not "before submission"
    assert said.endswith("CANCELLED while it waited for capacity (no job was running)"), said
    run = w.run()
    assert run.state == RunState.CANCELLED and run.error is not None
    assert "3 job(s) ended, the last for stockout in" in run.error.message
    assert "before a job was submitted" not in run.error.message
    w.clock.now = NOW + timedelta(hours=1)
    assert reconcile(reconciler(w)) == "no open runs"


def test_cancel_of_an_unknown_run_says_so() -> None:
    w = World()
    assert cancel_run("run-nope", by="x", store=w.runs, vertex=w.vertex, now=NOW) == "no run run-nope"  # type: ignore[arg-type]
