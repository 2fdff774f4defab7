"""Firestore adapter for measurements (schemas/measurement.py): one document per (workload, machine shape, image),
merged in a transaction as runs finish, read by one equality query per request (a document that does not read is
left out and logged); a workload's documents, once found, are kept for KEPT_FOR_S by the instance (a burst of one
workload's requests reads them once)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from functions.errors import as_transient
from functions.gcp.firestore_tx import Doc, in_transaction
from schemas.errors import SchemaError
from schemas.measurement import MEASUREMENTS_PER_REQUEST, Measurement, parse_measurement

log = logging.getLogger("landfall.measurements")

KEPT_FOR_S = 10.0
"""How long a workload's measurements, once found, are used without asking again. Measurements change only as runs
of the workload finish (minutes apart), and a plan made with figures seconds old is the plan the same request would
have got moments earlier; a workload with none is asked each time, so its first figures (a canary's, a seeded one)
are seen at once."""
KEPT_WORKLOADS = 256
"""How many workloads' measurements are kept (the oldest kept is dropped first)."""


NEWEST_READ = 50
"""Documents `newest` reads: the machines' recent start-ups (bounded: its CPU budget, as MEASUREMENTS_PER_REQUEST)."""
NEWEST_KEY = "\0newest"
"""Its place among the kept workloads (no workload key starts with a NUL)."""


class MeasurementsStore:
    def __init__(self, client: Any, collection: str) -> None:
        self._client = client
        self._collection = collection
        self._found: dict[tuple[str, int], tuple[float, list[Measurement]]] = {}
        self._lock = threading.Lock()

    def _ref(self, measurement_id: str) -> Any:
        return self._client.collection(self._collection).document(measurement_id)

    def record(self, measurement: Measurement) -> Measurement:
        """Merge a run's (or canary's) figures into its document (Measurement.merged: a repeated delivery changes
        nothing); the document as stored."""

        def change(cur: Doc | None) -> tuple[Doc | None, Measurement]:
            new = measurement if cur is None else parse_measurement(cur).merged(measurement)
            return new.to_document(), new

        result: Measurement = in_transaction(self._client, self._ref(measurement.measurement_id), change)
        with self._lock:
            for key in [k for k in self._found if k[0] in (measurement.workload, NEWEST_KEY)]:  # read again next
                del self._found[key]
        return result

    def get(self, measurement_id: str) -> Measurement | None:
        try:
            snapshot = self._ref(measurement_id).get()
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return parse_measurement(snapshot.to_dict()) if snapshot.exists else None

    def for_workload(self, workload: str, limit: int = MEASUREMENTS_PER_REQUEST) -> list[Measurement]:
        """The workload's documents (one equality query on a single field: no composite index needed), at most
        `limit`, decoded once (functions/gcp/firestore_reads.py); found less than KEPT_FOR_S ago, as found then."""
        with self._lock:
            kept = self._found.get((workload, limit))
        if kept is not None and time.monotonic() - kept[0] < KEPT_FOR_S:
            return list(kept[1])
        found = self._query(workload, limit)
        with self._lock:
            if found:
                self._found[(workload, limit)] = (time.monotonic(), found)
                while len(self._found) > KEPT_WORKLOADS:
                    self._found.pop(next(iter(self._found)))
            else:
                self._found.pop((workload, limit), None)
        return list(found)

    def newest(self, limit: int = NEWEST_READ) -> list[Measurement]:
        """The `limit` most recently measured documents of every workload (one query ordered by measured_at, on its
        automatic single-field index), kept for KEPT_FOR_S like a workload's: what the machines' start-ups were
        lately, whatever work measured them."""
        with self._lock:
            kept = self._found.get((NEWEST_KEY, limit))
        if kept is not None and time.monotonic() - kept[0] < KEPT_FOR_S:
            return list(kept[1])
        from google.cloud import firestore

        from functions.gcp.firestore_reads import query_documents

        query = self._client.collection(self._collection).order_by("measured_at", direction=firestore.Query.DESCENDING)
        try:
            docs = query_documents(query.limit(limit))
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        found = [m for m in map(_readable, docs) if m is not None]
        with self._lock:
            self._found[(NEWEST_KEY, limit)] = (time.monotonic(), found)
        return list(found)

    def _query(self, workload: str, limit: int) -> list[Measurement]:
        from google.cloud.firestore_v1.base_query import FieldFilter

        from functions.gcp.firestore_reads import query_documents

        query = self._client.collection(self._collection).where(filter=FieldFilter("workload", "==", workload))
        try:
            docs = query_documents(query.limit(limit))
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return [m for m in map(_readable, docs) if m is not None]


def _readable(doc: dict[str, Any]) -> Measurement | None:
    """The stored measurement, or None, logged, when it does not read (a figure stored before the figure rules, a
    field of another schema): the others plan on without it."""
    try:
        return parse_measurement(doc)
    except SchemaError as exc:
        log.warning(
            "measurement of %s on %s left out of planning: it does not read (%s)",
            doc.get("workload"),
            doc.get("machine_type"),
            exc,
        )
        return None
