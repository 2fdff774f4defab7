"""One contract, two implementations: each behaviour the unit tests rely on from a fake is checked on the fake and
on the real adapter against its emulator (runs and dataset versions: the Firestore emulator; Vertex: the Vertex
emulator). The fake half needs no emulator: `pytest tests/integration/test_adapter_contracts.py -k fake`.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from functions.errors import PermanentError, TransientError
from functions.gcp.datasets_store import DatasetsStore
from functions.gcp.orphans_store import OrphansStore
from functions.gcp.rate_limits_store import RateLimitsStore
from functions.gcp.runs_store import RunsStore
from functions.gcp.vertex import RUN_LABEL, CapacityError, RateLimitedError, VertexJobs, is_canary_job
from functions.records.dataset_versions import VersionOutcome
from functions.records.leases import Claim, ClaimOutcome
from schemas.canary import CANARY_LABEL, CANARY_LABEL_VALUE
from schemas.content_record import ContentRecord, parse_content_record
from schemas.dataset_record import DatasetRecord, DatasetStatus, VersionStatus, parse_dataset_record
from schemas.dataset_version import DatasetVersion, parse_dataset_version
from schemas.orphan_record import OrphanCancel, OrphanKind, OrphanRecord
from schemas.plan import parse_plan
from schemas.run_record import (
    RunRecord,
    RunState,
    SubmissionAttempt,
    VertexJobRef,
    new_run,
    parse_run_record,
)
from schemas.times import format_timestamp, parse_timestamp
from tests.conftest import PROJECT
from tests.fakes.ingest import FakeDatasets
from tests.fakes.orphans import FakeOrphans
from tests.fakes.rate_limits import FakeRateLimits
from tests.fakes.runs import FakeRuns
from tests.fakes.vertex import FakeVertex

EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"
T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
LEASE = 60
PLAN = parse_plan(json.loads((EXAMPLES / "plan_cpu.json").read_text()))
GOLDEN_RUN = json.loads((EXAMPLES / "run_record.json").read_text())


def _firestore() -> Any:
    from google.cloud import firestore

    return firestore.Client(project=PROJECT)


# The runs store ------------------------------------------------------------------------------------------------


@pytest.fixture(params=["fake", "firestore"])
def runs(request: pytest.FixtureRequest) -> RunsStore | FakeRuns:
    if request.param == "fake":
        return FakeRuns()
    request.getfixturevalue("clean_firestore")
    return RunsStore(_firestore(), "runs")


def _planned(store: RunsStore | FakeRuns, run_id: str = "run-c1") -> None:
    store.create_if_absent(new_run(run_id, {"task": "t"}, now=T0))
    store.transition(run_id, RunState.PLANNED, now=T0, change=lambda r: replace(r, plan=PLAN))


def test_runs_create_if_absent_keeps_the_first(runs: RunsStore | FakeRuns) -> None:
    first = new_run("run-c1", {"task": "first"}, now=T0)
    assert runs.create_if_absent(first) == (first, True)
    stored, created = runs.create_if_absent(new_run("run-c1", {"task": "second"}, now=T0 + timedelta(1)))
    assert (stored, created) == (first, False)
    assert runs.get("run-c1") == first and runs.get("run-absent") is None


def test_runs_store_every_part_of_a_record_as_it_was_written(runs: RunsStore | FakeRuns) -> None:
    golden = parse_run_record(copy.deepcopy(GOLDEN_RUN))
    runs.create_if_absent(golden)
    assert runs.get(golden.run_id) == golden


def test_runs_a_change_is_stored_exactly_fields_dropped_and_retyped_included(runs: RunsStore | FakeRuns) -> None:
    """The adapter writes only the fields a change touched (functions/gcp/firestore_tx.py changed_fields): a field
    the new record leaves out is deleted, and a value equal to the stored one but of another type (1 and 1.0, 1 and
    True) is written again; the document read back with the stock client is the record's document."""
    golden = parse_run_record(copy.deepcopy(GOLDEN_RUN))
    runs.create_if_absent(golden)
    later = T0 + timedelta(seconds=3)
    runs.merge(golden.run_id, lambda r: replace(r, metrics={"loss": 1, "done": 1, "gone": 3}), now=later)
    merged = runs.merge(
        golden.run_id, lambda r: replace(r, metrics={"loss": 1.0, "done": True}, plan=None, retry_of=None), now=later
    )
    assert merged is not None and merged.plan is None and runs.get(golden.run_id) == merged
    if isinstance(runs, RunsStore):
        stored = _firestore().collection("runs").document(golden.run_id).get().to_dict()
        assert stored == merged.to_document()
        assert {k: type(v) for k, v in stored["metrics"].items()} == {"loss": float, "done": bool}


def test_runs_transitions_only_move_forward(runs: RunsStore | FakeRuns) -> None:
    runs.create_if_absent(new_run("run-c1", {}, now=T0))
    later = T0 + timedelta(seconds=5)
    planned, changed = runs.transition(
        "run-c1", RunState.PLANNED, now=later, detail="p", change=lambda r: replace(r, plan=PLAN)
    )
    assert changed and planned is not None and planned.plan == PLAN
    assert [(h.state, h.at, h.detail) for h in planned.history][1:] == [("PLANNED", format_timestamp(later), "p")]
    back, changed = runs.transition("run-c1", RunState.RECEIVED, now=later, change=lambda r: replace(r, plan=None))
    assert not changed and back == planned and runs.get("run-c1") == planned
    again, changed = runs.transition("run-c1", RunState.PLANNED, now=later, change=lambda r: replace(r, metrics={}))
    assert changed and again is not None and len(again.history) == 2 and again.metrics == {}
    assert runs.transition("run-absent", RunState.PLANNED, now=later) == (None, False)
    assert runs.get("run-absent") is None


def test_runs_merge_changes_fields_not_state(runs: RunsStore | FakeRuns) -> None:
    _planned(runs)
    later = T0 + timedelta(seconds=9)
    merged = runs.merge("run-c1", lambda r: replace(r, metrics={"a": 1}), now=later)
    assert merged is not None and merged.state == RunState.PLANNED and merged.metrics == {"a": 1}
    assert merged.updated_at == format_timestamp(later) and runs.get("run-c1") == merged
    assert runs.merge("run-absent", lambda r: r, now=later) is None


def test_runs_claim_outcomes_and_lease_expiry(runs: RunsStore | FakeRuns) -> None:
    runs.create_if_absent(new_run("run-c1", {}, now=T0))
    assert runs.claim_submission("run-c1", owner="a", now=T0, lease_seconds=LEASE).outcome == ClaimOutcome.NOT_READY
    runs.transition("run-c1", RunState.PLANNED, now=T0, change=lambda r: replace(r, plan=PLAN))
    first = runs.claim_submission("run-c1", owner="a", now=T0, lease_seconds=LEASE)
    assert first.outcome == ClaimOutcome.CLAIMED and first.doc.state == RunState.SUBMITTING
    assert runs.get("run-c1") == first.doc and first.doc.submission.owner == "a"
    busy = runs.claim_submission("run-c1", owner="b", now=T0 + timedelta(seconds=LEASE - 1), lease_seconds=LEASE)
    assert busy.outcome == ClaimOutcome.BUSY and runs.get("run-c1") == first.doc
    late = T0 + timedelta(seconds=LEASE + 1)
    taken = runs.claim_submission("run-c1", owner="b", now=late, lease_seconds=LEASE)
    assert taken.outcome == ClaimOutcome.RECOVER and runs.get("run-c1") == taken.doc
    assert taken.doc.submission.owner == "b"
    assert parse_timestamp(taken.doc.submission.lease_until or "") == late + timedelta(seconds=LEASE)
    runs.transition("run-c1", RunState.SUBMITTED, now=late)
    assert runs.claim_submission("run-c1", owner="c", now=late, lease_seconds=LEASE).outcome == ClaimOutcome.DONE
    with pytest.raises(TransientError, match="does not exist yet"):
        runs.claim_submission("run-absent", owner="a", now=T0, lease_seconds=LEASE)


def test_runs_plan_claim_and_first_attempt_in_one_write(runs: RunsStore | FakeRuns) -> None:
    """The dispatcher's fast path: PLANNED, the claim and the first attempt land together, or (BUSY) not at all."""
    from functions.records.run_rules import transition

    runs.create_if_absent(new_run("run-c1", {}, now=T0))
    planned = transition(RunState.PLANNED, now=T0, change=lambda r: replace(r, plan=PLAN))

    def first(run: RunRecord) -> SubmissionAttempt:
        assert run.plan is not None
        return SubmissionAttempt(
            region=run.plan.region,
            machine_type=run.plan.machine_type,
            at=format_timestamp(T0),
            outcome="pending",
            plan=run.plan,
        )

    claim = runs.claim_submission("run-c1", owner="a", now=T0, lease_seconds=LEASE, first_attempt=first, before=planned)
    assert claim.outcome == ClaimOutcome.CLAIMED and runs.get("run-c1") == claim.doc
    assert [h.state for h in claim.doc.history] == [RunState.RECEIVED, RunState.PLANNED, RunState.SUBMITTING]
    assert [a.outcome for a in claim.doc.submission.attempts or ()] == ["pending"]
    again = runs.claim_submission("run-c1", owner="b", now=T0, lease_seconds=LEASE, first_attempt=first, before=planned)
    assert again.outcome == ClaimOutcome.BUSY and runs.get("run-c1") == claim.doc


def test_runs_find_by_job_id(runs: RunsStore | FakeRuns) -> None:
    _planned(runs)
    _planned(runs, "run-c2")
    assert runs.find_by_job_id("123") is None
    ref = VertexJobRef(job_name="projects/p/locations/us-central1/customJobs/123", job_id="123", region="us-central1")
    runs.transition("run-c2", RunState.SUBMITTING, now=T0)
    runs.transition("run-c2", RunState.SUBMITTED, now=T0, change=lambda r: replace(r, vertex=ref))
    found = runs.find_by_job_id("123")
    assert found is not None and found.run_id == "run-c2" and found.vertex == ref
    assert runs.find_by_job_id("124") is None


def test_runs_find_an_earlier_attempts_job_through_submission_job_ids(runs: RunsStore | FakeRuns) -> None:
    """A late event for the first job of a resubmitted run still finds the run (array-contains on job_ids)."""
    _planned(runs)
    ref = VertexJobRef(job_name="projects/p/locations/europe-west4/customJobs/222", job_id="222", region="europe-west4")
    runs.transition("run-c1", RunState.SUBMITTING, now=T0)
    runs.transition(
        "run-c1",
        RunState.SUBMITTED,
        now=T0,
        change=lambda r: replace(r, vertex=ref, submission=replace(r.submission, job_ids=("111", "222"))),
    )
    for job_id in ("111", "222"):
        found = runs.find_by_job_id(job_id)
        assert found is not None and found.run_id == "run-c1" and found.vertex == ref, job_id
    assert runs.find_by_job_id("11") is None and runs.find_by_job_id("333") is None


def test_runs_in_states_pages_through_every_matching_run_once(runs: RunsStore | FakeRuns) -> None:
    """Runs in the asked states, each once, across page boundaries (page_size smaller than the answer)."""
    wanted = set()
    for i in range(7):
        run_id = f"run-p{i}"
        _planned(runs, run_id)
        if i % 3 == 0:
            runs.transition(run_id, RunState.SUBMITTING, now=T0)
            wanted.add(run_id)
        elif i % 3 == 1:
            runs.transition(run_id, RunState.REJECTED, now=T0)
        else:
            wanted.add(run_id)
    for page_size in (1, 2, 3, 200):
        seen = [r.run_id for r in runs.in_states([RunState.PLANNED, RunState.SUBMITTING], page_size=page_size)]
        assert sorted(seen) == sorted(wanted) and len(seen) == len(set(seen)), page_size
    assert list(runs.in_states([RunState.WAITING], page_size=2)) == []
    states = {r.run_id: r.state for r in runs.in_states([RunState.REJECTED])}
    assert states == {"run-p1": RunState.REJECTED, "run-p4": RunState.REJECTED}


def test_runs_unannounced_lists_ended_runs_until_their_flag_is_set(runs: RunsStore | FakeRuns) -> None:
    from functions.records.results import marked_published

    for run_id in ("run-u1", "run-u2", "run-u3"):
        _planned(runs, run_id)
    runs.transition("run-u1", RunState.REJECTED, now=T0)
    runs.transition("run-u2", RunState.CANCELLED, now=T0)
    assert [r.run_id for r in runs.unannounced(page_size=1)] == ["run-u1", "run-u2"]
    assert runs.apply("run-u1", marked_published()) is True and runs.apply("run-u1", marked_published()) is False
    assert runs.apply("run-u3", marked_published()) is False  # not ended: nothing to announce
    assert [r.run_id for r in runs.unannounced()] == ["run-u2"]


def test_runs_get_many_reads_the_stored_ones_in_one_call(runs: RunsStore | FakeRuns) -> None:
    for run_id in ("run-m1", "run-m2"):
        _planned(runs, run_id)
    for batch in (1, 2, 100):
        found = runs.get_many(["run-m2", "run-absent", "run-m1", "run-m2"], batch=batch)
        assert found == {"run-m1": runs.get("run-m1"), "run-m2": runs.get("run-m2")}, batch
    assert runs.get_many([]) == {} and runs.get_many(["run-absent"]) == {}


# The dataset versions outbox -----------------------------------------------------------------------------------


@pytest.fixture(params=["fake", "firestore"])
def datasets(request: pytest.FixtureRequest) -> DatasetsStore | FakeDatasets:
    if request.param == "fake":
        return FakeDatasets()
    request.getfixturevalue("clean_firestore")
    return DatasetsStore(_firestore(), "datasets", "dataset_versions")


def _bare_version(example: dict[str, Any]) -> DatasetVersion:
    """The golden version as a delivery first builds it: not claimed, nothing recorded yet."""
    version = parse_dataset_version(example)
    return DatasetVersion(
        run_id="run-v1",
        idempotency_key="k",
        dataset_id=version.dataset_id,
        uri=version.uri,
        route=version.route,
        kind=version.kind,
        completed_by=version.completed_by,
        generation=version.generation,
        status=VersionStatus.CLAIMED,
        event_id=version.event_id,
    )


VERSION = _bare_version(json.loads((EXAMPLES / "dataset_version.json").read_text()))


def test_versions_claim_finish_and_expiry(datasets: DatasetsStore | FakeDatasets) -> None:
    first = datasets.claim_version(VERSION, owner="a", now=T0, lease_seconds=LEASE)
    assert first.outcome == ClaimOutcome.CLAIMED
    assert (first.doc.status, first.doc.owner, first.doc.attempts, first.doc.created_at) == (
        VersionStatus.CLAIMED,
        "a",
        1,
        format_timestamp(T0),
    )
    assert datasets.version("run-v1") == first.doc
    assert (
        datasets.claim_version(VERSION, owner="b", now=T0 + timedelta(seconds=LEASE - 1), lease_seconds=LEASE).outcome
        == ClaimOutcome.BUSY
    )
    late = T0 + timedelta(seconds=LEASE + 1)
    taken = datasets.claim_version(VERSION, owner="b", now=late, lease_seconds=LEASE)
    assert (taken.outcome, taken.doc.owner, taken.doc.attempts) == (ClaimOutcome.CLAIMED, "b", 2)
    assert not datasets.finish_version("run-v1", owner="a", status=VersionStatus.PUBLISHED, now=late)
    assert datasets.finish_version(
        "run-v1", owner="b", status=VersionStatus.PUBLISHED, now=late, outcome=VersionOutcome(message_id="9")
    )
    done = datasets.version("run-v1")
    assert done is not None and (done.status, done.message_id) == (VersionStatus.PUBLISHED, "9")
    assert datasets.claim_version(VERSION, owner="c", now=late, lease_seconds=LEASE).outcome == ClaimOutcome.DONE
    assert not datasets.finish_version("run-v1", owner="b", status=VersionStatus.REFUSED, now=late)


def test_versions_only_another_live_claim_stops_a_finish(datasets: DatasetsStore | FakeDatasets) -> None:
    datasets.claim_version(VERSION, owner="a", now=T0, lease_seconds=LEASE)
    taken_over = T0 + timedelta(seconds=LEASE + 1)
    datasets.claim_version(VERSION, owner="b", now=taken_over, lease_seconds=LEASE)
    # b died too: once its lease has run out, a's late outcome is still worth keeping.
    both_lapsed = taken_over + timedelta(seconds=LEASE + 1)
    assert datasets.finish_version(
        "run-v1", owner="a", status=VersionStatus.REFUSED, now=both_lapsed, outcome=VersionOutcome(reason="too small")
    )
    refused = datasets.version("run-v1")
    assert refused is not None and (refused.status, refused.reason) == (VersionStatus.REFUSED, "too small")


def test_versions_a_claim_given_back_can_be_taken_at_once(datasets: DatasetsStore | FakeDatasets) -> None:
    datasets.claim_version(VERSION, owner="a", now=T0, lease_seconds=LEASE)
    assert datasets.finish_version("run-v1", owner="a", status=VersionStatus.CLAIMED, now=T0)
    again = datasets.claim_version(VERSION, owner="b", now=T0, lease_seconds=LEASE)
    assert (again.outcome, again.doc.owner) == (ClaimOutcome.CLAIMED, "b")


def test_datasets_never_go_back_to_an_older_version(datasets: DatasetsStore | FakeDatasets) -> None:
    example = parse_dataset_record(json.loads((EXAMPLES / "dataset_record.json").read_text()))
    shown = example.version
    assert shown is not None

    def doc(generation: str, status: str) -> DatasetRecord:
        version = replace(shown, generation=generation)
        return replace(example, dataset_id="ds-1", status=DatasetStatus(status), version=version)

    assert datasets.save_dataset(doc("20", "REQUESTED"))
    assert not datasets.save_dataset(doc("19", "REFUSED"))
    assert datasets.datasets(["ds-1"])["ds-1"].status == "REQUESTED"
    assert datasets.save_dataset(doc("21", "WAITING"))
    assert datasets.datasets(["ds-1", "ds-absent"]) == {"ds-1": doc("21", "WAITING")}


def _published(datasets: DatasetsStore | FakeDatasets, run_id: str, *, at: datetime = T0) -> None:
    datasets.claim_version(replace(VERSION, run_id=run_id), owner="a", now=at, lease_seconds=LEASE)
    assert datasets.finish_version(
        run_id,
        owner="a",
        status=VersionStatus.PUBLISHED,
        now=at,
        outcome=VersionOutcome(request={"task": "t"}, answered=False),
    )


def test_versions_unanswered_ones_page_until_answered(datasets: DatasetsStore | FakeDatasets) -> None:
    for i in range(5):
        _published(datasets, f"run-a{i}")
    datasets.claim_version(replace(VERSION, run_id="run-claimed"), owner="a", now=T0, lease_seconds=LEASE)
    for page_size in (1, 2, 200):
        assert [d.run_id for d in datasets.unanswered_versions(page_size=page_size)] == [
            f"run-a{i}" for i in range(5)
        ], page_size
    assert datasets.mark_answered("run-a1", now=T0) and not datasets.mark_answered("run-a1", now=T0)
    assert not datasets.mark_answered("run-claimed", now=T0) and not datasets.mark_answered("run-absent", now=T0)
    assert [d.run_id for d in datasets.unanswered_versions(page_size=2)] == ["run-a0", "run-a2", "run-a3", "run-a4"]
    answered = datasets.version("run-a1")
    assert answered is not None and (answered.answered, answered.answered_at) == (True, format_timestamp(T0))


def test_versions_a_republish_is_claimed_once_per_grace_and_counted(datasets: DatasetsStore | FakeDatasets) -> None:
    _published(datasets, "run-r1")
    grace = 600
    assert not datasets.claim_republish("run-r1", now=T0 + timedelta(seconds=grace - 1), grace_seconds=grace)
    due = T0 + timedelta(seconds=grace)
    assert datasets.claim_republish("run-r1", now=due, grace_seconds=grace)
    assert not datasets.claim_republish("run-r1", now=due, grace_seconds=grace)
    assert datasets.count_republish("run-r1", message_id="42")
    version = datasets.version("run-r1")
    assert version is not None and (
        version.republished_count,
        version.last_republished_at,
        version.last_republished_message_id,
    ) == (1, format_timestamp(due), "42")
    assert datasets.claim_republish("run-r1", now=due + timedelta(seconds=grace), grace_seconds=grace)
    datasets.mark_answered("run-r1", now=due)
    assert not datasets.claim_republish("run-r1", now=due + timedelta(days=1), grace_seconds=grace)
    assert not datasets.claim_republish("run-absent", now=due, grace_seconds=grace)


CONTENT = replace(
    parse_content_record(json.loads((EXAMPLES / "content_record.json").read_text())),
    dataset_id="ds-1",
    digest="d" * 32,
    content_key="content:b/p/:" + "d" * 32,
    run_id="run-v1",
    idempotency_key="k1",
    generation="1",
    object_count=2,
    total_bytes=10,
)


def test_contents_the_first_version_holds_it_and_a_later_one_is_a_duplicate_once_published(
    datasets: DatasetsStore | FakeDatasets,
) -> None:
    datasets.claim_version(VERSION, owner="a", now=T0, lease_seconds=LEASE)
    first = datasets.claim_content(CONTENT, now=T0)
    assert (first.outcome, first.doc.run_id, first.doc.retrains) == (ClaimOutcome.CLAIMED, "run-v1", 0)
    assert datasets.claim_content(CONTENT, now=T0).outcome == ClaimOutcome.CLAIMED  # its own redelivery
    later = replace(CONTENT, run_id="run-v2", idempotency_key="k2", generation="2")
    assert datasets.claim_content(later, now=T0).outcome == ClaimOutcome.BUSY  # run-v1 is publishing right now
    datasets.finish_version("run-v1", owner="a", status=VersionStatus.PUBLISHED, now=T0)
    duplicate = datasets.claim_content(later, now=T0)
    assert (duplicate.outcome, duplicate.doc.run_id) == (ClaimOutcome.DONE, "run-v1")
    assert datasets.content("ds-1", "d" * 32) == first.doc


def test_contents_sixteen_versions_racing_for_a_new_content_let_one_hold_it(
    datasets: DatasetsStore | FakeDatasets,
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def race(i: int) -> Claim[ContentRecord]:
        run_id = f"run-race-{i}"
        datasets.claim_version(replace(VERSION, run_id=run_id), owner=f"o{i}", now=T0, lease_seconds=LEASE)
        return datasets.claim_content(replace(CONTENT, run_id=run_id, generation=str(i)), now=T0)

    with ThreadPoolExecutor(8) as pool:
        claims = list(pool.map(race, range(16)))
    holders = [c.doc.run_id for c in claims if c.outcome == ClaimOutcome.CLAIMED]
    assert len(holders) == 1
    assert {c.outcome for c in claims} == {ClaimOutcome.CLAIMED, ClaimOutcome.BUSY}
    held = datasets.content("ds-1", "d" * 32)
    assert held is not None and held.run_id == holders[0]


def test_contents_a_version_that_never_published_gives_way(datasets: DatasetsStore | FakeDatasets) -> None:
    datasets.claim_version(VERSION, owner="a", now=T0, lease_seconds=LEASE)
    datasets.claim_content(CONTENT, now=T0)
    later = replace(CONTENT, run_id="run-v2", generation="2")
    lapsed = T0 + timedelta(seconds=LEASE + 1)  # run-v1's delivery died mid-publish
    taken = datasets.claim_content(later, now=lapsed)
    assert (taken.outcome, taken.doc.run_id, taken.doc.generation) == (ClaimOutcome.CLAIMED, "run-v2", "2")
    datasets.claim_version(replace(VERSION, run_id="run-v2"), owner="b", now=lapsed, lease_seconds=LEASE)
    datasets.finish_version("run-v2", owner="b", status=VersionStatus.REFUSED, now=lapsed)
    third = datasets.claim_content(replace(CONTENT, run_id="run-v3"), now=lapsed)  # run-v2 was refused at publish
    assert (third.outcome, third.doc.run_id) == (ClaimOutcome.CLAIMED, "run-v3")


def test_contents_count_retrains_and_a_retrain_always_claims(datasets: DatasetsStore | FakeDatasets) -> None:
    assert datasets.count_retrain(CONTENT, now=T0).retrains == 1  # never seen: created, naming no run
    datasets.claim_version(VERSION, owner="a", now=T0, lease_seconds=LEASE)
    assert datasets.claim_content(CONTENT, now=T0).doc.run_id == "run-v1"
    datasets.finish_version("run-v1", owner="a", status=VersionStatus.PUBLISHED, now=T0)
    counted = datasets.count_retrain(CONTENT, now=T0)
    assert (counted.retrains, counted.run_id) == (2, "run-v1")
    retrained = datasets.claim_content(replace(CONTENT, run_id="run-r2"), now=T0, retrain=True)
    assert (retrained.outcome, retrained.doc.run_id, retrained.doc.retrains) == (
        ClaimOutcome.CLAIMED,
        "run-r2",
        2,
    )


# The orphans store --------------------------------------------------------------------------------------------


@pytest.fixture(params=["fake", "firestore"])
def orphans(request: pytest.FixtureRequest) -> OrphansStore | FakeOrphans:
    if request.param == "fake":
        return FakeOrphans()
    request.getfixturevalue("clean_firestore")
    return OrphansStore(_firestore(), "orphans")


def _orphan(job_id: str, found_at: datetime = T0) -> OrphanRecord:
    return OrphanRecord(
        job_name=f"projects/{PROJECT}/locations/us-central1/customJobs/{job_id}",
        job_id=job_id,
        region="us-central1",
        run_id="run-ghost",
        kind=OrphanKind.NO_RUN,
        reason="no run",
        job_state="JOB_STATE_RUNNING",
        job_created_at=format_timestamp(T0),
        found_at=format_timestamp(found_at),
    )


def test_orphans_recorded_once_and_a_cancel_claimed_once(orphans: OrphansStore | FakeOrphans) -> None:
    from functions.records.orphans import cancel_claimed, cancel_noted

    first = _orphan("11")
    assert orphans.record(first) and not orphans.record(replace(first, reason="again"))
    assert orphans.get(first.orphan_id) == first and orphans.get("us-central1-0") is None
    assert orphans.apply(first.orphan_id, cancel_claimed(now=T0))
    assert not orphans.apply(first.orphan_id, cancel_claimed(now=T0))
    assert orphans.apply(first.orphan_id, cancel_noted("asked"))
    stored = orphans.get(first.orphan_id)
    assert stored is not None and stored.cancel == OrphanCancel(at=format_timestamp(T0), outcome="asked")
    assert not orphans.apply("us-central1-0", cancel_claimed(now=T0))
    orphans.record(_orphan("12", T0 + timedelta(seconds=1)))
    assert [o.job_id for o in orphans.list()] == ["12", "11"]


# The Vertex adapter --------------------------------------------------------------------------------------------


@dataclass
class Vertex:
    """An adapter and the way to make its next CreateCustomJob in a region fail for capacity."""

    jobs: VertexJobs | FakeVertex
    exhaust_quota: Callable[[str], object]
    limit_rate: Callable[[str], object]
    """Make the next CreateCustomJob in a region fail for a per-minute request quota (a rate limit, not capacity)."""
    emulated: bool = False
    """True on the Vertex emulator, where a job's replicas are real processes."""


@pytest.fixture(scope="module")
def vertex_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.integration.vertex_emulator.harness import launch_emulator

    folder = tmp_path_factory.mktemp("vertex-contract")
    process = launch_emulator(folder / "state", folder / "emulator.log")
    yield process
    process.stop()


@pytest.fixture(params=["fake", "emulator"])
def vertex(request: pytest.FixtureRequest) -> Iterator[Vertex]:
    if request.param == "fake":
        fake = FakeVertex(PROJECT)
        yield Vertex(
            fake,
            lambda region: fake.refuse(region, gexc.ResourceExhausted("quota exhausted")),
            lambda region: fake.refuse(region, _rate_limited(region)),
        )
        return
    from deploy.vertex_emulator import control

    emulator = request.getfixturevalue("vertex_emulator")
    control.set_faults(emulator.address, {})
    yield Vertex(
        VertexJobs(PROJECT, lambda region: emulator.client),
        lambda region: control.set_faults(emulator.address, {"quota_exhausted": [{"region": region}]}),
        # a limit of 1 a minute in the region: once one CreateCustomJob has used it, the next is refused
        lambda region: control.set_faults(
            emulator.address, {"rate_limits": [{"method": "CreateCustomJob", "limit": 1, "region": region}]}
        ),
        emulated=True,
    )
    control.set_faults(emulator.address, {})


def _rate_limited(region: str) -> gexc.ResourceExhausted:
    """What Vertex answers a call over a per-minute request quota (as the emulator's rate_limits fault does)."""
    from google.rpc import error_details_pb2

    info = error_details_pb2.ErrorInfo(
        reason="RATE_LIMIT_EXCEEDED",
        domain="googleapis.com",
        metadata={"quota_metric": "aiplatform.googleapis.com/job_submission_requests", "quota_location": region},
    )
    return gexc.ResourceExhausted(
        "Quota exceeded for quota metric 'Job or LRO submission requests' and limit 'Job or LRO submission requests "
        f"per minute per region' of service 'aiplatform.googleapis.com' for consumer 'projects/{PROJECT}'.",
        details=[info],
        error_info=info,
    )


def _probe_job(run_id: str, out: Path) -> dict[str, Any]:
    from tests.integration.vertex_emulator.harness import probe_job, probe_pool

    return probe_job([probe_pool(out)], display_name=f"contract-{run_id}", labels={RUN_LABEL: run_id})


def test_vertex_create_get_and_find_by_run(vertex: Vertex, tmp_path: Path) -> None:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    created = vertex.jobs.create("europe-west4", _probe_job(run_id, tmp_path))
    assert created.name == f"projects/{PROJECT}/locations/europe-west4/customJobs/{created.job_id}"
    assert created.job_id.isdigit() and created.region == "europe-west4"
    assert created.display_name == f"contract-{run_id}" and created.labels[RUN_LABEL] == run_id
    assert created.state == "JOB_STATE_PENDING" and created.error_code == 0 and created.end_time == ""
    assert parse_timestamp(created.create_time) <= datetime.now(UTC)
    got = vertex.jobs.get(created.name)
    assert (got.name, got.job_id, got.region, got.labels) == (
        created.name,
        created.job_id,
        "europe-west4",
        created.labels,
    )
    found = vertex.jobs.find_by_run("europe-west4", run_id)
    assert found is not None and found.name == created.name
    assert vertex.jobs.find_by_run("us-central1", run_id) is None
    assert vertex.jobs.find_by_run("europe-west4", "run-never-submitted") is None


def test_vertex_list_changed_answers_jobs_updated_or_created_since(vertex: Vertex, tmp_path: Path) -> None:
    """The reconciler's list: labelled jobs updated at or after one time, or created at or after another."""
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    before = datetime.now(UTC) - timedelta(seconds=5)
    created = vertex.jobs.create("me-west1", _probe_job(run_id, tmp_path))
    stamp = format_timestamp
    future = stamp(datetime.now(UTC) + timedelta(hours=1))
    listed = vertex.jobs.list_changed("me-west1", updated_since=stamp(before), created_since=future)
    assert [j.name for j in listed] == [created.name]
    assert (
        vertex.jobs.list_changed("me-west1", updated_since=future, created_since=stamp(before))[0].name == created.name
    )
    assert vertex.jobs.list_changed("me-west1", updated_since=future, created_since=future) == []


def test_vertex_find_by_run_tells_a_runs_canary_from_its_long_job(vertex: Vertex, tmp_path: Path) -> None:
    """docs/canary.md: a recovering dispatcher looks for the job of the phase the run is in, by its label."""
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    assert vertex.jobs.find_by_run("europe-west4", run_id, canary=True) is None
    canary_spec = _probe_job(run_id, tmp_path / "canary")
    canary_spec["labels"] = {**canary_spec["labels"], CANARY_LABEL: CANARY_LABEL_VALUE}
    canary = vertex.jobs.create("europe-west4", canary_spec)
    assert vertex.jobs.find_by_run("europe-west4", run_id) is None, "the canary is not the long job"
    long = vertex.jobs.create("europe-west4", _probe_job(run_id, tmp_path / "long"))
    found_canary = vertex.jobs.find_by_run("europe-west4", run_id, canary=True)
    found_long = vertex.jobs.find_by_run("europe-west4", run_id)
    assert found_canary is not None and found_canary.name == canary.name and is_canary_job(found_canary)
    assert found_long is not None and found_long.name == long.name and not is_canary_job(found_long)


def test_vertex_capacity_and_refusals(vertex: Vertex, tmp_path: Path) -> None:
    vertex.exhaust_quota("us-central1")
    with pytest.raises(CapacityError, match="CreateCustomJob in us-central1: quota exhausted"):
        vertex.jobs.create("us-central1", _probe_job("run-capacity", tmp_path))
    assert vertex.jobs.find_by_run("us-central1", "run-capacity") is None
    name = f"projects/{PROJECT}/locations/us-central1/customJobs/999999999"
    with pytest.raises(PermanentError, match="NotFound"):
        vertex.jobs.get(name)


def test_vertex_a_rate_limit_is_not_capacity_and_creates_nothing(vertex: Vertex, tmp_path: Path) -> None:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    vertex.limit_rate("asia-east1")
    if vertex.emulated:  # the emulator's limit is 1 a minute: the first call uses it up
        vertex.jobs.create("asia-east1", _probe_job(f"{run_id}-first", tmp_path / "first"))
    with pytest.raises(RateLimitedError) as refused:
        vertex.jobs.create("asia-east1", _probe_job(run_id, tmp_path / "limited"))
    assert not isinstance(refused.value, CapacityError) and isinstance(refused.value, TransientError)
    assert refused.value.region == "asia-east1"
    assert refused.value.quota_metric == "aiplatform.googleapis.com/job_submission_requests"
    assert vertex.jobs.find_by_run("asia-east1", run_id) is None, "a rate-limited create made no job"


def _ended(vertex: Vertex, name: str, timeout: float = 60.0) -> Any:
    from tests.polling import wait_for

    ended = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED")
    return wait_for(lambda: (job := vertex.jobs.get(name)).state in ended and job, timeout, what=f"{name} ended")


def test_vertex_cancel_ends_the_job_cancelled_and_stops_its_processes(vertex: Vertex, tmp_path: Path) -> None:
    out = tmp_path / "out"
    job = _probe_job("run-cancel", out)
    job["job_spec"]["worker_pool_specs"][0]["python_package_spec"]["args"] += ["--sleep", "60", "--spawn-child"]
    created = vertex.jobs.create("us-central1", job)
    pids: list[int] = []
    if vertex.emulated:
        from tests.integration.vertex_emulator.harness import read_json

        record = read_json(out / "workerpool0-0.json")
        pids = [record["pid"], record["child_pid"]]
    assert vertex.jobs.cancel(created.name) is True
    assert vertex.jobs.get(created.name).state in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")
    done = _ended(vertex, created.name)
    assert (done.state, done.error_code) == ("JOB_STATE_CANCELLED", 1) and done.end_time
    if vertex.emulated:
        from tests.integration.vertex_emulator.harness import process_alive

        assert [pid for pid in pids if process_alive(pid)] == []
    assert vertex.jobs.cancel(created.name) is False, "cancelling an ended job changes nothing"
    with pytest.raises(PermanentError, match="NotFound"):
        vertex.jobs.cancel(f"projects/{PROJECT}/locations/us-central1/customJobs/999999999")


def test_vertex_list_labelled_pages_through_landfall_jobs_of_one_region(vertex: Vertex, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    labelled = [vertex.jobs.create("asia-east1", _probe_job(f"run-{tag}-{i}", tmp_path / str(i))) for i in range(3)]
    unlabelled = _probe_job("x", tmp_path / "u")
    unlabelled["labels"] = {}
    stranger = vertex.jobs.create("asia-east1", unlabelled)
    elsewhere = vertex.jobs.create("us-central1", _probe_job(f"run-{tag}-far", tmp_path / "far"))
    for page_size in (1, 2, 100):
        listed = vertex.jobs.list_labelled("asia-east1", page_size=page_size)
        names = [j.name for j in listed]
        assert {j.name for j in labelled} <= set(names) and len(names) == len(set(names)), page_size
        assert stranger.name not in names and elsewhere.name not in names
        assert all(RUN_LABEL in j.labels and j.region == "asia-east1" for j in listed)
    for job in (*labelled, stranger, elsewhere) if vertex.emulated else ():  # the fake's jobs never run
        _ended(vertex, job.name)


# The submission rate limiter -------------------------------------------------------------------------------------


@pytest.fixture(params=["fake", "firestore"])
def limiter(request: pytest.FixtureRequest) -> RateLimitsStore | FakeRateLimits:
    if request.param == "fake":
        return FakeRateLimits(per_minute=6)
    request.getfixturevalue("clean_firestore")
    return RateLimitsStore(_firestore(), "rate_limits", per_minute=6)


def test_limiter_slots_are_spaced_per_region_and_never_in_the_past(limiter: RateLimitsStore | FakeRateLimits) -> None:
    slots = [limiter.take("us-central1", T0) for _ in range(3)]
    assert slots == [T0, T0 + timedelta(seconds=10), T0 + timedelta(seconds=20)]
    assert limiter.take("europe-west4", T0) == T0, "each region has its own bucket"
    later = T0 + timedelta(minutes=5)
    assert limiter.take("us-central1", later) == later
    assert limiter.take("us-central1", later) == later + timedelta(seconds=10)
