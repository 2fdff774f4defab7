"""Firestore adapter for run documents: create-if-absent, forward-only transitions and the submission claim,
each inside a transaction so that concurrent deliveries cannot interleave.

Documents are read with `parse_run_record` and written as `RunRecord.to_document()` (times as timestamps); the
operations are the pure rule steps of functions/records/run_rules.py (RunsRules), applied here in a transaction.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from functions.errors import as_transient
from functions.gcp.firestore_paging import paged_snapshots
from functions.gcp.firestore_reads import get_document
from functions.gcp.firestore_tx import created, in_transaction, write_if_unchanged
from functions.gcp.firestore_writes import CommitRider
from functions.records import run_rules
from functions.records.run_rules import Doc, Rider, RunsRules, Step, StoredCopy
from functions.records.unreadable_runs import UnreadableRun, marked, unmarked
from schemas.errors import SchemaError
from schemas.run_record import RunRecord, parse_run_record

T = TypeVar("T")

KNOWN_FOR_S = 30.0
"""How long a run this store wrote is remembered, as written, for the next change to it (write_if_unchanged)."""
KNOWN_KEPT = 64
"""How many such runs are remembered (the most recent)."""


@dataclass(frozen=True)
class _Known:
    doc: Doc
    update_time: Any
    at: float
    record: RunRecord | None = None
    """The record the document was written from, when this store wrote it (else it is read from doc)."""


def _record(doc: Doc | None) -> RunRecord | None:
    return None if doc is None else parse_run_record(doc)


class RunsStore(RunsRules):
    def __init__(self, client: Any, collection: str) -> None:
        self._client = client
        self._collection = collection
        self._known: OrderedDict[str, _Known] = OrderedDict()

    def _ref(self, run_id: str) -> Any:
        return self._client.collection(self._collection).document(run_id)

    def apply(self, run_id: str, step: Step[T]) -> T:
        """Run one rule step on the stored record atomically; write what it returns.

        A run this store wrote itself moments ago (the dispatcher's create, claim and job record follow each other)
        is changed in one conditional Commit on the copy it wrote: the write holds only if the document is still
        the one of that update time, which makes it the same as a transaction that read it. Otherwise (another
        writer came between, the step writes nothing, or the copy is old) the step runs in a transaction on the
        stored document: begin, read, commit."""
        return self.apply_riding(run_id, step, None)

    def apply_riding(self, run_id: str, step: Step[T], rider: Rider | None) -> T:
        """apply; where the step's write is that one conditional Commit and the rider wants it (asked with the step's
        result), the rider's writes go in the same Commit, after the run's (all or none), and it is handed their
        answers. A step decided in a transaction leaves the rider behind, unasked."""
        known = self.copy_of(run_id)
        if known is not None:
            new, result = step(known.record)
            if new is not None:
                doc = new.to_document()
                riding = rider if isinstance(rider, CommitRider) and rider.wanted(result) else None
                also = riding.writes() if riding is not None else ()
                written = write_if_unchanged(self._client, self._ref(run_id), known.doc, known.update_time, doc, also)
                if written is not None:
                    when, answers = written
                    self._remember(run_id, doc, when, new)
                    if riding is not None:
                        riding.answered(answers)
                    return result

        def change(cur: Doc | None) -> tuple[Doc | None, T]:
            new, result = step(_record(cur))
            return (None if new is None else new.to_document()), result

        return in_transaction(
            self._client, self._ref(run_id), change, stored=lambda doc, when: self._remember(run_id, doc, when)
        )

    def _remember(self, run_id: str, doc: Doc | None, update_time: Any, record: RunRecord | None = None) -> None:
        """Keep the run's document as it now stands (None: it has none), and the record it was written from, for the
        next apply."""
        if doc is None or update_time is None:
            self._known.pop(run_id, None)
            return
        self._known[run_id] = _Known(doc, update_time, time.monotonic(), record)
        while len(self._known) > KNOWN_KEPT:
            self._known.popitem(last=False)

    def forget(self, run_id: str) -> None:
        self._known.pop(run_id, None)

    def written(self, run_id: str, doc: Doc | None, update_time: Any, record: RunRecord | None = None) -> None:
        self._remember(run_id, doc, update_time, record)

    def copy_of(self, run_id: str) -> StoredCopy | None:
        """The run as this store last wrote or read it, if that was less than KNOWN_FOR_S ago, handed over (forgotten
        here: whoever writes the run next tells the store, or it reads the run again)."""
        known = self._known.pop(run_id, None)
        if known is None or time.monotonic() - known.at >= KNOWN_FOR_S:
            return None
        return StoredCopy(known.doc, known.update_time, known.record or parse_run_record(known.doc))

    def create_if_absent(self, run: RunRecord) -> tuple[RunRecord, bool]:
        """Firestore's create(): one caller wins a race, in one call instead of a transaction's three (begin, read,
        commit); a run that exists is read back (one GetDocument), so every delivery but the first learns it was not
        the creator."""
        doc = run.to_document()
        when = created(self._client, self._ref(run.run_id), doc)
        if when is not None:
            self._remember(run.run_id, doc, when, run)
            return run, True
        # The run as stored, kept like a run this store wrote: a redelivery then claims it in one conditional Commit.
        existing = self.get_to_change(run.run_id)
        if existing is None:  # deleted between the two calls: decide it in a transaction
            return self.apply(run.run_id, run_rules.create_if_absent(run))
        return existing, False

    def get_to_change(self, run_id: str) -> RunRecord | None:
        """One GetDocument; the run is kept like a run this store wrote (its update time the precondition of the
        next write), so the change that follows is one conditional Commit too."""
        try:
            stored, update_time = get_document(self._client, self._ref(run_id))
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        if stored is None:
            return None
        found = parse_run_record(stored)
        self._remember(run_id, stored, update_time, found)
        return found

    def get(self, run_id: str) -> RunRecord | None:
        try:
            snapshot = self._ref(run_id).get()
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return _record(snapshot.to_dict()) if snapshot.exists else None

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
        self.forget(run_id)
        in_transaction(
            self._client,
            self._ref(run_id),
            lambda cur: (None if cur is None else marked(cur, error, now), None),
        )

    def clear_reconcile_errors(self, run_id: str) -> None:
        """The run reconciled again: its `reconcile_errors` removed (nothing written when it has none)."""
        self.forget(run_id)
        in_transaction(self._client, self._ref(run_id), lambda cur: (None if cur is None else unmarked(cur), None))

    def list(self, limit: int = 50) -> list[RunRecord]:
        from google.cloud import firestore

        query = self._client.collection(self._collection).order_by("created_at", direction=firestore.Query.DESCENDING)
        return [parse_run_record(d.to_dict()) for d in query.limit(limit).stream()]
