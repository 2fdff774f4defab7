"""Firestore adapter for orphan records (schemas/orphan_record.py): created once, changed by the pure steps of
functions/records/orphans.py inside a transaction."""

from __future__ import annotations

from typing import Any

from functions.errors import as_transient
from functions.gcp.firestore_tx import Doc, create_if_absent, in_transaction
from functions.records.orphans import OrphanStep
from schemas.orphan_record import OrphanRecord, parse_orphan_record


class OrphansStore:
    def __init__(self, client: Any, collection: str) -> None:
        self._client = client
        self._collection = collection

    def _ref(self, orphan_id: str) -> Any:
        return self._client.collection(self._collection).document(orphan_id)

    def record(self, orphan: OrphanRecord) -> bool:
        """Store the orphan unless its job is recorded already; True when this call created it."""
        return create_if_absent(self._client, self._ref(orphan.orphan_id), orphan.to_document())

    def apply(self, orphan_id: str, step: OrphanStep) -> bool:
        def change(cur: Doc | None) -> tuple[Doc | None, bool]:
            new, written = step(None if cur is None else parse_orphan_record(cur))
            return (None if new is None else new.to_document()), written

        return bool(in_transaction(self._client, self._ref(orphan_id), change))

    def get(self, orphan_id: str) -> OrphanRecord | None:
        try:
            snapshot = self._ref(orphan_id).get()
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return parse_orphan_record(snapshot.to_dict()) if snapshot.exists else None

    def list(self, limit: int = 100) -> list[OrphanRecord]:
        """The most recently found orphans first."""
        from google.cloud import firestore

        query = self._client.collection(self._collection).order_by("found_at", direction=firestore.Query.DESCENDING)
        try:
            return [parse_orphan_record(s.to_dict()) for s in query.limit(limit).stream()]
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
