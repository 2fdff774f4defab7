"""In-memory stand-in for the reconciler's watermarks store (functions/gcp/watermarks_store.py), for pure-logic
tests: documents kept as `ReconcileWatermark.to_document()` and read back with `parse_reconcile_watermark`."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from schemas.reconcile_watermark import ReconcileWatermark, parse_reconcile_watermark


class FakeWatermarks:
    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}

    def get_many(self, watermark_ids: Iterable[str]) -> dict[str, ReconcileWatermark]:
        return {i: parse_reconcile_watermark(copy.deepcopy(self.docs[i])) for i in watermark_ids if i in self.docs}

    def put(self, watermark: ReconcileWatermark) -> None:
        self.docs[watermark.watermark_id] = watermark.to_document()
