"""Firestore adapter for the reconciler's watermarks (schemas/reconcile_watermark.py): one document per shard, read
at the start of a pass and written whole at its end (a later pass of the same shard may overwrite it: a watermark
moved back only makes the next pass list more)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from functions.errors import as_transient
from schemas.reconcile_watermark import ReconcileWatermark, parse_reconcile_watermark


class WatermarksStore:
    def __init__(self, client: Any, collection: str) -> None:
        self._client = client
        self._collection = collection

    def _ref(self, watermark_id: str) -> Any:
        return self._client.collection(self._collection).document(watermark_id)

    def get_many(self, watermark_ids: Iterable[str]) -> dict[str, ReconcileWatermark]:
        """The stored watermarks among the ids (one batched read), by id."""
        refs = [self._ref(i) for i in dict.fromkeys(watermark_ids)]
        try:
            snapshots = list(self._client.get_all(refs))
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return {s.id: parse_reconcile_watermark(s.to_dict()) for s in snapshots if s.exists}

    def put(self, watermark: ReconcileWatermark) -> None:
        try:
            self._ref(watermark.watermark_id).set(watermark.to_document())
        except Exception as exc:
            raise as_transient(exc, f"Firestore write of watermark {watermark.watermark_id}") from exc
