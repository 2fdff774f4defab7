"""Firestore adapter for ingest: dataset documents (status and reason per prefix), the version outbox (one
document per dataset version, claimed under a lease and finished exactly once) and each dataset's contents (one
document per distinct content, naming the run that trains it).

The rules are pure functions in functions/records/dataset_versions.py (the lease rule itself in leases.py); this
adapter applies them in transactions. Every document is written as its schema's `to_dict()` and read through its
parse (schemas/dataset_record.py, dataset_version.py, content_record.py), so a drifted field fails by name here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

from functions.errors import as_transient
from functions.gcp.firestore_paging import paged_documents
from functions.gcp.firestore_reads import get_document
from functions.gcp.firestore_tx import create_if_absent, created, in_transaction
from functions.gcp.known_documents import KnownDocuments
from functions.records.dataset_versions import (
    VersionOutcome,
    answered,
    claim,
    collecting,
    content_claim,
    finished,
    first_claim,
    newer_version,
    republish_claimed,
    republish_counted,
    retrain_counted,
)
from functions.records.leases import Claim, ClaimOutcome
from schemas.content_record import CONTENTS_SUBCOLLECTION, ContentRecord, parse_content_record
from schemas.dataset_record import DatasetRecord, DatasetStatus, VersionStatus, parse_dataset_record
from schemas.dataset_version import DatasetVersion, parse_dataset_version
from schemas.errors import SchemaError

log = logging.getLogger("landfall.datasets_store")

Doc = dict[str, Any]
R = TypeVar("R")


def _parsed(parse: Callable[[Mapping[str, Any]], R], doc: Doc | None) -> R | None:
    return None if doc is None else parse(doc)


def _readable(parse: Callable[[Mapping[str, Any]], R], docs: Iterable[Doc], what: str) -> Iterator[R]:
    """The documents of a scan that fit their schema; one that does not is logged with the field and left out, so
    it cannot stop the sweep or the reconciler's look at the others (a read by id still raises)."""
    for doc in docs:
        try:
            yield parse(doc)
        except SchemaError as exc:
            log.error(
                "%s %s left out: it does not fit its schema: %s", what, doc.get("dataset_id") or doc.get("run_id"), exc
            )


class DatasetsStore:
    def __init__(self, client: Any, datasets_collection: str, versions_collection: str) -> None:
        self._client = client
        self._datasets = datasets_collection
        self._versions = versions_collection
        self._known = KnownDocuments()
        """The versions this instance claimed and the dataset documents it read with them: a delivery's writes
        after it published are one conditional Commit each (functions/gcp/known_documents.py)."""

    def _dataset_ref(self, dataset_id: str) -> Any:
        return self._client.collection(self._datasets).document(dataset_id)

    def _version_ref(self, run_id: str) -> Any:
        return self._client.collection(self._versions).document(run_id)

    # datasets ---------------------------------------------------------------------------------------------------
    def datasets(self, dataset_ids: Iterable[str]) -> dict[str, DatasetRecord]:
        refs = [self._dataset_ref(i) for i in dict.fromkeys(dataset_ids)]
        if not refs:
            return {}
        try:
            snapshots = [s for s in self._client.get_all(refs) if s.exists]
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return {s.id: parse_dataset_record(s.to_dict()) for s in snapshots}

    def save_dataset(self, record: DatasetRecord) -> bool:
        """Write the dataset document unless a newer version's outcome is already there; True when written."""

        def change(cur: Doc | None) -> tuple[Doc | None, bool]:
            if newer_version(_parsed(parse_dataset_record, cur), record):
                return record.to_dict(), True
            return None, False

        return bool(self._known.change(self._client, self._dataset_ref(record.dataset_id), change))

    def mark_collecting(self, record: DatasetRecord) -> bool:
        """Quiet-period: note that objects are arriving (the caller has seen it is not COLLECTING already)."""
        ref = self._dataset_ref(record.dataset_id)
        if create_if_absent(self._client, ref, record.to_dict()):
            return True

        def change(cur: Doc | None) -> tuple[Doc | None, bool]:
            new = collecting(_parsed(parse_dataset_record, cur), record)
            return (None, False) if new is None else (new.to_dict(), True)

        return bool(in_transaction(self._client, ref, change))

    def open_datasets(self) -> list[DatasetRecord]:
        """Datasets the sweep looks at: COLLECTING (quiet period) and WAITING (manifest short of objects)."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        query = self._client.collection(self._datasets).where(
            filter=FieldFilter("status", "in", [DatasetStatus.COLLECTING.value, DatasetStatus.WAITING.value])
        )
        try:
            docs = [s.to_dict() for s in query.stream()]
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return list(_readable(parse_dataset_record, docs, "dataset"))

    # versions (the outbox) -------------------------------------------------------------------------------------
    def claim_version(
        self, version: DatasetVersion, *, owner: str, now: datetime, lease_seconds: int
    ) -> Claim[DatasetVersion]:
        """Create the version as CLAIMED by owner, or take it over if its earlier claim lapsed or it was WAITING."""
        fresh = first_claim(version, owner=owner, now=now, lease_seconds=lease_seconds)
        ref = self._version_ref(version.run_id)
        doc = fresh.to_dict()
        when = created(self._client, ref, doc)
        if when is not None:
            self._known.keep(ref.path, doc, when)
            return Claim(ClaimOutcome.CLAIMED, fresh)

        def change(cur: Doc | None) -> tuple[Doc | None, Claim[DatasetVersion]]:
            if cur is None:
                return fresh.to_dict(), Claim(ClaimOutcome.CLAIMED, fresh)
            result = claim(parse_dataset_version(cur), owner=owner, now=now, lease_seconds=lease_seconds)
            return (result.doc.to_dict() if result.outcome == ClaimOutcome.CLAIMED else None), result

        result: Claim[DatasetVersion] = in_transaction(
            self._client, ref, change, stored=lambda doc, when: self._known.keep(ref.path, doc, when)
        )
        return result

    def claim_new(
        self, version: DatasetVersion, content: ContentRecord, *, owner: str, now: datetime, lease_seconds: int
    ) -> bool:
        """Create the version as CLAIMED by owner and its content as claimed by it, in one Commit that holds only if
        neither exists (each write's precondition); False, with nothing written, when either does (claim_version and
        claim_content then decide as usual)."""
        from google.api_core.exceptions import Conflict

        from functions.gcp import firestore_writes

        fresh = first_claim(version, owner=owner, now=now, lease_seconds=lease_seconds).to_dict()
        held = content_claim(None, None, content, now=now, retrain=False).doc.to_dict()
        version_ref = self._version_ref(version.run_id)
        content_ref = self._content_ref(content.dataset_id, content.digest)
        writes = [firestore_writes.create_write(version_ref, fresh), firestore_writes.create_write(content_ref, held)]
        try:
            results = firestore_writes.commit(self._client, writes)
        except Conflict:
            return False
        except Exception as exc:
            raise as_transient(exc, f"Firestore create of {version_ref.path} and {content_ref.path}") from exc
        self._known.keep(version_ref.path, fresh, results[0].update_time)
        return True

    def finish_version(
        self,
        run_id: str,
        *,
        owner: str,
        status: VersionStatus,
        now: datetime,
        outcome: VersionOutcome | None = None,
    ) -> bool:
        """Record the outcome of owner's claim; False (nothing written) when another delivery finished it first."""
        return self._change_version(
            run_id, lambda cur: finished(cur, owner=owner, status=status, now=now, outcome=outcome)
        )

    def version(self, run_id: str, *, dataset_id: str = "") -> DatasetVersion | None:
        """The version, or None; with dataset_id, its dataset document is read in the same call and kept (the
        delivery that goes on to publish the version writes it in one conditional Commit)."""
        if not dataset_id:
            try:
                stored, _ = get_document(self._client, self._version_ref(run_id))
            except Exception as exc:
                raise as_transient(exc, "Firestore") from exc
            return parse_dataset_version(stored) if stored is not None else None
        version_ref, dataset_ref = self._version_ref(run_id), self._dataset_ref(dataset_id)
        try:
            snapshots = {s.reference.path: s for s in self._client.get_all([version_ref, dataset_ref])}
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        dataset = snapshots.get(dataset_ref.path)
        if dataset is not None:
            self._known.keep(dataset_ref.path, dataset.to_dict() if dataset.exists else None, dataset.update_time)
        version = snapshots.get(version_ref.path)
        return parse_dataset_version(version.to_dict()) if version is not None and version.exists else None

    def unanswered_versions(self, *, page_size: int = 200) -> Iterator[DatasetVersion]:
        """PUBLISHED versions not yet matched with their run (`answered == False`), a page at a time by id."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        yield from _readable(
            parse_dataset_version,
            paged_documents(
                self._client.collection(self._versions), FieldFilter("answered", "==", False), page_size=page_size
            ),
            "dataset version",
        )

    def _change_version(self, run_id: str, rule: Callable[[DatasetVersion | None], DatasetVersion | None]) -> bool:
        def change(cur: Doc | None) -> tuple[Doc | None, bool]:
            new = rule(_parsed(parse_dataset_version, cur))
            return (None, False) if new is None else (new.to_dict(), True)

        return bool(self._known.change(self._client, self._version_ref(run_id), change))

    def mark_answered(self, run_id: str, *, now: datetime) -> bool:
        """Note that the version's run exists; False when it was noted already."""
        return self._change_version(run_id, lambda cur: answered(cur, now=now))

    def claim_republish(self, run_id: str, *, now: datetime, grace_seconds: int) -> bool:
        """Claim one republish of an unanswered version (dataset_versions.republish_claimed); False: none due."""
        return self._change_version(run_id, lambda cur: republish_claimed(cur, now=now, grace_seconds=grace_seconds))

    def count_republish(self, run_id: str, *, message_id: str) -> bool:
        return self._change_version(run_id, lambda cur: republish_counted(cur, message_id=message_id))

    # contents ----------------------------------------------------------------------------------------------------
    def _content_ref(self, dataset_id: str, digest: str) -> Any:
        return self._dataset_ref(dataset_id).collection(CONTENTS_SUBCOLLECTION).document(digest)

    def claim_content(self, content: ContentRecord, *, now: datetime, retrain: bool = False) -> Claim[ContentRecord]:
        """Let version content.run_id publish this content: created with create() by the first version that gets
        here; otherwise decided in a transaction that also reads the version the content names (content_claim)."""
        from google.cloud import firestore

        ref = self._content_ref(content.dataset_id, content.digest)
        if not retrain:
            fresh = content_claim(None, None, content, now=now, retrain=False).doc
            if create_if_absent(self._client, ref, fresh.to_dict()):
                return Claim(ClaimOutcome.CLAIMED, fresh)

        @firestore.transactional
        def body(transaction: Any) -> Claim[ContentRecord]:
            snapshot = ref.get(transaction=transaction)
            cur = parse_content_record(snapshot.to_dict()) if snapshot.exists else None
            holder = None
            if cur is not None and cur.run_id and cur.run_id != content.run_id:
                held = self._version_ref(cur.run_id).get(transaction=transaction)
                holder = parse_dataset_version(held.to_dict()) if held.exists else None
            result = content_claim(cur, holder, content, now=now, retrain=retrain)
            if result.outcome == ClaimOutcome.CLAIMED and result.doc != cur:
                transaction.set(ref, result.doc.to_dict())
            return result

        try:
            result: Claim[ContentRecord] = body(self._client.transaction(max_attempts=10))
        except Exception as exc:
            raise as_transient(exc, f"Firestore transaction on {ref.path}") from exc
        return result

    def count_retrain(self, content: ContentRecord, *, now: datetime) -> ContentRecord:
        """One more `landfall retrain` of this content: the content record with its `retrains` count raised."""

        def change(cur: Doc | None) -> tuple[Doc, ContentRecord]:
            new = retrain_counted(_parsed(parse_content_record, cur), content, now=now)
            return new.to_dict(), new

        result: ContentRecord = in_transaction(
            self._client, self._content_ref(content.dataset_id, content.digest), change
        )
        return result

    def content(self, dataset_id: str, digest: str) -> ContentRecord | None:
        try:
            snapshot = self._content_ref(dataset_id, digest).get()
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return parse_content_record(snapshot.to_dict()) if snapshot.exists else None
