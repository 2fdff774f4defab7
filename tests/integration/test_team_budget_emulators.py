"""Through the real adapters: a run whose cost while running (time since its job started x its
plan's hourly price) passes its own constraints.budget_usd is cancelled by the reconciler with that reason, exactly
once: the runs store on the Firestore emulator, its job a real process on the Vertex emulator. The reconciler's
clock is moved an hour on (the planner only accepts a budget that covers the plan's estimate, so a run passes it
only by running long past its estimate)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import RUN_LABEL, VertexJobs
from functions.listener.handler import ListenerDeps
from functions.reconciler.handler import ReconcilerDeps, reconcile_run
from functions.records.attempts import AttemptPolicy
from schemas.run_record import RunState, VertexJobRef, new_run
from tests.conftest import PROJECT
from tests.fakes.ingest import Clock
from tests.fakes.world import PLAN
from tests.polling import wait_for

REGION = "us-central1"
ENDED = ("JOB_STATE_CANCELLED", "JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED")


@pytest.fixture(scope="module")
def vertex_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.integration.vertex_emulator.harness import launch_emulator

    folder = tmp_path_factory.mktemp("vertex-team-budget")
    process = launch_emulator(folder / "state", folder / "emulator.log")
    yield process
    process.stop()


def test_a_run_over_its_own_budget_while_running_is_cancelled_once_with_that_reason(
    clean_firestore: Any, vertex_emulator: Any, tmp_path: Path
) -> None:
    from google.cloud import firestore

    from tests.integration.vertex_emulator.harness import probe_job, probe_pool

    runs = RunsStore(firestore.Client(project=PROJECT), "runs")
    vertex = VertexJobs(PROJECT, lambda region: vertex_emulator.client)
    clock = Clock(datetime.now(UTC))
    run_id = "run-over-budget-1"
    job = probe_job(
        [probe_pool(tmp_path / "job", "--sleep", "120")], display_name=f"landfall-{run_id}", labels={RUN_LABEL: run_id}
    )
    name = vertex.create(REGION, job).name
    budget = PLAN.hourly_cost_usd / 2  # half an hour of its machine
    runs.create_if_absent(new_run(run_id, {"constraints": {"budget_usd": budget}}, now=clock.now))
    ref = VertexJobRef(job_name=name, job_id=name.rsplit("/", 1)[-1], region=REGION)
    for state in (RunState.PLANNED, RunState.SUBMITTING):
        runs.transition(run_id, state, now=clock.now)
    runs.transition(run_id, RunState.SUBMITTED, now=clock.now, change=lambda r: replace(r, vertex=ref, plan=PLAN))
    listener = ListenerDeps(store=runs, vertex=vertex, read_text=lambda uri: None, now=clock)
    deps = ReconcilerDeps(
        open_runs=tuple,
        vertex=vertex,
        listener=listener,
        resubmit=lambda rid: "unused",
        policy=AttemptPolicy(),
        lease_seconds=120,
        now=clock,
    )

    def running() -> bool:
        run = runs.get(run_id)
        assert run is not None
        return reconcile_run(run, deps) == "recorded:RUNNING" or run.state == RunState.RUNNING

    wait_for(running, 60, what="the job to run and be recorded RUNNING")
    run = runs.get(run_id)
    assert run is not None and run.timings.started_at is not None
    assert reconcile_run(run, deps) != "budget-cancelled", "a few seconds of running are within its budget"
    clock.now += timedelta(hours=1)
    assert reconcile_run(run, deps) == "budget-cancelled"
    asked = runs.get(run_id)
    assert asked is not None and asked.submission.cancel is not None
    assert asked.submission.cancel.by.startswith("budget-exceeded: its cost while running")
    assert reconcile_run(asked, deps) != "budget-cancelled"  # the recorded request stands; nothing asked twice
    assert wait_for(lambda: vertex.get(name).state in ENDED, 60, what="the job cancelled")
    assert vertex.get(name).state == "JOB_STATE_CANCELLED"

    def ended() -> bool:
        now = runs.get(run_id)
        assert now is not None
        return reconcile_run(now, deps).startswith("recorded:CANCELLED") or now.state == RunState.CANCELLED

    wait_for(ended, 60, what="the run recorded CANCELLED")
    done = runs.get(run_id)
    assert done is not None and done.state == RunState.CANCELLED and done.error is not None
    assert done.error.code == "budget-exceeded" and "passed its constraints.budget_usd" in done.error.message
