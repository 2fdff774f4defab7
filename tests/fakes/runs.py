"""In-memory stand-in for the runs store (functions/gcp/runs_store.py RunsStore), for pure-logic tests.

Documents are kept as the dicts Firestore would hold (`RunRecord.to_dict()`), read back with `parse_run_record`
and changed by the same rule steps (functions/records/run_rules.py) the Firestore adapter runs in transactions;
tests/integration/test_adapter_contracts.py checks both against the same behaviours.
"""

from __future__ import annotations

import copy
import threading
from datetime import datetime
from typing import TypeVar

from functions.records import run_rules
from functions.records.leases import Claim
from functions.records.run_rules import Change, Doc, Step
from schemas.run_record import RunRecord, RunState, parse_run_record

T = TypeVar("T")


class FakeRuns:
    def __init__(self) -> None:
        self.docs: dict[str, Doc] = {}
        self._lock = threading.Lock()

    def _apply(self, run_id: str, step: Step[T]) -> T:
        with self._lock:
            cur = self.docs.get(run_id)
            new, result = step(None if cur is None else parse_run_record(copy.deepcopy(cur)))
            if new is not None:
                self.docs[run_id] = new.to_dict()
            return result

    def put(self, run: RunRecord) -> None:
        """Store a record as it is (a test's starting point)."""
        with self._lock:
            self.docs[run.run_id] = run.to_dict()

    def get(self, run_id: str) -> RunRecord | None:
        with self._lock:
            doc = self.docs.get(run_id)
            return None if doc is None else parse_run_record(copy.deepcopy(doc))

    def create_if_absent(self, run: RunRecord) -> tuple[RunRecord, bool]:
        return self._apply(run.run_id, run_rules.create_if_absent(run))

    def transition(self, run_id: str, state: RunState, *, now: datetime, detail: str = "",
                   change: Change | None = None) -> tuple[RunRecord | None, bool]:
        return self._apply(run_id, run_rules.transition(state, now=now, detail=detail, change=change))

    def merge(self, run_id: str, change: Change, *, now: datetime) -> RunRecord | None:
        return self._apply(run_id, run_rules.merge(now=now, change=change))

    def claim_submission(self, run_id: str, *, owner: str, now: datetime, lease_seconds: int) -> Claim[RunRecord]:
        return self._apply(run_id, run_rules.claim_submission(run_id, owner=owner, now=now,
                                                              lease_seconds=lease_seconds))

    def find_by_job_id(self, job_id: str) -> RunRecord | None:
        with self._lock:
            docs = [d for d in self.docs.values() if (d.get("vertex") or {}).get("job_id") == job_id]
            return parse_run_record(copy.deepcopy(docs[0])) if docs else None

    def list(self, limit: int = 50) -> list[RunRecord]:
        with self._lock:
            docs = sorted(self.docs.values(), key=lambda d: d["created_at"], reverse=True)[:limit]
            return [parse_run_record(copy.deepcopy(d)) for d in docs]
