"""Every branch of the completion listener (handle_job_event, record_job_state) against the fakes: each test
asserts what the delivery answered and the run record it left."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from functions.errors import PermanentError, TransientError
from functions.job_states import ACTUAL_COST_BASIS
from functions.listener.handler import UNKNOWN_JOB_PATIENCE
from schemas.run_record import RunRecord, RunState
from schemas.times import format_timestamp
from tests.fakes.world import NOW, PLAN, World

STARTED = NOW + timedelta(minutes=2)
ENDED = STARTED + timedelta(minutes=30)


def submitted() -> tuple[World, str, str]:
    """A world with one SUBMITTED run; returns it, the job's name and its id."""
    w = World()
    assert w.deliver() == "submitted"
    (name,) = w.vertex.jobs
    return w, name, name.rsplit("/", 1)[-1]


def states(run: RunRecord) -> list[str]:
    return [h.state for h in run.history]


def metrics_uri(w: World) -> str:
    artifacts = w.run().artifacts
    assert artifacts is not None
    return f"{artifacts.model_dir}metrics.json"


def test_running_then_succeeded_records_times_metrics_and_cost() -> None:
    w, name, job_id = submitted()
    w.vertex.set_state(name, "JOB_STATE_RUNNING", start=STARTED)
    w.clock.now = STARTED
    assert w.job_event(job_id) == "recorded:RUNNING"
    run = w.run()
    assert run.state == RunState.RUNNING and run.vertex is not None and run.vertex.state == "JOB_STATE_RUNNING"
    assert run.timings.started_at == format_timestamp(STARTED) and run.timings.ended_at is None

    w.objects[metrics_uri(w)] = json.dumps({"final": {"accuracy": 0.97, "loss": 0.1}})
    w.vertex.set_state(name, "JOB_STATE_SUCCEEDED", end=ENDED)
    w.clock.now = ENDED
    assert w.job_event(job_id) == "recorded:SUCCEEDED"
    run = w.run()
    assert states(run) == ["RECEIVED", "PLANNED", "SUBMITTING", "SUBMITTED", "RUNNING", "SUCCEEDED"]
    assert run.metrics == {"final": {"accuracy": 0.97, "loss": 0.1}} and run.error is None
    assert (run.timings.started_at, run.timings.ended_at, run.timings.run_seconds) == (
        format_timestamp(STARTED),
        format_timestamp(ENDED),
        1800.0,
    )
    assert run.cost.actual_usd == round(PLAN.hourly_cost_usd * 0.5, 6) and run.cost.actual_basis == ACTUAL_COST_BASIS
    assert run.cost.estimated_usd == PLAN.estimated_cost_usd
    assert run.vertex is not None and run.vertex.state == "JOB_STATE_SUCCEEDED"
    assert w.doc()["timings"]["started_at"] <= w.doc()["timings"]["ended_at"]


def test_duplicate_events_record_each_state_once() -> None:
    w, name, job_id = submitted()
    w.vertex.set_state(name, "JOB_STATE_RUNNING", start=STARTED)
    assert w.job_event(job_id) == "recorded:RUNNING"
    assert w.job_event(job_id) == "recorded:RUNNING"
    w.objects[metrics_uri(w)] = "{}"
    w.vertex.set_state(name, "JOB_STATE_SUCCEEDED", end=ENDED)
    assert w.job_event(job_id) == "recorded:SUCCEEDED"
    assert w.job_event(job_id) == "recorded:SUCCEEDED"
    assert states(w.run()) == ["RECEIVED", "PLANNED", "SUBMITTING", "SUBMITTED", "RUNNING", "SUCCEEDED"]


def test_events_out_of_order_never_move_a_run_back() -> None:
    w, name, job_id = submitted()
    w.objects[metrics_uri(w)] = "{}"
    w.vertex.set_state(name, "JOB_STATE_SUCCEEDED", start=STARTED, end=ENDED)
    assert w.job_event(job_id) == "recorded:SUCCEEDED"  # a short job: RUNNING is skipped
    after = w.doc()
    # The RUNNING event arrives late: the job, read again, has ended; nothing new is recorded.
    assert w.job_event(job_id) == "recorded:SUCCEEDED"
    assert states(w.run()) == ["RECEIVED", "PLANNED", "SUBMITTING", "SUBMITTED", "SUCCEEDED"]
    # Even a stale read that says RUNNING cannot move the run back or overwrite what it recorded.
    w.vertex.set_state(name, "JOB_STATE_RUNNING")
    assert w.job_event(job_id) == "unchanged:RUNNING"
    assert w.doc()["state"] == "SUCCEEDED" and w.doc()["vertex"] == after["vertex"]
    assert w.doc()["history"] == after["history"]


@pytest.mark.parametrize("state", ["JOB_STATE_PENDING", "JOB_STATE_QUEUED", "JOB_STATE_CANCELLING", "JOB_STATE_PAUSED"])
def test_job_states_without_a_run_state_are_noted_only(state: str) -> None:
    w, name, job_id = submitted()
    before = w.run()
    w.vertex.set_state(name, state)
    w.clock.now = NOW + timedelta(minutes=1)
    assert w.job_event(job_id) == f"noted:{state}"
    run = w.run()
    assert run.state == RunState.SUBMITTED and run.history == before.history
    assert run.vertex is not None and run.vertex.state == state
    assert run.updated_at == format_timestamp(w.clock.now)


@pytest.mark.parametrize(
    ("job_state", "error", "run_state", "code"),
    [
        (
            "JOB_STATE_FAILED",
            (13, "The replica workerpool0-0 exited with a non-zero status of 1."),
            "FAILED",
            "job-failed",
        ),
        ("JOB_STATE_EXPIRED", (4, "The job did not start before its timeout."), "FAILED", "job-failed"),
        ("JOB_STATE_PARTIALLY_SUCCEEDED", (2, "Some replicas failed."), "FAILED", "job-failed"),
        ("JOB_STATE_CANCELLED", (1, "CANCELED"), "CANCELLED", "job-cancelled"),
    ],
)
def test_a_job_that_ends_badly_records_the_error(
    job_state: str, error: tuple[int, str], run_state: str, code: str
) -> None:
    w, name, job_id = submitted()
    w.vertex.set_state(name, job_state, start=STARTED, end=ENDED, error=error)
    assert w.job_event(job_id) == f"recorded:{run_state}"
    run = w.run()
    assert run.state == run_state and run.history[-1].detail == error[1]
    assert run.error is not None and (run.error.code, run.error.message) == (code, error[1])
    assert run.metrics is None and run.cost.actual_usd is not None


def test_a_job_that_ends_before_starting_has_no_actual_cost() -> None:
    w, name, job_id = submitted()
    w.vertex.set_state(name, "JOB_STATE_FAILED", end=ENDED, error=(8, "stockout"))
    assert w.job_event(job_id) == "recorded:FAILED"
    run = w.run()
    assert run.timings.run_seconds is None and run.cost.actual_usd is None and run.cost.actual_basis is None
    assert w.doc()["cost"] == {"estimated_usd": PLAN.estimated_cost_usd}


@pytest.mark.parametrize(
    ("text", "problem"),
    [(None, "the job succeeded but wrote no gs://"), ("{not json", "is not JSON"), ("[1, 2]", "is not a JSON object")],
)
def test_a_success_without_usable_metrics_says_so(text: str | None, problem: str) -> None:
    w, name, job_id = submitted()
    if text is not None:
        w.objects[metrics_uri(w)] = text
    w.vertex.set_state(name, "JOB_STATE_SUCCEEDED", start=STARTED, end=ENDED)
    assert w.job_event(job_id) == "recorded:SUCCEEDED"
    run = w.run()
    assert run.state == RunState.SUCCEEDED and run.metrics is None
    assert run.error is not None and run.error.code == "metrics-missing" and problem in run.error.message
    assert metrics_uri(w) in run.error.message


def test_an_event_for_an_unknown_job_is_retried_within_patience_then_ignored() -> None:
    w = World()
    with pytest.raises(TransientError, match="no run records job 42 yet"):
        w.job_event("42", published_ago=timedelta(minutes=1))
    with pytest.raises(TransientError):
        w.job_event("42", publish_time="")  # no publish time: counted from now
    assert w.job_event("42", published_ago=UNKNOWN_JOB_PATIENCE + timedelta(seconds=1)) == "ignored:unknown-job"
    assert w.runs.docs == {}


@pytest.mark.parametrize("data", [b"not a log entry", b'{"resource": {"type": "gce_instance"}}'])
def test_a_message_that_is_not_a_job_event_is_acknowledged(data: bytes) -> None:
    w, _, _ = submitted()
    before = w.doc()
    assert w.job_event("1", data=data) == "ignored:not-a-job-event"
    assert w.doc() == before


def test_a_run_whose_job_vertex_no_longer_knows_is_a_permanent_error() -> None:
    w, name, job_id = submitted()
    del w.vertex.jobs[name]
    with pytest.raises(PermanentError, match="does not exist"):
        w.job_event(job_id)


def test_events_of_an_unknown_job_are_given_up_before_their_subscription_dead_letters_them() -> None:
    """Fault campaign: events naming a job no run recorded were retried for 10 minutes, past the job-events
    subscription's last delivery attempt, so they were dead-lettered instead of ignored."""
    from deploy.local.bridge import retry_delay
    from deploy.topology import load_topology

    route = load_topology().function("on_job_event")
    attempts = route.dead_letter.max_delivery_attempts
    horizon = sum(retry_delay(route.retry, n) for n in range(1, attempts))
    assert UNKNOWN_JOB_PATIENCE.total_seconds() < horizon
