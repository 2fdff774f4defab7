"""Firestore adapter for the promotion leases (schemas/promotion_lease.py, functions/records/promotion_leases.py): one
document per registry model, each change one transaction (functions/gcp/firestore_tx.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from functions.gcp.firestore_tx import in_transaction
from functions.records.promotion_leases import LeaseStep, given_back, taken
from schemas.promotion_lease import PromotionLease, parse_promotion_lease


class ModelPromotionsStore:
    """The promotion lease of each registry model (functions/records/model_registration.py PromotionLock)."""

    def __init__(self, client: Any, collection: str) -> None:
        self._client = client
        self._collection = collection

    def _apply(self, model_id: str, step: LeaseStep) -> bool:
        def change(doc: dict[str, Any] | None) -> tuple[dict[str, Any] | None, bool]:
            new, answer = step(None if doc is None else parse_promotion_lease(doc))
            return (None if new is None else new.to_document()), answer

        ref = self._client.collection(self._collection).document(model_id)
        return in_transaction(self._client, ref, change)

    def hold(self, model_id: str, holder: str, *, now: datetime, until: datetime) -> bool:
        """Take the model's lease for holder until `until`; False while another holds it."""
        return self._apply(model_id, taken(model_id, holder, now=now, until=until))

    def release(self, model_id: str, holder: str, *, now: datetime) -> None:
        """Give holder's lease back (another's is left alone)."""
        self._apply(model_id, given_back(holder, now=now))

    def get(self, model_id: str) -> PromotionLease | None:
        from functions.errors import as_transient

        try:
            snapshot = self._client.collection(self._collection).document(model_id).get()
        except Exception as exc:
            raise as_transient(exc, f"Firestore read of {self._collection}/{model_id}") from exc
        return parse_promotion_lease(snapshot.to_dict()) if snapshot.exists else None


__all__ = ["ModelPromotionsStore"]
