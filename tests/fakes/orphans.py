"""In-memory stand-in for the orphans store (functions/gcp/orphans_store.py OrphansStore), for pure-logic tests.
It applies the same steps (functions/records/orphans.py); tests/integration/test_adapter_contracts.py checks both."""

from __future__ import annotations

import threading
from typing import Any

from functions.records.orphans import OrphanStep
from schemas.orphan_record import OrphanRecord, parse_orphan_record
from tests.fakes.documents import copy_document


class FakeOrphans:
    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def record(self, orphan: OrphanRecord) -> bool:
        with self._lock:
            if orphan.orphan_id in self.docs:
                return False
            self.docs[orphan.orphan_id] = orphan.to_document()
            return True

    def apply(self, orphan_id: str, step: OrphanStep) -> bool:
        with self._lock:
            cur = self.docs.get(orphan_id)
            new, written = step(None if cur is None else parse_orphan_record(copy_document(cur)))
            if new is not None:
                self.docs[orphan_id] = new.to_document()
            return written

    def get(self, orphan_id: str) -> OrphanRecord | None:
        with self._lock:
            doc = self.docs.get(orphan_id)
            return None if doc is None else parse_orphan_record(copy_document(doc))

    def list(self, limit: int = 100) -> list[OrphanRecord]:
        with self._lock:
            docs = sorted(self.docs.values(), key=lambda d: d["found_at"], reverse=True)[:limit]
            return [parse_orphan_record(copy_document(d)) for d in docs]
