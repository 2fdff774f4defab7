"""functions/gcp/firestore_reads.py query_documents against the Firestore emulator: the same documents, in the same
order, with the same values (timestamps, nested maps and arrays included) as the library's own stream, and the
measurements store reading through it."""

from __future__ import annotations

import json
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
