"""On the emulators: the reconciler's watermark in Firestore and its one ListCustomJobs per region on
the Vertex emulator (real jobs, whose replicas are processes there; calls counted by the emulator itself). A first
pass with no watermark lists every job changed since the oldest open run; the watermark it stores survives in
Firestore (read back by a new client); the next pass reads no job that did not change, and a job changed since the
last pass is found by the list and recorded on its run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from deploy.vertex_emulator.control import get_faults, set_faults
from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import RUN_LABEL, VertexJobs
from functions.gcp.watermarks_store import WatermarksStore
from functions.listener.handler import ListenerDeps
from functions.reconciler.changes import ChangeDeps
from functions.reconciler.handler import OPEN_STATES, ReconcilerDeps, _reconcile
from functions.records.attempts import AttemptPolicy
from schemas.reconcile_watermark import watermark_id
from schemas.run_record import RunState, VertexJobRef, new_run
from schemas.times import parse_timestamp
from tests.conftest import PROJECT
from tests.polling import wait_for

REGION = "us-central1"
COLLECTION = "reconciler"


@pytest.fixture(scope="module")
def vertex_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.integration.vertex_emulator.harness import launch_emulator

    folder = tmp_path_factory.mktemp("vertex-watermark")
    process = launch_emulator(folder / "state", folder / "emulator.log")
    yield process
    process.stop()


def calls(address: str) -> Counter[str]:
    """JobService calls the emulator answered since its fault plan was last set, by method."""
    answered = get_faults(address)["calls"]
    assert isinstance(answered, dict), answered
    counted: Counter[str] = Counter()
    for key, seen in answered.items():
        assert isinstance(seen, dict), seen
        counted[str(key).split(" ")[0]] += int(seen["calls"])
    return counted


def reconciler(runs: RunsStore, vertex: VertexJobs, client: Any) -> ReconcilerDeps:
    clock = lambda: datetime.now(UTC)  # noqa: E731 - the emulator stamps jobs with the real clock
    return ReconcilerDeps(
        open_runs=lambda: runs.in_states(OPEN_STATES),
        vertex=vertex,
        listener=ListenerDeps(store=runs, vertex=vertex, read_text=lambda uri: None, now=clock),
        resubmit=lambda run_id: "unused",
        policy=AttemptPolicy(),
        lease_seconds=120,
        now=clock,
        changes=ChangeDeps(watermarks=WatermarksStore(client, COLLECTION), overlap_seconds=1),
    )


def test_the_watermark_survives_in_firestore_and_only_changed_jobs_are_read(
    clean_firestore: Any, vertex_emulator: Any, tmp_path: Path
) -> None:
    from google.cloud import aiplatform_v1, firestore

    from tests.integration.vertex_emulator.harness import probe_job, probe_pool

    client = firestore.Client(project=PROJECT)
    runs = RunsStore(client, "runs")
    vertex = VertexJobs(PROJECT, lambda region: vertex_emulator.client)
    earlier = datetime.now(UTC) - timedelta(minutes=1)  # the runs were recorded before any pass
    jobs = {}
    for run_id in ("run-wm-changes", "run-wm-steady"):
        spec = probe_job([probe_pool(tmp_path / run_id, "--sleep", "60")], labels={RUN_LABEL: run_id})
        job = vertex.create(REGION, spec)
        vertex_emulator.wait_state(job.name, aiplatform_v1.JobState.JOB_STATE_RUNNING)
        ref = VertexJobRef(job.name, job.job_id, REGION, job.display_name, "JOB_STATE_RUNNING")
        runs.create_if_absent(replace(new_run(run_id, {"task": "t"}, now=earlier), state=RunState.RUNNING, vertex=ref))
        jobs[run_id] = job.name

    set_faults(vertex_emulator.address, {})  # counts from here
    first = _reconcile(reconciler(runs, vertex, client))
    # No watermark yet: a full pass, by one list of every job changed since the oldest open run (no job read).
    assert "vertex-full=1" in first and first.startswith("unchanged=2"), first
    assert calls(vertex_emulator.address) == Counter({"ListCustomJobs": 1})

    fresh = firestore.Client(project=PROJECT)  # another instance: the watermark is read back from Firestore
    stored = WatermarksStore(fresh, COLLECTION).get_many([watermark_id(0, 1)])[watermark_id(0, 1)]
    assert parse_timestamp(stored.regions[REGION], field="regions") > earlier

    set_faults(vertex_emulator.address, {})
    second = _reconcile(reconciler(runs, vertex, fresh))
    assert "vertex-full" not in second and second == "unchanged=2", second
    assert calls(vertex_emulator.address) == Counter({"ListCustomJobs": 1})  # neither unchanged job is read

    vertex.cancel(jobs["run-wm-changes"])
    wait_for(lambda: vertex.get(jobs["run-wm-changes"]).state == "JOB_STATE_CANCELLED", 60, what="the job cancelled")
    set_faults(vertex_emulator.address, {})
    third = _reconcile(reconciler(runs, vertex, fresh))
    assert "recorded:CANCELLED=1" in third and "unchanged=1" in third, third
    assert calls(vertex_emulator.address) == Counter({"ListCustomJobs": 1})  # found by the list, not read
    changed, steady = runs.get("run-wm-changes"), runs.get("run-wm-steady")
    assert changed is not None and changed.state == RunState.CANCELLED
    assert steady is not None and steady.state == RunState.RUNNING
    vertex.cancel(jobs["run-wm-steady"])
