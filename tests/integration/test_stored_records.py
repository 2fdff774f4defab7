"""Every Firestore document Landfall writes, written through Landfall's own adapter (functions/gcp/*_store.py) into
the Firestore emulator, read back with the stock google-cloud-firestore client and parsed by its schema in
schemas/: runs, orphans, datasets, dataset versions, dataset contents and rate buckets. Each round trip ends at the
golden example (schemas/examples/), so the stored shape, the schema and the example cannot drift apart; and every
collection the topology names has a kind here, so a new collection cannot go untyped."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import fields, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from deploy.topology import load_topology
from functions.gcp.capacity_store import CapacityStore
from functions.gcp.datasets_store import DatasetsStore
from functions.gcp.measurements_store import MeasurementsStore
from functions.gcp.model_promotions_store import ModelPromotionsStore
from functions.gcp.orphans_store import OrphansStore
from functions.gcp.rate_limits_store import RateLimitsStore
from functions.gcp.runs_store import RunsStore
from functions.gcp.team_ledger_store import TeamLedgerStore
from functions.gcp.watermarks_store import WatermarksStore
from functions.records.dataset_versions import VersionOutcome
from functions.records.leases import ClaimOutcome
from functions.records.rate_limits import from_us
from schemas.capacity_event import parse_capacity_event
from schemas.content_record import CONTENTS_SUBCOLLECTION, parse_content_record
from schemas.dataset_record import DatasetStatus, VersionStatus, parse_dataset_record
from schemas.dataset_version import DatasetVersion, parse_dataset_version
from schemas.measurement import parse_measurement
from schemas.orphan_record import parse_orphan_record
from schemas.promotion_lease import parse_promotion_lease
from schemas.rate_bucket import CREATE_CUSTOM_JOB, bucket_id, parse_rate_bucket
from schemas.reconcile_watermark import parse_reconcile_watermark
from schemas.run_record import parse_run_record
from schemas.team_ledger import parse_team_ledger
from schemas.times import parse_timestamp
from tests.conftest import PROJECT, Emulator

EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"
TOPOLOGY = load_topology()

STORED: dict[str, tuple[str, Callable[[dict[str, Any]], Any]]] = {
    # topology field (or path below a dataset): (golden example, the schema's parse)
    "runs_collection": ("run_record", parse_run_record),
    "orphans_collection": ("orphan_record", parse_orphan_record),
    "datasets_collection": ("dataset_record", parse_dataset_record),
    "dataset_versions_collection": ("dataset_version", parse_dataset_version),
    f"datasets/*/{CONTENTS_SUBCOLLECTION}": ("content_record", parse_content_record),
    "rate_limits_collection": ("rate_bucket", parse_rate_bucket),
    "reconciler_collection": ("reconcile_watermark", parse_reconcile_watermark),
    "measurements_collection": ("measurement", parse_measurement),
    "capacity_events_collection": ("capacity_event", parse_capacity_event),
    "teams_collection": ("team_ledger", parse_team_ledger),
    "model_promotions_collection": ("promotion_lease", parse_promotion_lease),
}


def golden(name: str) -> dict[str, Any]:
    return dict(json.loads((EXAMPLES / f"{name}.json").read_text()))


@pytest.fixture()
def client(clean_firestore: Emulator) -> Any:
    from google.cloud import firestore

    return firestore.Client(project=PROJECT)


def stored(client: Any, path: str) -> dict[str, Any]:
    """The document at path as the stock client reads it."""
    snapshot = client.document(path).get()
    assert snapshot.exists, f"{path} was not written"
    return dict(snapshot.to_dict())


def test_every_collection_of_the_topology_has_a_schema_and_a_round_trip_here() -> None:
    named = {f.name for f in fields(TOPOLOGY) if f.name.endswith("_collection")}
    assert named == {k for k in STORED if k.endswith("_collection")}, (
        "deploy/topology.toml [firestore] names a collection without a schema in schemas/ and a round trip in "
        "this file: add both"
    )


def test_a_run_is_stored_with_timestamps_and_reads_back_as_written(client: Any) -> None:
    record = parse_run_record(golden("run_record"))
    runs = RunsStore(client, TOPOLOGY.runs_collection)
    assert runs.create_if_absent(record) == (record, True)
    doc = stored(client, f"{TOPOLOGY.runs_collection}/{record.run_id}")
    assert doc["created_at"] == parse_timestamp(record.created_at)  # a Firestore timestamp, not text
    assert parse_run_record(doc) == record and parse_run_record(doc).to_dict() == golden("run_record")
    assert runs.get(record.run_id) == record


def test_an_orphan_reads_back_as_written(client: Any) -> None:
    record = parse_orphan_record(golden("orphan_record"))
    orphans = OrphansStore(client, TOPOLOGY.orphans_collection)
    assert orphans.record(record) and not orphans.record(record)
    doc = stored(client, f"{TOPOLOGY.orphans_collection}/{record.orphan_id}")
    assert doc == golden("orphan_record") and parse_orphan_record(doc) == record
    assert orphans.get(record.orphan_id) == record


def test_a_rate_bucket_written_by_two_takes_reads_back_as_the_golden(client: Any) -> None:
    expected = parse_rate_bucket(golden("rate_bucket"))
    limits = RateLimitsStore(client, TOPOLOGY.rate_limits_collection, expected.per_minute)
    now = from_us(expected.next_slot_us - 2 * 1_200_000)  # two slots (60 s / 50) before the golden's next slot
    first, second = limits.take(expected.region, now), limits.take(expected.region, now)
    assert (first, second) == (now, now + timedelta(seconds=1.2))  # the second take waits one interval
    doc = stored(client, f"{TOPOLOGY.rate_limits_collection}/{bucket_id(CREATE_CUSTOM_JOB, expected.region)}")
    assert doc == golden("rate_bucket") and parse_rate_bucket(doc) == expected


def test_a_team_ledger_reads_back_as_the_golden(client: Any) -> None:
    expected = parse_team_ledger(golden("team_ledger"))
    ledger = TeamLedgerStore(client, TOPOLOGY.runs_collection, TOPOLOGY.teams_collection)
    assert ledger.apply("no-such-run", expected.team, lambda run, cur: (None, expected, cur)) is None
    doc = stored(client, f"{TOPOLOGY.teams_collection}/{expected.team}")
    assert doc == golden("team_ledger") and parse_team_ledger(doc) == expected
    assert ledger.ledgers([expected.team, "nobody"]) == {expected.team: expected}


def test_a_reconcile_watermark_reads_back_as_the_golden(client: Any) -> None:
    expected = parse_reconcile_watermark(golden("reconcile_watermark"))
    marks = WatermarksStore(client, TOPOLOGY.reconciler_collection)
    marks.put(expected)
    doc = stored(client, f"{TOPOLOGY.reconciler_collection}/{expected.watermark_id}")
    assert doc == golden("reconcile_watermark") and parse_reconcile_watermark(doc) == expected
    assert marks.get_many([expected.watermark_id, "shard-1-of-2"]) == {expected.watermark_id: expected}


def test_a_promotion_lease_reads_back_as_the_golden(client: Any) -> None:
    expected = parse_promotion_lease(golden("promotion_lease"))
    leases = ModelPromotionsStore(client, TOPOLOGY.model_promotions_collection)
    until = parse_timestamp(expected.until, field="until")
    assert leases.hold(expected.model_id, expected.holder, now=until - timedelta(seconds=60), until=until)
    doc = stored(client, f"{TOPOLOGY.model_promotions_collection}/{expected.model_id}")
    assert doc == golden("promotion_lease") and parse_promotion_lease(doc) == expected
    assert leases.get(expected.model_id) == expected


def test_a_measurement_merged_from_two_runs_reads_back_as_the_golden(client: Any) -> None:
    """The first run's figures, then the second run's merged in (its figures win, both estimate checks kept), as
    the listener writes them; found by the dispatcher's one query on the workload."""
    expected = parse_measurement(golden("measurement"))
    first = replace(
        expected,
        run_id=expected.estimates[0].run_id,
        measured_at=expected.estimates[0].at,
        step_seconds=0.5,
        estimates=expected.estimates[:1],
    )
    second = replace(expected, estimates=expected.estimates[1:])
    measurements = MeasurementsStore(client, TOPOLOGY.measurements_collection)
    measurements.record(first)
    assert measurements.record(second) == expected
    assert measurements.record(second) == expected  # a repeated delivery changes nothing
    doc = stored(client, f"{TOPOLOGY.measurements_collection}/{expected.measurement_id}")
    assert doc == golden("measurement") and parse_measurement(doc) == expected
    other = replace(expected, workload="wl-other", estimates=())
    measurements.record(other)
    assert measurements.for_workload(expected.workload) == [expected]
    assert measurements.get(expected.measurement_id) == expected


def test_capacity_events_read_back_newest_first_and_a_bad_one_is_left_out(client: Any) -> None:
    """As the listener and the dispatcher write them (the same id twice: one document), as the dispatcher reads
    them: the newest first, at most the limit, one that no longer reads left out."""
    expected = parse_capacity_event(golden("capacity_event"))
    events = CapacityStore(client, TOPOLOGY.capacity_events_collection)
    older = replace(expected, event_id="job-1", at="2026-11-29T10:00:00Z", outcome="succeeded")
    for event in (older, expected, expected):
        events.record(event)
    doc = stored(client, f"{TOPOLOGY.capacity_events_collection}/{expected.event_id}")
    assert doc == golden("capacity_event") and parse_capacity_event(doc) == expected
    client.collection(TOPOLOGY.capacity_events_collection).document("bad").set(
        {**golden("capacity_event"), "event_id": "bad", "mode": "cheap", "at": "2026-11-29T12:00:00Z"}
    )
    assert events.newest() == (expected, older)
    assert events.newest(limit=1) == (expected,)
    events.record(replace(expected, event_id="job-2", at="2026-11-29T15:00:00Z"))
    assert [e.event_id for e in events.newest(limit=1)] == [expected.event_id]  # as read: kept for a minute
    events.forget()
    assert [e.event_id for e in events.newest()] == ["job-2", expected.event_id, "job-1"]


def _datasets(client: Any) -> DatasetsStore:
    return DatasetsStore(client, TOPOLOGY.datasets_collection, TOPOLOGY.dataset_versions_collection)


def test_a_dataset_reads_back_as_written(client: Any) -> None:
    record = parse_dataset_record(golden("dataset_record"))
    datasets = _datasets(client)
    assert datasets.save_dataset(record)
    doc = stored(client, f"{TOPOLOGY.datasets_collection}/{record.dataset_id}")
    assert doc == golden("dataset_record") and parse_dataset_record(doc) == record
    assert datasets.datasets([record.dataset_id]) == {record.dataset_id: record}
    collecting = replace(record, status=DatasetStatus.COLLECTING, version=None, dataset_id="ds-collecting")
    assert datasets.mark_collecting(collecting)
    assert parse_dataset_record(stored(client, f"{TOPOLOGY.datasets_collection}/ds-collecting")) == collecting


def test_a_dataset_version_through_its_whole_life_reads_back_as_the_golden_example(client: Any) -> None:
    """Claimed, published, republished once and answered, as ingest and the reconciler write it."""
    example = parse_dataset_version(golden("dataset_version"))
    t0 = parse_timestamp(example.created_at)
    bare = DatasetVersion(
        run_id=example.run_id,
        idempotency_key=example.idempotency_key,
        dataset_id=example.dataset_id,
        uri=example.uri,
        route=example.route,
        kind=example.kind,
        completed_by=example.completed_by,
        generation=example.generation,
        status=VersionStatus.CLAIMED,
        event_id=example.event_id,
    )
    datasets = _datasets(client)
    claim = datasets.claim_version(bare, owner=example.owner, now=t0, lease_seconds=60)
    assert claim.outcome == ClaimOutcome.CLAIMED
    path = f"{TOPOLOGY.dataset_versions_collection}/{example.run_id}"
    assert parse_dataset_version(stored(client, path)) == claim.doc
    assert datasets.finish_version(
        example.run_id,
        owner=example.owner,
        status=VersionStatus.PUBLISHED,
        now=t0,
        outcome=VersionOutcome(
            message_id=example.message_id,
            request=example.request,
            reason="",
            content_key=example.content_key,
            answered=False,
        ),
    )
    assert [v.run_id for v in datasets.unanswered_versions()] == [example.run_id]
    assert datasets.claim_republish(example.run_id, now=t0 + timedelta(minutes=10), grace_seconds=300)
    assert datasets.count_republish(example.run_id, message_id="17")
    assert datasets.mark_answered(example.run_id, now=t0 + timedelta(minutes=11))
    doc = stored(client, path)
    assert doc == golden("dataset_version") and parse_dataset_version(doc) == example
    assert datasets.version(example.run_id) == example


def test_a_content_reads_back_as_written_and_counts_retrains(client: Any) -> None:
    example = parse_content_record(golden("content_record"))
    datasets = _datasets(client)
    claim = datasets.claim_content(example, now=parse_timestamp(example.created_at))
    assert claim.outcome == ClaimOutcome.CLAIMED and claim.doc == example
    path = f"{TOPOLOGY.datasets_collection}/{example.dataset_id}/{CONTENTS_SUBCOLLECTION}/{example.digest}"
    doc = stored(client, path)
    assert doc == golden("content_record") and parse_content_record(doc) == example
    counted = datasets.count_retrain(example, now=parse_timestamp(example.updated_at))
    assert counted.retrains == 1 and parse_content_record(stored(client, path)) == counted
    assert datasets.content(example.dataset_id, example.digest) == counted


def test_an_older_document_without_later_fields_reads_with_the_old_defaults(client: Any) -> None:
    """A version written before `answered`, the republish counts and `content_key` existed, and a content document
    before `retrains`: both read (and the version is not taken for an unanswered one)."""
    old = {
        k: v
        for k, v in golden("dataset_version").items()
        if k not in {"answered", "answered_at", "last_republished_at", "republished_count", "content_key"}
        and k != "last_republished_message_id"
    }
    client.document(f"{TOPOLOGY.dataset_versions_collection}/{old['run_id']}").set(old)
    version = _datasets(client).version(old["run_id"])
    assert version is not None and version.answered is None and version.content_key is None
    assert list(_datasets(client).unanswered_versions()) == []
    content = {k: v for k, v in golden("content_record").items() if k != "retrains"}
    path = f"{TOPOLOGY.datasets_collection}/{content['dataset_id']}/{CONTENTS_SUBCOLLECTION}/{content['digest']}"
    client.document(path).set(content)
    read = _datasets(client).content(content["dataset_id"], content["digest"])
    assert read is not None and read.retrains == 0


def test_a_drifted_document_fails_naming_its_field(client: Any) -> None:
    from schemas.errors import SchemaError

    doc = golden("dataset_record") | {"status": "FINISHED"}
    client.document(f"{TOPOLOGY.datasets_collection}/{doc['dataset_id']}").set(doc)
    with pytest.raises(SchemaError, match=r"^dataset\.status: 'FINISHED' is not one of"):
        _datasets(client).datasets([doc["dataset_id"]])
    waiting = golden("dataset_record") | {"status": "WAITING", "dataset_id": "ds-waiting"}
    unknown = golden("dataset_record") | {"status": "WAITING", "dataset_id": "ds-drifted", "route": 7}
    for extra in (waiting, unknown):
        client.document(f"{TOPOLOGY.datasets_collection}/{extra['dataset_id']}").set(extra)
    # The sweep's scan leaves the drifted one out (logged with its field) and still sees the others.
    assert [d.dataset_id for d in _datasets(client).open_datasets()] == ["ds-waiting"]
