"""In-memory stand-in for the runs store (functions/gcp/runs_store.py RunsStore), for pure-logic tests.

Documents are kept as the dicts Firestore would hold (`RunRecord.to_document()`, times as datetimes), read back
with `parse_run_record` and changed by the same operations (functions/records/run_rules.py RunsRules) that the
Firestore adapter runs in transactions; tests/integration/test_adapter_contracts.py checks both against the same
behaviours.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import TypeVar

from functions.gcp.firestore_tx import Doc
from functions.records.run_rules import RunsRules, Step
from functions.records.unreadable_runs import UnreadableRun, marked, unmarked
from schemas.errors import SchemaError
from schemas.run_record import RunRecord, parse_run_record
from tests.fakes.documents import copy_document

T = TypeVar("T")


def _round_tripped(run: RunRecord) -> Doc:
    """The record's document, checked to read back as the very record: the Firestore adapter hands the record it
    wrote to the next change instead of reading the document again (functions/gcp/runs_store.py), which is only the
    same if every record the rules build survives the round trip."""
    doc = run.to_document()
    back = parse_run_record(copy_document(doc))
    # A NaN (a rejected request may hold one) equals nothing, not even its copy: the reprs decide then.
    if back != run and repr(back) != repr(run):
        raise AssertionError(f"run {run.run_id} does not read back as written: {run} -> {back}")
    return doc


def _or_unreadable(docs: dict[str, Doc]) -> Iterator[RunRecord | UnreadableRun]:
    for run_id, doc in docs.items():
        try:
            yield parse_run_record(doc)
        except SchemaError as exc:
            yield UnreadableRun(run_id, str(exc))


class FakeRuns(RunsRules):
    def __init__(self) -> None:
        self.docs: dict[str, Doc] = {}
        self._lock = threading.Lock()

    def apply(self, run_id: str, step: Step[T]) -> T:
        with self._lock:
            cur = self.docs.get(run_id)
            new, result = step(None if cur is None else parse_run_record(copy_document(cur)))
            if new is not None:
                self.docs[run_id] = _round_tripped(new)
        return result

    def create_if_absent(self, run: RunRecord) -> tuple[RunRecord, bool]:
        """As the adapter: one create() call that one caller wins, not a transaction (no apply)."""
        with self._lock:
            doc = self.docs.get(run.run_id)
            if doc is not None:
                return parse_run_record(copy_document(doc)), False
            self.docs[run.run_id] = _round_tripped(run)
            return run, True

    def put(self, run: RunRecord) -> None:
        """Store a record as it is (a test's starting point)."""
        with self._lock:
            self.docs[run.run_id] = run.to_document()

    def get(self, run_id: str) -> RunRecord | None:
        with self._lock:
            doc = self.docs.get(run_id)
            return None if doc is None else parse_run_record(copy_document(doc))

    def get_many(self, run_ids: Iterable[str], *, batch: int = 100) -> dict[str, RunRecord]:
        with self._lock:
            return {i: parse_run_record(copy_document(self.docs[i])) for i in dict.fromkeys(run_ids) if i in self.docs}

    def find_by_job_id(self, job_id: str) -> RunRecord | None:
        with self._lock:
            docs = [d for d in self.docs.values() if (d.get("vertex") or {}).get("job_id") == job_id]
            docs = docs or [d for d in self.docs.values() if job_id in d["submission"].get("job_ids", [])]
            return parse_run_record(copy_document(docs[0])) if docs else None

    def in_states(self, states: Iterable[str], *, page_size: int = 200) -> Iterator[RunRecord]:
        wanted = set(states)
        with self._lock:
            docs = [copy_document(self.docs[k]) for k in sorted(self.docs) if self.docs[k]["state"] in wanted]
        yield from (parse_run_record(d) for d in docs)

    def in_states_or_unreadable(
        self, states: Iterable[str], *, page_size: int = 200
    ) -> Iterator[RunRecord | UnreadableRun]:
        wanted = set(states)
        with self._lock:
            docs = {k: copy_document(d) for k, d in sorted(self.docs.items()) if d.get("state") in wanted}
        yield from _or_unreadable(docs)

    def unannounced_or_unreadable(self, *, page_size: int = 200) -> Iterator[RunRecord | UnreadableRun]:
        with self._lock:
            docs = {
                k: copy_document(d)
                for k, d in sorted(self.docs.items())
                if (d.get("submission") or {}).get("results_published") is False
            }
        yield from _or_unreadable(docs)

    def mark_reconcile_error(self, run_id: str, error: str, now: datetime) -> None:
        """As the adapter: the one field updated, the rest of the document not read."""
        with self._lock:
            if run_id in self.docs:
                self.docs[run_id] = marked(self.docs[run_id], error, now)

    def clear_reconcile_errors(self, run_id: str) -> None:
        with self._lock:
            doc = unmarked(self.docs[run_id]) if run_id in self.docs else None
            if doc is not None:
                self.docs[run_id] = doc

    def unannounced(self, *, page_size: int = 200) -> Iterator[RunRecord]:
        with self._lock:
            docs = [
                copy_document(self.docs[k])
                for k in sorted(self.docs)
                if self.docs[k]["submission"].get("results_published") is False
            ]
        yield from (parse_run_record(d) for d in docs)

    def list(self, limit: int = 50) -> list[RunRecord]:
        with self._lock:
            docs = sorted(self.docs.values(), key=lambda d: d["created_at"], reverse=True)[:limit]
            return [parse_run_record(copy_document(d)) for d in docs]
