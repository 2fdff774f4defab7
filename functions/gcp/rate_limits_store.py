"""Firestore adapter for the submission rate limiter (schemas/rate_bucket.py, functions/records/rate_limits.py): a take
is one Commit of two writes to the bucket with atomic field transforms (Maximum, then Increment, whose result is the
answer; a Commit's writes are "always executed atomically and in order",
https://cloud.google.com/firestore/docs/reference/rest/v1/projects.databases.documents/commit), no transaction, so a
burst of deliveries does not collide on the bucket.

The same two writes can ride in the Commit of the dispatcher's claim (functions/gcp/unit_of_work.py, which this store
is the Riding of): the slot is taken if and only if the claim is written, in one call instead of two, and kept here
for the claim's delivery (`taken_with_claim`). The writes are built by the library's own helpers (those its
WriteBatch uses for set(merge=True) and update()), so both ways send the same messages."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from functions.errors import TransientError, as_transient
from functions.gcp.unit_of_work import Riding
from functions.records.rate_limits import interval_us, slot_of, to_us
from schemas.rate_bucket import CREATE_CUSTOM_JOB, SCHEMA_VERSION, bucket_id

RIDDEN_KEPT = 256
"""How many slots taken with claims are kept for their deliveries at most (one is collected right after its claim)."""


class RateLimitsStore(Riding):
    """Submission slots per region (CreateCustomJob, UploadModel), per_minute at most
    (LANDFALL_VERTEX_CREATE_PER_MINUTE)."""

    def __init__(self, client: Any, collection: str, per_minute: int) -> None:
        self._client = client
        self._collection = collection
        self.per_minute = per_minute
        self._templates: dict[str, list[Any]] = {}
        self._ridden: OrderedDict[str, tuple[str, datetime]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, region: str, now: datetime) -> datetime:
        """Reserve the next submission slot in region: now, or the later moment the call may be made."""
        from functions.gcp import firestore_writes

        writes = self.slot_writes(region, now)
        try:
            results = firestore_writes.commit(self._client, writes)
        except Exception as exc:
            raise as_transient(exc, f"Firestore write of {self._path(region)}") from exc
        return self.slot_from(region, results)

    def writes(self, region: str, now: datetime) -> Sequence[Any]:
        return self.slot_writes(region, now)

    def answered(self, run_id: str, region: str, results: Sequence[Any]) -> None:
        slot = self.slot_from(region, results)
        with self._lock:
            self._ridden[run_id] = (region, slot)
            while len(self._ridden) > RIDDEN_KEPT:
                self._ridden.popitem(last=False)

    def taken_with_claim(self, run_id: str) -> tuple[str, datetime] | None:
        """The region and moment of the slot that rode in the Commit of run_id's claim, if one did, handed over once
        (to the delivery that holds the claim)."""
        with self._lock:
            return self._ridden.pop(run_id, None)

    def _path(self, region: str) -> str:
        return f"{self._collection}/{bucket_id(CREATE_CUSTOM_JOB, region)}"

    def slot_writes(self, region: str, now: datetime) -> list[Any]:
        """The take's two protobuf Writes: the bucket raised to now (Maximum), then one interval on (Increment). Built
        by the library once per region; each take copies them with its own moment."""
        template = self._templates.get(region)
        if template is None:
            template = self._templates[region] = self.library_writes(region, 0)
        raised = type(template[0])()
        raised.CopyFrom(template[0])
        raised.update_transforms[0].maximum.integer_value = to_us(now)
        return [raised, template[1]]  # a Commit request copies what it is given: the Increment is shared as it is

    def library_writes(self, region: str, at_us: int) -> list[Any]:
        """slot_writes as the library's WriteBatch builds them for set(merge=True) and update()."""
        from google.cloud import firestore
        from google.cloud.firestore_v1 import _helpers

        path = self._client.collection(self._collection).document(bucket_id(CREATE_CUSTOM_JOB, region))._document_path
        fields = {
            "call": CREATE_CUSTOM_JOB,
            "region": region,
            "per_minute": self.per_minute,
            "schema_version": SCHEMA_VERSION,
            "next_slot_us": firestore.Maximum(at_us),
        }
        raised = _helpers.pbs_for_set_with_merge(path, fields, merge=True)
        step = firestore.Increment(interval_us(self.per_minute))
        stepped = _helpers.pbs_for_update(path, {"next_slot_us": step}, None)
        return [w._pb for w in (*raised, *stepped)]

    def slot_from(self, region: str, results: Sequence[Any]) -> datetime:
        """The slot the Increment's answer (the last write's transform result) names."""
        answers = list(results[-1].transform_results) if results else []
        if not answers:
            raise TransientError(f"Firestore answered no value for the increment of {self._path(region)}; will retry")
        return slot_of(int(answers[0].integer_value), self.per_minute)
