"""Firestore adapter for the submission rate limiter (schemas/rate_bucket.py, functions/records/rate_limits.py): one
transaction on the (call, region) bucket per slot taken."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from functions.gcp.firestore_tx import in_transaction
from functions.records.rate_limits import take_slot
from functions.records.run_rules import Doc
from schemas.rate_bucket import CREATE_CUSTOM_JOB, bucket_id, parse_rate_bucket


class RateLimitsStore:
    """CreateCustomJob slots per region, per_minute at most (LANDFALL_VERTEX_CREATE_PER_MINUTE)."""

    def __init__(self, client: Any, collection: str, per_minute: int) -> None:
        self._client = client
        self._collection = collection
        self.per_minute = per_minute

    def take(self, region: str, now: datetime) -> datetime:
        """Reserve the next CreateCustomJob slot in region: now, or the later moment the call may be made."""
        step = take_slot(CREATE_CUSTOM_JOB, region, per_minute=self.per_minute, now=now)
        ref = self._client.collection(self._collection).document(bucket_id(CREATE_CUSTOM_JOB, region))

        def change(cur: Doc | None) -> tuple[Doc | None, datetime]:
            bucket, slot = step(None if cur is None else parse_rate_bucket(cur))
            return bucket.to_document(), slot

        result: datetime = in_transaction(self._client, ref, change)
        return result
