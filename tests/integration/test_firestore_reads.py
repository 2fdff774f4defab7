"""functions/gcp/firestore_reads.py query_documents against the Firestore emulator: the same documents, in the same
order, with the same values (timestamps, nested maps and arrays included) as the library's own stream, and the
measurements store reading through it."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from functions.gcp.firestore_reads import query_documents
from functions.gcp.measurements_store import MeasurementsStore
from schemas.measurement import parse_measurement
from tests.conftest import PROJECT

EXAMPLE = Path(__file__).resolve().parents[2] / "schemas" / "examples" / "measurement.json"


@pytest.fixture
def client(clean_firestore: Any) -> Any:
    from google.cloud import firestore

    return firestore.Client(project=PROJECT)


def test_query_documents_reads_what_the_library_streams(client: Any) -> None:
    from google.cloud.firestore_v1.base_query import FieldFilter

    things = client.collection("reads")
    for i in range(5):
        things.document(f"d{i}").set(
            {
                "kind": "a" if i % 2 == 0 else "b",
                "n": i,
                "x": i / 3,
                "at": datetime(2026, 11, 27, 8, i, tzinfo=UTC),
                "nested": {"list": [1, "two", {"three": None}], "flag": i == 4},
                "none": None,
            }
        )
    query = things.where(filter=FieldFilter("kind", "==", "a")).order_by("n").limit(2)
    mine = query_documents(query)
    theirs = [s.to_dict() for s in query.stream()]
    assert mine == theirs
    assert [d["n"] for d in mine] == [0, 2]
    assert repr(mine) == repr(theirs)  # the same types: the library's DatetimeWithNanoseconds, ints, floats
    assert query_documents(things.where(filter=FieldFilter("kind", "==", "none"))) == []


def test_the_measurements_store_reads_a_workloads_documents(client: Any) -> None:
    store = MeasurementsStore(client, "measurements")
    measurement = parse_measurement(json.loads(EXAMPLE.read_text()))
    store.record(measurement)
    assert store.for_workload(measurement.workload) == [measurement]
    assert store.for_workload(measurement.workload + "-other") == []


class CountingQueries:
    """The measurements store's queries, counted."""

    def __init__(self, store: MeasurementsStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = store._query

        def counted(workload: str, limit: int) -> list[Any]:
            self.count += 1
            return real(workload, limit)

        monkeypatch.setattr(store, "_query", counted)


def test_a_workloads_measurements_are_kept_a_few_seconds_and_a_workload_with_none_is_asked_each_time(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions.gcp import measurements_store

    store = MeasurementsStore(client, "measurements")
    queries = CountingQueries(store, monkeypatch)
    measurement = parse_measurement(json.loads(EXAMPLE.read_text()))
    assert store.for_workload(measurement.workload) == [] and store.for_workload(measurement.workload) == []
    assert queries.count == 2, "none found: asked again, so a first measurement is seen at once"
    # recorded by another instance (the listener): seen by the next plan, then kept
    MeasurementsStore(client, "measurements").record(measurement)
    assert store.for_workload(measurement.workload) == [measurement] == store.for_workload(measurement.workload)
    assert queries.count == 3
    # recorded through this store: dropped, read again
    store.record(replace(measurement, run_id="run-later"))
    store.for_workload(measurement.workload)
    assert queries.count == 4
    monkeypatch.setattr(measurements_store, "KEPT_FOR_S", 0.0)
    store.for_workload(measurement.workload)
    assert queries.count == 5, "kept no longer than KEPT_FOR_S"


def test_get_document_reads_what_the_library_gets(client: Any) -> None:
    from google.api_core.exceptions import FailedPrecondition

    from functions.gcp import firestore_writes
    from functions.gcp.firestore_reads import get_document

    ref = client.collection("reads").document("one")
    assert get_document(client, ref) == (None, None)
    ref.set({"n": 1, "at": datetime(2026, 11, 27, 8, 0, tzinfo=UTC), "nested": {"list": [1, {"x": None}]}})
    snapshot = ref.get()
    doc, update_time = get_document(client, ref)
    assert doc == snapshot.to_dict() and repr(doc) == repr(snapshot.to_dict())
    # the update time is the one a conditional write takes: a write on it holds, and then one on it again does not
    firestore_writes.update_if_unchanged(client, ref, {("n",): 2}, update_time)
    with pytest.raises(FailedPrecondition):
        firestore_writes.update_if_unchanged(client, ref, {("n",): 3}, update_time)
    assert ref.get().to_dict()["n"] == 2
