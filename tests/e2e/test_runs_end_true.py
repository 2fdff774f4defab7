"""End to end, issue 13: runs end in their true state through the real local stack and the Vertex emulator's faults.
A stockout after submission is resubmitted on the next plan; a job that ends while the listener is down is recorded
by a reconcile pass; `landfall cancel` stops a running job. Each test is bounded (about 90 s on a quiet machine)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from deploy.local import processes, provision, stack
from deploy.vertex_emulator import control
from functions.gcp.vertex import RUN_LABEL, JobView
from landfall import cli
from landfall.synthetic import separable_csv_shards
from schemas.run_finished import RunFinished, parse_run_finished
from schemas.run_record import TERMINAL_STATES, RunState
from schemas.training_request import run_id_for
from tests.polling import wait_for

pytestmark = pytest.mark.e2e

REGION = "us-central1"
"""Where the planner puts the default tabular route's CPU plans (every candidate: a stockout there refuses them all)."""
ENDED = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED")


@pytest.fixture
def cli_env(local_stack: stack.StackInfo, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(provision, "default_state_dir", lambda: local_stack.state_dir)
    yield


@pytest.fixture
def faults(local_stack: stack.StackInfo) -> Iterator[str]:
    address = local_stack.env["LANDFALL_VERTEX_ENDPOINT"]
    control.set_faults(address, {})
    yield address
    control.set_faults(address, {})


@pytest.fixture
def run_results(local_stack: stack.StackInfo) -> Iterator[Any]:
    """A pull subscription on the run-results topic, made before the run starts (a topic keeps nothing by itself)."""
    from google.cloud import pubsub_v1

    project = local_stack.env["GOOGLE_CLOUD_PROJECT"]
    subscriber = pubsub_v1.SubscriberClient()
    path = subscriber.subscription_path(project, f"e2e-run-results-{uuid.uuid4().hex[:6]}")
    subscriber.create_subscription(name=path, topic=f"projects/{project}/topics/landfall-run-results")
    yield subscriber, path
    subscriber.delete_subscription(subscription=path)


def _finished(run_results: Any, run_id: str, timeout_s: float = 30, linger_s: float = 5) -> list[RunFinished]:
    """Every RunFinished for run_id: waits up to timeout_s for the first, then linger_s more for any duplicate."""
    subscriber, path = run_results
    seen: list[RunFinished] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = subscriber.pull(subscription=path, max_messages=10, timeout=5)
        if answer.received_messages:
            subscriber.acknowledge(subscription=path, ack_ids=[m.ack_id for m in answer.received_messages])
        mine = [parse_run_finished(m.message.data) for m in answer.received_messages
                if m.message.attributes.get("run_id") == run_id]
        if mine and not seen:
            deadline = time.monotonic() + linger_s
        seen += mine
    return seen


def _drop(bucket: Any, prefix: str, *, epochs: int | None = None) -> str:
    for i, text in enumerate(separable_csv_shards(shards=2, rows_per_shard=100)):
        bucket.blob(f"{prefix}part-{i:05d}.csv").upload_from_string(text, content_type="text/csv")
    if epochs is not None:
        bucket.blob(f"{prefix}landfall.json").upload_from_string(json.dumps({"hyperparameters": {"epochs": epochs}}))
    marker = bucket.blob(f"{prefix}_SUCCESS")
    marker.upload_from_string(b"")
    return run_id_for(f"gcs:{bucket.name}/{prefix}:{marker.generation}")


def _doc(runs: Any, run_id: str) -> dict[str, Any] | None:
    snap = runs.document(run_id).get()
    return snap.to_dict() if snap.exists else None


def _terminal(runs: Any, run_id: str, timeout_s: float = 90) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        doc = _doc(runs, run_id)
        return doc if doc and RunState(doc["state"]) in TERMINAL_STATES else None

    return wait_for(done, timeout_s, f"run {run_id} to end", step=0.2)


def _jobs_of(run_id: str) -> list[JobView]:
    from functions.wiring import vertex_jobs

    return [j for j in vertex_jobs().list_labelled(REGION) if j.labels.get(RUN_LABEL) == run_id]


def _job(run_id: str, states: tuple[str, ...], timeout_s: float = 60) -> JobView:
    return wait_for(lambda: next((j for j in _jobs_of(run_id) if j.state in states), None), timeout_s,
                    f"a job of {run_id} in {states}", step=0.05)


def test_a_stockout_after_submission_is_resubmitted_and_succeeds_with_both_attempts(
        local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any, faults: str, run_results: Any) -> None:
    control.set_faults(faults, {"stockout": [{"region": REGION}]})
    run_id = _drop(landing_bucket, "datasets/e2e-stockout/")
    first = _job(run_id, ("JOB_STATE_FAILED",))  # accepted in REGION (the first plan's), then FAILED for capacity
    control.set_faults(faults, {})  # before the listener hears of it and resubmits
    doc = _terminal(firestore_runs, run_id)
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    jobs = doc["submission"]["jobs"]
    assert jobs[0]["job_name"] == first.name and jobs[0]["reason"] == "stockout", jobs
    assert "Resources are insufficient" in jobs[0]["message"]
    assert doc["vertex"]["job_name"] != first.name
    # job_ids names the earlier attempts' jobs (their late events are ignored); vertex names the current one.
    assert doc["submission"]["job_ids"][0] == first.job_id
    assert doc["vertex"]["job_id"] not in doc["submission"]["job_ids"]
    from functions.wiring import vertex_jobs

    # The next plan may be in another region: the job the run names is read where it is.
    assert vertex_jobs().get(doc["vertex"]["job_name"]).state == "JOB_STATE_SUCCEEDED"
    # One RunFinished for the run on landfall-run-results (its redeliveries and reconcile passes publish no more).
    [finished] = _finished(run_results, run_id)
    assert (finished.state, finished.reason) == ("SUCCEEDED", "") and finished.metrics == doc["metrics"]
    assert _doc(firestore_runs, run_id)["submission"]["results_published"] is True  # type: ignore[index]


def test_a_job_that_ends_while_the_listener_is_stopped_is_recorded_by_a_reconcile_pass(
        local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any, cli_env: None) -> None:
    run_id = _drop(landing_bucket, "datasets/e2e-listener-down/")
    _job(run_id, ("JOB_STATE_PENDING", "JOB_STATE_RUNNING"))
    listener = next(s for s in stack.read_state(local_stack.state_dir) if s.name == "on_job_event")
    processes.stop(listener)
    try:
        assert not any(j.state in ENDED for j in _jobs_of(run_id)), "the job ended before the listener stopped"
        ended = _job(run_id, ENDED, timeout_s=90)
        assert ended.state == "JOB_STATE_SUCCEEDED"
        assert cli.main(["reconcile"]) == 0
        doc = _terminal(firestore_runs, run_id, timeout_s=60)
        assert doc["state"] == "SUCCEEDED" and doc["vertex"]["job_name"] == ended.name
        assert doc["metrics"], doc
    finally:
        stack.restart("on_job_event", state_dir=local_stack.state_dir)
    history = [step["state"] for step in doc["history"]]
    assert len(history) == len(set(history)), history


def test_cancel_on_a_running_job_ends_job_and_run_cancelled(
        local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any, cli_env: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    run_id = _drop(landing_bucket, "datasets/e2e-cancel/", epochs=5000)
    running = _job(run_id, ("JOB_STATE_RUNNING",))
    wait_for(lambda: (_doc(firestore_runs, run_id) or {}).get("vertex"), 30, f"run {run_id} to name its job")
    capsys.readouterr()
    assert cli.main(["cancel", run_id, "--by", "e2e"]) == 0
    assert "asked Vertex to cancel job" in capsys.readouterr().out
    cancelled = _job(run_id, ENDED, timeout_s=60)
    assert (cancelled.name, cancelled.state) == (running.name, "JOB_STATE_CANCELLED")
    doc = _terminal(firestore_runs, run_id, timeout_s=60)
    assert doc["state"] == "CANCELLED", doc
    assert doc["error"]["reason"] == "cancelled" and doc["submission"]["cancel"]["by"] == "e2e"
    assert cli.main(["cancel", run_id]) == 0
    assert "already ended CANCELLED" in capsys.readouterr().out
