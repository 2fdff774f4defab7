"""Bounded records on the emulators: a run refused capacity everywhere for 24 rounds (the Vertex emulator answering
every CreateCustomJob RESOURCE_EXHAUSTED), through the dispatcher's handler and the reconciler's pass as deployed,
its record written by RunsStore into the Firestore emulator. Every document read back with the stock client stays
under DOCUMENT_BOUND_BYTES, measured as Firestore measures a document
(https://cloud.google.com/firestore/docs/storage-size); before the bounds this run's record reached about 1 MiB by
its 40th round (every refusal copied into each history entry, every attempt with its plan and 25 alternatives). Its
history reaches its bound (HISTORY_HEAD + HISTORY_TAIL entries) at round 12, so 24 rounds show the document has
stopped growing; before the bounds it grew by tens of KB a round.
The 200-round run against the fakes: tests/unit/test_record_bounds.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from deploy.topology import load_topology
from deploy.vertex_emulator import control
from functions.dispatch.handler import DispatchDeps, attempt_policy, handle_training_request, resubmit
from functions.envelopes import PubSubMessage
from functions.gcp.datasets_store import DatasetsStore
from functions.gcp.orphans_store import OrphansStore
from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import VertexJobs
from functions.listener.handler import ListenerDeps
from functions.reconciler.handler import OPEN_STATES, ReconcilerDeps, _reconcile
from functions.reconciler.orphans import OrphanDeps
from functions.reconciler.republish import RepublishDeps
from functions.records.dataset_versions import VersionOutcome
from functions.records.leases import ClaimOutcome
from schemas.dataset_record import VersionStatus, parse_dataset_record
from schemas.dataset_version import parse_dataset_version
from schemas.plan import Plan
from schemas.record_bounds import ALTERNATIVES_KEPT, DOCUMENT_BOUND_BYTES, HISTORY_HEAD, HISTORY_TAIL, document_size
from schemas.run_record import RunState
from schemas.times import parse_timestamp
from tests.conftest import PROJECT
from tests.fakes.ingest import Clock
from tests.fakes.world import FALLBACK_1, FALLBACK_2, NOW, PLAN, REQUEST, REQUEST_JSON, SETTINGS, Outcome

ROUNDS = 24
EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"
TOPOLOGY = load_topology()
REGIONS = (PLAN.region, FALLBACK_1.region, FALLBACK_2.region)


@pytest.fixture(scope="module")
def vertex_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.integration.vertex_emulator.harness import launch_emulator

    folder = tmp_path_factory.mktemp("vertex-bounds")
    process = launch_emulator(folder / "state", folder / "emulator.log")
    yield process
    process.stop()


def stored(snapshot: Any) -> dict[str, Any]:
    """A document as the stock client reads it; fails the test when it does not exist."""
    assert snapshot.exists, f"{snapshot.reference.path} was not written"
    return dict(snapshot.to_dict())


def _dataset_landed(datasets: DatasetsStore, now: datetime) -> None:
    """The run's dataset and dataset version as ingest stores them (its request published, not answered yet)."""
    example = parse_dataset_version(json.loads((EXAMPLES / "dataset_version.json").read_text()))
    version = replace(
        example,
        run_id=REQUEST.run_id,
        idempotency_key=REQUEST.idempotency_key,
        status=VersionStatus.CLAIMED,
        answered=None,
        answered_at=None,
        republished_count=0,
        last_republished_at=None,
        last_republished_message_id=None,
    )
    claim = datasets.claim_version(version, owner="ingest-1", now=now, lease_seconds=60)
    assert claim.outcome == ClaimOutcome.CLAIMED
    assert datasets.finish_version(
        REQUEST.run_id,
        owner="ingest-1",
        status=VersionStatus.PUBLISHED,
        now=now,
        outcome=VersionOutcome(
            message_id="1", request=REQUEST.to_dict(), reason="", content_key=example.content_key, answered=False
        ),
    )
    dataset = parse_dataset_record(json.loads((EXAMPLES / "dataset_record.json").read_text()))
    assert datasets.save_dataset(replace(dataset, dataset_id=version.dataset_id))


def _with_alternatives(plan: Plan) -> Plan:
    """The plan with as many alternatives as the planner lists (PlannerConfig.max_alternatives, 25)."""
    (one,) = plan.alternatives[:1]
    return replace(plan, alternatives=tuple(replace(one, rank=i + 1) for i in range(25)), alternatives_considered=40)


def test_rounds_of_refusals_keep_every_document_under_its_bound_on_the_emulators(
    clean_firestore: Any, vertex_emulator: Any
) -> None:
    from google.cloud import firestore

    client = firestore.Client(project=PROJECT)
    runs = RunsStore(client, TOPOLOGY.runs_collection)
    datasets = DatasetsStore(client, TOPOLOGY.datasets_collection, TOPOLOGY.dataset_versions_collection)
    _dataset_landed(datasets, NOW)
    vertex = VertexJobs(PROJECT, lambda region: vertex_emulator.client)
    control.set_faults(vertex_emulator.address, {"quota_exhausted": [{}]})  # every region, every shape
    clock = Clock(NOW)
    outcome = Outcome(_with_alternatives(PLAN), tuple(_with_alternatives(p) for p in (FALLBACK_1, FALLBACK_2)))
    settings = replace(SETTINGS, wait_give_up_seconds=10**9)
    dispatch = DispatchDeps(settings=settings, store=runs, vertex=vertex, plan=lambda request: outcome, now=clock)
    reconciler = ReconcilerDeps(
        open_runs=lambda: runs.in_states(OPEN_STATES),
        vertex=vertex,
        listener=ListenerDeps(store=runs, vertex=vertex, read_text=lambda uri: None, now=clock),
        resubmit=lambda run_id: resubmit(run_id, dispatch),
        policy=attempt_policy(settings),
        lease_seconds=settings.submission_lease_seconds,
        now=clock,
        orphans=OrphanDeps(
            store=OrphansStore(client, TOPOLOGY.orphans_collection),
            runs=runs.get_many,
            regions=REGIONS,
            cancel=True,
            grace_seconds=settings.submission_lease_seconds,
        ),
        republish=RepublishDeps(
            versions=datasets, runs=runs.get_many, publish=lambda data: "unused", grace_seconds=600
        ),
    )
    try:
        said = handle_training_request(PubSubMessage(data=REQUEST_JSON, message_id="m-1"), dispatch)
        assert said == "waiting:no-capacity"
        path = f"{TOPOLOGY.runs_collection}/{REQUEST.run_id}"
        sizes = []
        for number in range(1, ROUNDS + 1):
            run = runs.get(REQUEST.run_id)
            assert run is not None and run.submission.waiting is not None
            clock.now = parse_timestamp(run.submission.waiting.retry_at)
            said = _reconcile(reconciler)
            assert "resubmitted=1" in said and "republished" not in said, f"round {number}: {said}"
            sizes.append(document_size(path, stored(client.document(path).get())))
            assert sizes[-1] < DOCUMENT_BOUND_BYTES, f"round {number}: the run is {sizes[-1]} bytes"
    finally:
        control.set_faults(vertex_emulator.address, {})
    checked = []
    for collection in (TOPOLOGY.datasets_collection, TOPOLOGY.dataset_versions_collection, TOPOLOGY.orphans_collection):
        for snapshot in client.collection(collection).stream():
            checked.append(f"{collection}/{snapshot.id}")
            size = document_size(f"{collection}/{snapshot.id}", stored(snapshot))
            assert size < DOCUMENT_BOUND_BYTES, f"{collection}/{snapshot.id} is {size} bytes"
    assert len(checked) == 2, checked  # the dataset and its version (the run accounts for every job: no orphan)
    version = datasets.version(REQUEST.run_id)
    assert version is not None and version.answered  # the reconciler found the run and marked it answered
    run = runs.get(REQUEST.run_id)
    assert run is not None and run.state == RunState.WAITING
    assert run.submission.refusals is not None and run.submission.refusals.refused == 3 * (ROUNDS + 1)
    assert run.plan is not None and len(run.plan.alternatives) == ALTERNATIVES_KEPT
    assert len(run.history) == HISTORY_HEAD + HISTORY_TAIL and run.history_omitted == 4 + 2 * ROUNDS - len(run.history)
    assert sizes[-1] - sizes[ROUNDS // 2] < 100, sizes  # it stopped growing
    print(f"run document after {ROUNDS} rounds: {sizes[-1]} bytes (largest {max(sizes)}; bound {DOCUMENT_BOUND_BYTES})")


def test_the_size_counts_the_document_as_stored(clean_firestore: Any) -> None:
    """Times come back from Firestore as timestamps (8 bytes), text as text: the size of what the client reads."""
    from google.cloud import firestore

    client = firestore.Client(project=PROJECT)
    doc = {"at": parse_timestamp("2026-11-22T12:00:00Z"), "text": "ab", "n": 1, "list": [True, None]}
    client.document("sizes/one").set(doc)
    read = stored(client.document("sizes/one").get())
    assert (
        document_size("sizes/one", read)
        == document_size("sizes/one", doc)
        == (6 + 4 + 16) + (3 + 8 + 5 + 3 + 2 + 8 + 5 + 1 + 1) + 32
    )


def test_metrics_as_stored_are_taken_by_firestore_and_read_back_as_written(clean_firestore: Any) -> None:
    """A team's metrics.json 30 levels deep, with a 1.5 MB value, thousands of fields, nested arrays and NaN: the
    emulator refuses the run document that holds it as written (depth past 20, a value past 1 MiB), and takes it as
    stored_metrics keeps it, which reads back with the stock client as written."""
    from google.api_core import exceptions as gexc
    from google.cloud import firestore

    from schemas.run_metrics import stored_metrics
    from schemas.run_record import new_run, parse_run_record

    deep: dict[str, Any] = {"loss": 0.5}
    for _ in range(30):
        deep = {"level": deep}
    metrics: dict[str, Any] = {
        "final": {"loss": float("nan"), "accuracy": 0.9, "note": "x" * 1_500_000},
        "curve": [[1, 0.5]],
        "deep": deep,
        "fields": {f"f{i}": i for i in range(5_000)},
    }
    client = firestore.Client(project=PROJECT)
    runs = RunsStore(client, TOPOLOGY.runs_collection)
    run = new_run(REQUEST.run_id, REQUEST.to_dict(), now=NOW)
    for written in ({"metrics": {"deep": deep}}, {"metrics": {"note": metrics["final"]["note"]}}):
        with pytest.raises(gexc.InvalidArgument):
            client.document(f"{TOPOLOGY.runs_collection}/as-written").set({**run.to_document(), **written})
    kept, notes = stored_metrics(metrics)
    bounded = replace(run.warned(notes), metrics=kept)
    runs.create_if_absent(bounded)
    read = stored(client.document(f"{TOPOLOGY.runs_collection}/{REQUEST.run_id}").get())
    assert parse_run_record(read) == bounded and len(bounded.warnings) == len(notes) >= 4
