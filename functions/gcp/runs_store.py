"""Firestore adapter for run documents: create-if-absent, forward-only transitions and the submission claim, each
atomic so that concurrent deliveries cannot interleave.

Documents are read with `parse_run_record` and written as `RunRecord.to_document()` (times as timestamps); the
operations are the pure rule steps of functions/records/run_rules.py (RunsRules), committed by the unit of work
(functions/gcp/unit_of_work.py): one conditional Commit on the run as this instance last read or wrote it, else a
transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, TypeVar

from functions.errors import as_transient
from functions.gcp.firestore_paging import paged_snapshots
from functions.gcp.firestore_tx import Doc, in_transaction
from functions.gcp.unit_of_work import UnitOfWork
from functions.records.run_rules import RunsRules, Step
from functions.records.unreadable_runs import UnreadableRun, marked, unmarked
from schemas.errors import SchemaError
from schemas.run_record import RunRecord, parse_run_record

T = TypeVar("T")


def _record(doc: Doc | None) -> RunRecord | None:
    return None if doc is None else parse_run_record(doc)


class RunsStore(RunsRules):
    def __init__(self, client: Any, collection: str, work: UnitOfWork | None = None) -> None:
        """`work`: the unit of work shared with the other stores that write runs (the team ledger's); None: one of
        its own."""
        self._client = client
        self._collection = collection
        self.work = work if work is not None else UnitOfWork(client, collection)

    def _ref(self, run_id: str) -> Any:
        return self._client.collection(self._collection).document(run_id)

    def apply(self, run_id: str, step: Step[T]) -> T:
        """Run one rule step on the stored record atomically; write what it returns (the unit of work decides how:
        functions/gcp/unit_of_work.py change)."""
        return self.work.change(run_id, step)

    def create_if_absent(self, run: RunRecord) -> tuple[RunRecord, bool]:
        """Firestore's create(): one caller wins a race, in one call instead of a transaction's three (begin, read,
        commit); a run that exists is read back (one GetDocument), so every delivery but the first learns it was not
        the creator."""
        return self.work.create(run)

    def get(self, run_id: str) -> RunRecord | None:
        """One GetDocument; the unit of work keeps the run as read, so a change that follows is one conditional
        Commit."""
        return self.work.read(run_id)

    def get_many(self, run_ids: Iterable[str], *, batch: int = 100) -> dict[str, RunRecord]:
        """The stored runs among run_ids (batched reads of `batch` documents), by id; ids with no document are left
        out."""
        ids = list(dict.fromkeys(run_ids))
        found: dict[str, RunRecord] = {}
        for start in range(0, len(ids), batch):
            refs = [self._ref(i) for i in ids[start : start + batch]]
            try:
                snapshots = list(self._client.get_all(refs))
            except Exception as exc:
                raise as_transient(exc, "Firestore") from exc
            found.update({s.id: parse_run_record(s.to_dict()) for s in snapshots if s.exists})
        return found

    def find_by_job_id(self, job_id: str) -> RunRecord | None:
        from google.cloud.firestore_v1.base_query import FieldFilter

        try:
            query = self._client.collection(self._collection).where(filter=FieldFilter("vertex.job_id", "==", job_id))
            docs = list(query.limit(2).stream())
            if not docs:
                earlier = self._client.collection(self._collection).where(
                    filter=FieldFilter("submission.job_ids", "array_contains", job_id)
                )
                docs = list(earlier.limit(2).stream())
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return _record(docs[0].to_dict()) if docs else None

    def in_states(self, states: Iterable[str], *, page_size: int = 200) -> Iterator[RunRecord]:
        """Every run in one of states, a page at a time (ordered by document id, so a page boundary is stable)."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        yield from self._paged(FieldFilter("state", "in", list(states)), page_size)

    def in_states_or_unreadable(
        self, states: Iterable[str], *, page_size: int = 200
    ) -> Iterator[RunRecord | UnreadableRun]:
        """in_states, with a document the reader refuses yielded as an UnreadableRun instead of ending the listing
        (the reconciler's: it marks such a run and goes on)."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        yield from self._paged_or_unreadable(FieldFilter("state", "in", list(states)), page_size)

    def _paged(self, where: Any, page_size: int) -> Iterator[RunRecord]:
        for snapshot in paged_snapshots(self._client.collection(self._collection), where, page_size=page_size):
            yield parse_run_record(snapshot.to_dict())

    def _paged_or_unreadable(self, where: Any, page_size: int) -> Iterator[RunRecord | UnreadableRun]:
        for snapshot in paged_snapshots(self._client.collection(self._collection), where, page_size=page_size):
            try:
                yield parse_run_record(snapshot.to_dict())
            except SchemaError as exc:
                yield UnreadableRun(snapshot.id, str(exc))

    def unannounced(self, *, page_size: int = 200) -> Iterator[RunRecord]:
        """Ended runs whose RunFinished is not marked published (submission.results_published == False)."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        yield from self._paged(FieldFilter("submission.results_published", "==", False), page_size)

    def unannounced_or_unreadable(self, *, page_size: int = 200) -> Iterator[RunRecord | UnreadableRun]:
        """unannounced, with a document the reader refuses yielded as an UnreadableRun."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        yield from self._paged_or_unreadable(FieldFilter("submission.results_published", "==", False), page_size)

    def mark_reconcile_error(self, run_id: str, error: str, now: datetime) -> None:
        """One more failed reconcile pass on the run's `reconcile_errors`, in a transaction that writes that field
        alone and reads no other part of the document (one the reader refuses is marked too)."""
        self.work.forget(run_id)
        in_transaction(
            self._client,
            self._ref(run_id),
            lambda cur: (None if cur is None else marked(cur, error, now), None),
        )

    def clear_reconcile_errors(self, run_id: str) -> None:
        """The run reconciled again: its `reconcile_errors` removed (nothing written when it has none)."""
        self.work.forget(run_id)
        in_transaction(self._client, self._ref(run_id), lambda cur: (None if cur is None else unmarked(cur), None))

    def list(self, limit: int = 50) -> list[RunRecord]:
        from google.cloud import firestore

        query = self._client.collection(self._collection).order_by("created_at", direction=firestore.Query.DESCENDING)
        return [parse_run_record(d.to_dict()) for d in query.limit(limit).stream()]
