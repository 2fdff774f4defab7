"""Firestore adapter for ingest: dataset documents (status and reason per prefix), the version outbox (one
document per dataset version, claimed under a lease and finished exactly once) and each dataset's contents (one
document per distinct content, naming the run that trains it).

The rules are pure functions in functions/records/dataset_versions.py (the lease rule itself in leases.py); this
adapter applies them in transactions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from functions.errors import as_transient
from functions.gcp.firestore_paging import paged_documents
from functions.gcp.firestore_tx import create_if_absent, in_transaction
from functions.records.dataset_versions import (
    Doc,
    answered,
    claim,
    content_claim,
    finished,
    first_claim,
    newer_version,
    republish_claimed,
    republish_counted,
    retrain_counted,
)
from functions.records.leases import Claim, ClaimOutcome
from schemas.dataset_record import DatasetStatus, VersionStatus


class DatasetsStore:
    def __init__(self, client: Any, datasets_collection: str, versions_collection: str) -> None:
        self._client = client
        self._datasets = datasets_collection
        self._versions = versions_collection

    def _dataset_ref(self, dataset_id: str) -> Any:
        return self._client.collection(self._datasets).document(dataset_id)

    def _version_ref(self, run_id: str) -> Any:
        return self._client.collection(self._versions).document(run_id)

    # datasets ---------------------------------------------------------------------------------------------------
    def datasets(self, dataset_ids: Iterable[str]) -> dict[str, Doc]:
        refs = [self._dataset_ref(i) for i in dict.fromkeys(dataset_ids)]
        if not refs:
            return {}
        try:
            return {s.id: s.to_dict() for s in self._client.get_all(refs) if s.exists}
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc

    def save_dataset(self, doc: Doc) -> bool:
        """Write the dataset document unless a newer version's outcome is already there; True when written."""
        return bool(
            in_transaction(
                self._client,
                self._dataset_ref(doc["dataset_id"]),
                lambda cur: (doc, True) if newer_version(cur, doc) else (None, False),
            )
        )

    def mark_collecting(self, doc: Doc) -> bool:
        """Quiet-period: note that objects are arriving (the caller has seen it is not COLLECTING already)."""
        ref = self._dataset_ref(doc["dataset_id"])
        if create_if_absent(ref, doc):
            return True

        def change(cur: Doc | None) -> tuple[Doc | None, bool]:
            if cur and cur.get("status") == DatasetStatus.COLLECTING:
                return None, False
            return {**(cur or {}), **doc, "version": (cur or {}).get("version")}, True

        return bool(in_transaction(self._client, ref, change))

    def open_datasets(self) -> list[Doc]:
        """Datasets the sweep looks at: COLLECTING (quiet period) and WAITING (manifest short of objects)."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        query = self._client.collection(self._datasets).where(
            filter=FieldFilter("status", "in", [DatasetStatus.COLLECTING.value, DatasetStatus.WAITING.value])
        )
        try:
            return [s.to_dict() for s in query.stream()]
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc

    # versions (the outbox) -------------------------------------------------------------------------------------
    def claim_version(self, doc: Doc, *, owner: str, now: datetime, lease_seconds: int) -> Claim[Doc]:
        """Create the version as CLAIMED by owner, or take it over if its earlier claim lapsed or it was WAITING."""
        fresh = first_claim(doc, owner=owner, now=now, lease_seconds=lease_seconds)
        ref = self._version_ref(doc["run_id"])
        if create_if_absent(ref, fresh):
            return Claim(ClaimOutcome.CLAIMED, fresh)

        def change(cur: Doc | None) -> tuple[Doc | None, Claim[Doc]]:
            if cur is None:
                return fresh, Claim(ClaimOutcome.CLAIMED, fresh)
            result = claim(cur, owner=owner, now=now, lease_seconds=lease_seconds)
            return (result.doc if result.outcome == ClaimOutcome.CLAIMED else None), result

        return in_transaction(self._client, ref, change)

    def finish_version(self, run_id: str, *, owner: str, status: VersionStatus, now: datetime, updates: Doc) -> bool:
        """Record the outcome of owner's claim; False (nothing written) when another delivery finished it first."""

        def change(cur: Doc | None) -> tuple[Doc | None, bool]:
            new = finished(cur, owner=owner, status=status, now=now, updates=updates)
            return new, new is not None

        return bool(in_transaction(self._client, self._version_ref(run_id), change))

    def version(self, run_id: str) -> Doc | None:
        try:
            snapshot = self._version_ref(run_id).get()
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return snapshot.to_dict() if snapshot.exists else None

    def unanswered_versions(self, *, page_size: int = 200) -> Iterator[Doc]:
        """PUBLISHED versions not yet matched with their run (`answered == False`), a page at a time by id."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        yield from paged_documents(
            self._client.collection(self._versions), FieldFilter("answered", "==", False), page_size=page_size
        )

    def _change_version(self, run_id: str, rule: Callable[[Doc | None], Doc | None]) -> bool:
        def change(cur: Doc | None) -> tuple[Doc | None, bool]:
            new = rule(cur)
            return new, new is not None

        return bool(in_transaction(self._client, self._version_ref(run_id), change))

    def mark_answered(self, run_id: str, *, now: datetime) -> bool:
        """Note that the version's run exists; False when it was noted already."""
        return self._change_version(run_id, lambda cur: answered(cur, now=now))

    def claim_republish(self, run_id: str, *, now: datetime, grace_seconds: int) -> bool:
        """Claim one republish of an unanswered version (dataset_versions.republish_claimed); False: none due."""
        return self._change_version(run_id, lambda cur: republish_claimed(cur, now=now, grace_seconds=grace_seconds))

    def count_republish(self, run_id: str, *, message_id: str) -> bool:
        return self._change_version(run_id, lambda cur: republish_counted(cur, message_id=message_id))

    # contents ----------------------------------------------------------------------------------------------------
    def _content_ref(self, doc: Doc) -> Any:
        return self._dataset_ref(doc["dataset_id"]).collection("contents").document(doc["digest"])

    def claim_content(self, doc: Doc, *, now: datetime, retrain: bool = False) -> Claim[Doc]:
        """Let version doc["run_id"] publish this content: created with create() by the first version that gets
        here; otherwise decided in a transaction that also reads the version the content names (content_claim)."""
        from google.cloud import firestore

        ref = self._content_ref(doc)
        if not retrain:
            fresh = content_claim(None, None, doc, now=now, retrain=False).doc
            if create_if_absent(ref, fresh):
                return Claim(ClaimOutcome.CLAIMED, fresh)

        @firestore.transactional
        def body(transaction: Any) -> Claim[Doc]:
            snapshot = ref.get(transaction=transaction)
            cur = snapshot.to_dict() if snapshot.exists else None
            holder = None
            if cur and cur.get("run_id") and cur["run_id"] != doc["run_id"]:
                held = self._version_ref(cur["run_id"]).get(transaction=transaction)
                holder = held.to_dict() if held.exists else None
            result = content_claim(cur, holder, doc, now=now, retrain=retrain)
            if result.outcome == ClaimOutcome.CLAIMED and result.doc != cur:
                transaction.set(ref, result.doc)
            return result

        try:
            claimed: Claim[Doc] = body(self._client.transaction(max_attempts=10))  # transactional's call: unannotated
            return claimed
        except Exception as exc:
            raise as_transient(exc, f"Firestore transaction on {ref.path}") from exc

    def count_retrain(self, doc: Doc, *, now: datetime) -> Doc:
        """One more `landfall retrain` of this content: the content document with its `retrains` count raised."""

        def change(cur: Doc | None) -> tuple[Doc, Doc]:
            new = retrain_counted(cur, doc, now=now)
            return new, new

        return in_transaction(self._client, self._content_ref(doc), change)

    def content(self, dataset_id: str, digest: str) -> Doc | None:
        try:
            snapshot = self._content_ref({"dataset_id": dataset_id, "digest": digest}).get()
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return snapshot.to_dict() if snapshot.exists else None
