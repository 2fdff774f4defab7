"""Firestore adapter for the submission rate limiter (schemas/rate_bucket.py, functions/records/rate_limits.py): a take
is one Commit of two writes to the bucket with atomic field transforms (Maximum, then Increment, whose result is the
answer; a Commit's writes are "always executed atomically and in order",
https://cloud.google.com/firestore/docs/reference/rest/v1/projects.databases.documents/commit), no transaction, so a
burst of deliveries does not collide on the bucket."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from functions.errors import TransientError, as_transient
from functions.records.rate_limits import interval_us, slot_of, to_us
from schemas.rate_bucket import CREATE_CUSTOM_JOB, SCHEMA_VERSION, bucket_id


class RateLimitsStore:
    """Submission slots per region (CreateCustomJob, UploadModel), per_minute at most
    (LANDFALL_VERTEX_CREATE_PER_MINUTE)."""

    def __init__(self, client: Any, collection: str, per_minute: int) -> None:
        self._client = client
        self._collection = collection
        self.per_minute = per_minute

    def take(self, region: str, now: datetime) -> datetime:
        """Reserve the next submission slot in region: now, or the later moment the call may be made."""
        from google.cloud import firestore

        ref = self._client.collection(self._collection).document(bucket_id(CREATE_CUSTOM_JOB, region))
        fields = {
            "call": CREATE_CUSTOM_JOB,
            "region": region,
            "per_minute": self.per_minute,
            "schema_version": SCHEMA_VERSION,
        }
        batch = self._client.batch()
        batch.set(ref, {**fields, "next_slot_us": firestore.Maximum(to_us(now))}, merge=True)
        batch.update(ref, {"next_slot_us": firestore.Increment(interval_us(self.per_minute))})
        try:
            results = batch.commit()
        except Exception as exc:
            raise as_transient(exc, f"Firestore write of {ref.path}") from exc
        answers = list(getattr(results[-1], "transform_results", None) or ()) if results else []
        if not answers:
            raise TransientError(f"Firestore answered no value for the increment of {ref.path}; will retry")
        return slot_of(int(answers[0].integer_value), self.per_minute)
