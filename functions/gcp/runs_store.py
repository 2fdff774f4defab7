"""Firestore adapter for run documents: create-if-absent, forward-only transitions and the submission claim,
each inside a transaction so that concurrent deliveries cannot interleave."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from functions.errors import TransientError, as_transient
from functions.gcp.firestore_tx import in_transaction
from functions.records.run_rules import Claim, Doc, claimed, transitioned
from schemas.run_record import RunState


class RunsStore:
    def __init__(self, client: Any, collection: str) -> None:
        self._client = client
        self._collection = collection

    def _ref(self, run_id: str) -> Any:
        return self._client.collection(self._collection).document(run_id)

    def _in_transaction(self, run_id: str, change: Callable[[Doc | None], tuple[Doc | None, Any]]) -> Any:
        """Run change(current doc) in a transaction; it returns (doc to write or None, result)."""
        return in_transaction(self._client, self._ref(run_id), change)

    def get(self, run_id: str) -> Doc | None:
        try:
            snapshot = self._ref(run_id).get()
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return snapshot.to_dict() if snapshot.exists else None

    def create_if_absent(self, doc: Doc) -> tuple[Doc, bool]:
        """Store doc unless a run with its id exists; returns (the stored doc, whether this call created it)."""
        return self._in_transaction(doc["run_id"], lambda cur: (doc, (doc, True)) if cur is None else
                                    (None, (cur, False)))

    def transition(self, run_id: str, state: RunState, *, now: datetime, detail: str = "",
                   updates: Doc | None = None) -> tuple[Doc | None, bool]:
        """Move the run forward; returns (doc after, whether it changed). A disallowed move changes nothing."""

        def change(cur: Doc | None) -> tuple[Doc | None, tuple[Doc | None, bool]]:
            if cur is None:
                return None, (None, False)
            new = transitioned(cur, state, now=now, detail=detail, updates=updates)
            return (new, (new, True)) if new is not None else (None, (cur, False))

        return self._in_transaction(run_id, change)

    def merge(self, run_id: str, updates: Doc, *, now: datetime) -> Doc | None:
        """Apply updates without changing state (e.g. record a submission attempt)."""

        def change(cur: Doc | None) -> tuple[Doc | None, Doc | None]:
            if cur is None:
                return None, None
            new = transitioned(cur, RunState(cur["state"]), now=now, updates=updates)
            return new, new

        return self._in_transaction(run_id, change)

    def claim_submission(self, run_id: str, *, owner: str, now: datetime, lease_seconds: int) -> Claim:
        def change(cur: Doc | None) -> tuple[Doc | None, Claim]:
            if cur is None:
                raise TransientError(f"run {run_id} does not exist yet")
            claim = claimed(cur, owner=owner, now=now, lease_seconds=lease_seconds)
            return (claim.doc if claim.doc is not cur else None), claim

        return self._in_transaction(run_id, change)

    def find_by_job_id(self, job_id: str) -> Doc | None:
        from google.cloud.firestore_v1.base_query import FieldFilter

        try:
            query = self._client.collection(self._collection).where(filter=FieldFilter("vertex.job_id", "==", job_id))
            docs = list(query.limit(2).stream())
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return docs[0].to_dict() if docs else None

    def list(self, limit: int = 50) -> list[Doc]:
        from google.cloud import firestore

        query = self._client.collection(self._collection).order_by("created_at", direction=firestore.Query.DESCENDING)
        return [d.to_dict() for d in query.limit(limit).stream()]
