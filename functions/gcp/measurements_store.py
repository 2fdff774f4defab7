"""Firestore adapter for measurements (schemas/measurement.py): one document per (workload, machine shape, image),
merged in a transaction as runs finish, read by one equality query per request."""

from __future__ import annotations

from typing import Any

from functions.errors import as_transient
from functions.gcp.firestore_tx import in_transaction
from functions.records.run_rules import Doc
from schemas.measurement import MEASUREMENTS_PER_REQUEST, Measurement, parse_measurement


class MeasurementsStore:
    def __init__(self, client: Any, collection: str) -> None:
        self._client = client
        self._collection = collection

    def _ref(self, measurement_id: str) -> Any:
        return self._client.collection(self._collection).document(measurement_id)

    def record(self, measurement: Measurement) -> Measurement:
        """Merge a run's (or canary's) figures into its document (Measurement.merged: a repeated delivery changes
        nothing); the document as stored."""

        def change(cur: Doc | None) -> tuple[Doc | None, Measurement]:
            new = measurement if cur is None else parse_measurement(cur).merged(measurement)
            return new.to_document(), new

        result: Measurement = in_transaction(self._client, self._ref(measurement.measurement_id), change)
        return result

    def get(self, measurement_id: str) -> Measurement | None:
        try:
            snapshot = self._ref(measurement_id).get()
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return parse_measurement(snapshot.to_dict()) if snapshot.exists else None

    def for_workload(self, workload: str, limit: int = MEASUREMENTS_PER_REQUEST) -> list[Measurement]:
        """The workload's documents (one equality query on a single field: no composite index needed), at most
        `limit`, decoded once (functions/gcp/firestore_reads.py)."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        from functions.gcp.firestore_reads import query_documents

        query = self._client.collection(self._collection).where(filter=FieldFilter("workload", "==", workload))
        try:
            return [parse_measurement(doc) for doc in query_documents(query.limit(limit))]
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
