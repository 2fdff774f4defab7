"""End to end: the canary before a long run, through the real local stack and the Vertex emulator, on a
team's container (the canary/ route of routes.toml: planned 2.25 h by its measured step time, past the suite's
LANDFALL_CANARY_MIN_HOURS of 1, which `landfall up`'s settings carry to the functions). A canary within the plan is
followed by the long job, its figures on the run; one twice as slow makes the run planned again from what it
measured; one that fails ends the run with its reason and no long job, and `landfall retry` of it makes one new run
that runs its own canary; `landfall cancel` in the canary step cancels
the canary job; a canary that ends while the listener is stopped is finished by the reconciler, which hands the run
to the dispatcher for its long job. Each run costs seconds of a stdlib container."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from deploy.local import processes, provision, stack
from functions.gcp.vertex import RUN_LABEL, JobView, is_canary_job
from landfall import cli
from landfall.synthetic import separable_csv_shards
from schemas.run_record import TERMINAL_STATES, RunState
from schemas.training_request import run_id_for
from tests.polling import wait_for

pytestmark = pytest.mark.e2e

REGION = "us-central1"
ENDED = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED")


@pytest.fixture
def cli_env(local_stack: stack.StackInfo, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(provision, "default_state_dir", lambda: local_stack.state_dir)
    yield


BATCHES = iter(range(64, 128))
"""Each dataset's own batch size: its own workload key (schemas/measurement.py), so that no test's run is planned
from what another's canary measured (2,000,000 samples at any of these is past an hour at 0.25 s a step)."""


def _drop(bucket: Any, prefix: str, *args: str) -> str:
    """Two CSV shards and the marker under canary/PREFIX, with the container's arguments and a batch size of its own
    in a landfall.json."""
    prefix = f"canary/{prefix}/"
    for i, text in enumerate(separable_csv_shards(shards=2, rows_per_shard=50)):
        bucket.blob(f"{prefix}part-{i:05d}.csv").upload_from_string(text, content_type="text/csv")
    overrides = {"trainer": {"args": ["--seconds", "1", *args]}, "hyperparameters": {"batch_size": next(BATCHES)}}
    bucket.blob(f"{prefix}landfall.json").upload_from_string(json.dumps(overrides))
    marker = bucket.blob(f"{prefix}_SUCCESS")
    marker.upload_from_string(b"")
    return run_id_for(f"gcs:{bucket.name}/{prefix}:{marker.generation}")


def _doc(runs: Any, run_id: str) -> dict[str, Any]:
    snap = runs.document(run_id).get()
    return snap.to_dict() if snap.exists else {}


def _terminal(runs: Any, run_id: str, timeout_s: float = 120) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        doc = _doc(runs, run_id)
        return doc if doc and RunState(doc["state"]) in TERMINAL_STATES else None

    return wait_for(done, timeout_s, f"run {run_id} to end", step=0.2)


def _jobs_of(run_id: str) -> list[JobView]:
    from functions.wiring import vertex_jobs

    return [j for j in vertex_jobs().list_labelled(REGION) if j.labels.get(RUN_LABEL) == run_id]


def _canary_job(run_id: str, states: tuple[str, ...], timeout_s: float = 60) -> JobView:
    return wait_for(
        lambda: next((j for j in _jobs_of(run_id) if is_canary_job(j) and j.state in states), None),
        timeout_s,
        f"the canary job of {run_id} in {states}",
        step=0.1,
    )


def test_a_canary_runs_first_and_the_run_goes_on_is_planned_again_or_fails_by_what_it_measured(
    local_stack: stack.StackInfo,
    firestore_runs: Any,
    landing_bucket: Any,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    on_plan = _drop(landing_bucket, "e2e-on-plan")
    slow = _drop(landing_bucket, "e2e-slow", "--step-seconds", "0.5")
    failing = _drop(landing_bucket, "e2e-failing", "--fail-canary")
    docs = {run_id: _terminal(firestore_runs, run_id) for run_id in (on_plan, slow, failing)}

    # within the plan: the canary, then the long job on the same plan, the canary's figures on the run
    doc = docs[on_plan]
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    canary = doc["canary"]
    assert canary["status"] == "passed" and canary["planned_step_seconds"] == 0.25, canary
    assert canary["figures"]["steps"] == 8 and 0.25 <= canary["figures"]["step_seconds"] < 0.3125, canary
    jobs = _jobs_of(on_plan)
    assert sorted(is_canary_job(j) for j in jobs) == [False, True], [j.labels for j in jobs]
    long_job = next(j for j in jobs if not is_canary_job(j))
    assert doc["vertex"]["job_name"] == long_job.name and canary["job_name"] != long_job.name
    assert canary["job_id"] in doc["submission"]["job_ids"]
    states = [h["state"] for h in doc["history"]]
    assert states[:4] == ["RECEIVED", "PLANNED", "SUBMITTING", "SUBMITTED"] and states[-1] == "SUCCEEDED", states
    assert "SUBMITTING" in states[4:], states  # handed back to the dispatcher for the long job
    capsys.readouterr()
    assert cli.main(["run", on_plan]) == 0
    shown = capsys.readouterr().out
    assert "canary    passed: job" in shown and "within 25% of the plan" in shown and "canary passed" in shown

    # twice as slow as planned: planned again from the measured step time, and the plan says so
    doc = docs[slow]
    assert doc["state"] == "SUCCEEDED", doc.get("error")
    assert doc["canary"]["status"] == "replanned", doc["canary"]
    assert doc["canary"]["figures"]["step_seconds"] >= 0.5
    assert doc["plan"]["reasons"][0].startswith("planned again from the canary's measured figures"), doc["plan"]
    assert doc["plan"]["estimated_step_time_seconds"] >= 0.5 and doc["plan"]["estimated_hours"] > 4
    assert doc["cost"]["estimated_usd"] == doc["plan"]["estimated_cost_usd"]
    assert len(_jobs_of(slow)) == 2

    # a canary that fails: the run ends with its reason, and no long job is made
    doc = docs[failing]
    assert doc["state"] == "FAILED" and doc["error"]["code"] == "canary-failed", doc.get("error")
    assert doc["error"]["reason"] == "user-code" and doc["canary"]["status"] == "failed"
    assert [is_canary_job(j) for j in _jobs_of(failing)] == [True]

    # `landfall retry` of the run its canary failed: one new run, which runs a canary of its own first (the same
    # code fails it the same way: still no long job); a second retry starts nothing
    capsys.readouterr()
    assert cli.main(["retry", failing, "--json"]) == 0
    retried = json.loads(capsys.readouterr().out)
    assert retried["retry_of"] == failing and retried["run_id"] != failing
    assert cli.main(["retry", failing, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["already_retried"] is True
    again = _terminal(firestore_runs, retried["run_id"])
    assert again["state"] == "FAILED" and again["error"]["code"] == "canary-failed", again.get("error")
    assert again["canary"]["status"] == "failed" and again["canary"]["job_name"] != doc["canary"]["job_name"]
    assert [is_canary_job(j) for j in _jobs_of(retried["run_id"])] == [True]
    assert _doc(firestore_runs, failing)["retried_by"] == retried["run_id"]


def test_cancel_and_the_reconciler_hold_for_a_run_in_its_canary_step(
    local_stack: stack.StackInfo, firestore_runs: Any, landing_bucket: Any, cli_env: None
) -> None:
    # With the listener stopped, every job event is missed: each canary's end is recorded by a reconcile pass.
    listener = next(s for s in stack.read_state(local_stack.state_dir) if s.name == "on_job_event")
    processes.stop(listener)
    try:
        cancelled = _drop(landing_bucket, "e2e-cancel", "--canary-seconds", "60")
        missed = _drop(landing_bucket, "e2e-listener-down")
        running = _canary_job(cancelled, ("JOB_STATE_RUNNING",))
        wait_for(lambda: _doc(firestore_runs, cancelled).get("canary"), 30, f"run {cancelled} to name its canary")
        assert cli.main(["cancel", cancelled, "--by", "e2e"]) == 0
        ended = _canary_job(missed, ENDED, timeout_s=60)
        assert ended.state == "JOB_STATE_SUCCEEDED"
        assert cli.main(["reconcile"]) == 0
        # the reconciler recorded the canary's end and the dispatcher submitted the long job, with no listener
        doc = wait_for(
            lambda: (
                (d := _doc(firestore_runs, missed)).get("canary", {}).get("status") == "passed"
                and d.get("vertex")
                and d
            ),
            60,
            f"run {missed}'s canary finished by a reconcile pass",
        )
        assert doc["vertex"]["job_name"] != ended.name
        doc = _terminal(firestore_runs, cancelled, timeout_s=60)
        assert doc["state"] == "CANCELLED" and doc["canary"]["status"] == "cancelled", doc
        assert doc["error"]["reason"] == "cancelled" and doc["submission"]["cancel"]["by"] == "e2e"
        assert [(j.name, j.state) for j in _jobs_of(cancelled)] == [(running.name, "JOB_STATE_CANCELLED")]
    finally:
        stack.restart("on_job_event", state_dir=local_stack.state_dir)
    doc = _terminal(firestore_runs, missed, timeout_s=90)
    assert doc["state"] == "SUCCEEDED" and len(_jobs_of(missed)) == 2, doc.get("error")
