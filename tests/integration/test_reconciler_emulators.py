"""The reconciler's looks for orphan jobs and unanswered dataset versions, through the real adapters: the
runs, orphans and dataset versions stores on the Firestore emulator and VertexJobs on the Vertex emulator (a job's
replicas are real processes there). Two passes find each orphan once, cancel it once, republish a version once."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from functions.gcp.datasets_store import DatasetsStore
from functions.gcp.orphans_store import OrphansStore
from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import RUN_LABEL, VertexJobs
from functions.listener.handler import ListenerDeps
from functions.reconciler.handler import OPEN_STATES, ReconcilerDeps, _reconcile
from functions.reconciler.orphans import OrphanDeps
from functions.reconciler.republish import RepublishDeps
from functions.records.attempts import AttemptPolicy
from functions.records.dataset_versions import VersionOutcome
from schemas.dataset_record import VersionStatus
from schemas.orphan_record import OrphanKind, orphan_id_for
from schemas.run_record import RunState, VertexJobRef, new_run
from schemas.training_request import parse_training_request
from tests.conftest import PROJECT
from tests.fakes.ingest import version_stub
from tests.polling import wait_for

REGION = "us-central1"
EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"


@pytest.fixture(scope="module")
def vertex_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.integration.vertex_emulator.harness import launch_emulator

    folder = tmp_path_factory.mktemp("vertex-reconciler")
    process = launch_emulator(folder / "state", folder / "emulator.log")
    yield process
    process.stop()


@pytest.fixture
def stores(clean_firestore: Any) -> tuple[RunsStore, OrphansStore, DatasetsStore]:
    from google.cloud import firestore

    client = firestore.Client(project=PROJECT)
    return (
        RunsStore(client, "runs"),
        OrphansStore(client, "orphans"),
        DatasetsStore(client, "datasets", "dataset_versions"),
    )


def deps(
    runs: RunsStore,
    vertex: VertexJobs,
    *,
    orphans: OrphanDeps | None = None,
    republish: RepublishDeps | None = None,
    now: Any = None,
) -> ReconcilerDeps:
    clock = now or (lambda: datetime.now(UTC))
    listener = ListenerDeps(store=runs, vertex=vertex, read_text=lambda uri: None, now=clock)
    return ReconcilerDeps(
        open_runs=tuple,
        vertex=vertex,
        listener=listener,
        resubmit=lambda run_id: "unused",
        policy=AttemptPolicy(),
        lease_seconds=120,
        now=clock,
        orphans=orphans,
        republish=republish,
    )


def _sleeping_job(vertex: VertexJobs, run_id: str, out: Path) -> str:
    from tests.integration.vertex_emulator.harness import probe_job, probe_pool

    job = probe_job([probe_pool(out, "--sleep", "60")], display_name=f"landfall-{run_id}", labels={RUN_LABEL: run_id})
    return vertex.create(REGION, job).name


def test_two_passes_record_an_orphan_once_and_cancel_it_once_on_the_vertex_emulator(
    stores: tuple[RunsStore, OrphansStore, DatasetsStore], vertex_emulator: Any, tmp_path: Path
) -> None:
    runs, orphans, _ = stores
    vertex = VertexJobs(PROJECT, lambda region: vertex_emulator.client)
    ghost = _sleeping_job(vertex, "run-ghost-e1", tmp_path / "ghost")
    owned = _sleeping_job(vertex, "run-owned-e1", tmp_path / "owned")
    runs.create_if_absent(new_run("run-owned-e1", {"task": "t"}, now=datetime.now(UTC)))
    ref = VertexJobRef(job_name=owned, job_id=owned.rsplit("/", 1)[-1], region=REGION)
    for state in (RunState.PLANNED, RunState.SUBMITTING):
        runs.transition("run-owned-e1", state, now=datetime.now(UTC))
    runs.transition("run-owned-e1", RunState.SUBMITTED, now=datetime.now(UTC), change=lambda r: replace(r, vertex=ref))
    look = OrphanDeps(store=orphans, runs=runs.get_many, regions=(REGION,), cancel=True, grace_seconds=0)
    first = _reconcile(deps(runs, vertex, orphans=look))
    second = _reconcile(deps(runs, vertex, orphans=look))
    assert "orphan=1" in first and "orphan-cancelled=1" in first, first
    assert "orphan" not in second, second
    record = orphans.get(orphan_id_for(ghost))
    assert record is not None and (record.kind, record.run_id, record.region) == (
        OrphanKind.NO_RUN,
        "run-ghost-e1",
        REGION,
    )
    assert record.cancel is not None and record.cancel.outcome == "asked"
    assert orphans.get(orphan_id_for(owned)) is None and [o.job_name for o in orphans.list()] == [ghost]
    ended = ("JOB_STATE_CANCELLED", "JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED")
    assert wait_for(lambda: vertex.get(ghost).state in ended, 60, what="the orphan cancelled")
    assert vertex.get(ghost).state == "JOB_STATE_CANCELLED"
    assert vertex.get(owned).state not in ended, "the run's own job is left running"
    vertex.cancel(owned)
    wait_for(lambda: vertex.get(owned).state in ended, 60, what="the run's job stopped")


def test_an_unanswered_version_is_republished_once_then_answered_on_the_firestore_emulator(
    stores: tuple[RunsStore, OrphansStore, DatasetsStore], vertex_emulator: Any
) -> None:
    runs, _, datasets = stores
    vertex = VertexJobs(PROJECT, lambda region: vertex_emulator.client)
    request = parse_training_request((EXAMPLES / "training_request.json").read_bytes())
    t0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    version_id = request.run_id
    datasets.claim_version(
        replace(version_stub(version_id), idempotency_key=request.idempotency_key),
        owner="ingest",
        now=t0,
        lease_seconds=60,
    )
    assert datasets.finish_version(
        version_id,
        owner="ingest",
        status=VersionStatus.PUBLISHED,
        now=t0,
        outcome=VersionOutcome(message_id="1", request=request.to_dict(), answered=False),
    )
    published: list[bytes] = []

    def publish(data: bytes) -> str:
        published.append(data)
        return str(len(published) + 1)

    now = [t0 + timedelta(seconds=601)]
    look = RepublishDeps(versions=datasets, runs=runs.get_many, publish=publish, grace_seconds=600)
    assert _reconcile(deps(runs, vertex, republish=look, now=lambda: now[0])) == "republished=1"
    assert _reconcile(deps(runs, vertex, republish=look, now=lambda: now[0])) == "no open runs"
    assert published == [request.to_json()]
    version = datasets.version(version_id)
    assert version is not None and (version.republished_count, version.last_republished_message_id) == (1, "2")
    runs.create_if_absent(new_run(request.run_id, request.to_dict(), now=now[0]))  # the dispatcher got it
    now[0] += timedelta(seconds=601)
    assert _reconcile(deps(runs, vertex, republish=look, now=lambda: now[0])) == "answered=1"
    now[0] += timedelta(days=1)
    assert _reconcile(deps(runs, vertex, republish=look, now=lambda: now[0])) == "no open runs"
    answered = datasets.version(version_id)
    assert len(published) == 1 and answered is not None and answered.answered is True


def test_a_stored_run_the_reader_refuses_is_marked_and_the_pass_reconciles_the_other_on_the_firestore_emulator(
    stores: tuple[RunsStore, OrphansStore, DatasetsStore],
) -> None:
    runs, _, _ = stores
    t0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    runs.create_if_absent(new_run("run-a-unreadable", {"task": "t"}, now=t0))
    runs.create_if_absent(new_run("run-b-lost", {"task": "t"}, now=t0))  # RECEIVED, its delivery gone
    ref = runs._ref("run-a-unreadable")
    ref.update({"state": "RUNNING", "cost": {"estimated_usd": "a lot"}})  # a value the reader refuses
    before = ref.get().to_dict()
    taken: list[str] = []

    def take_over(run_id: str) -> str:
        taken.append(run_id)
        return "submitted"

    now = [t0 + timedelta(hours=1)]
    never = VertexJobs(PROJECT, lambda region: pytest.fail("no Vertex call is needed"))
    look = replace(
        deps(runs, never, now=lambda: now[0]),
        open_runs=lambda: runs.in_states_or_unreadable(OPEN_STATES),
        resubmit=take_over,
        marks=runs,
    )
    assert _reconcile(look) == "error=1 resubmitted=1"
    assert taken == ["run-b-lost"], "the readable run is taken over"
    now[0] += timedelta(minutes=1)
    assert _reconcile(look) == "error=1 resubmitted=1"
    after = ref.get().to_dict()
    mark = after.pop("reconcile_errors")
    assert after == before, "only the mark is written"
    assert mark["count"] == 2 and mark["first_seen"] < mark["last_seen"], mark
    assert mark["last_error"].startswith("its document cannot be read: run.cost.estimated_usd"), mark
    ref.update({"cost": {}})  # repaired: the next pass reconciles it and removes the mark
    assert _reconcile(look) == "resubmitted=1 unchanged=1"
    assert "reconcile_errors" not in ref.get().to_dict()
