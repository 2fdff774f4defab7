"""RateBucket: Landfall's limiter of Vertex AI calls of one kind in one region, one document per (call, region) in the
Firestore collection `rate_limits` (topology firestore.rate_limits_collection), keyed by `bucket_id(call, region)`.

The limiter hands out slots (functions/records/rate_limits.py): each CreateCustomJob in the region takes the next
free one, `next_slot_us`, and moves it on by 60 / per_minute seconds, so no 60 seconds hold more than per_minute calls.
Written with atomic field transforms (functions/gcp/rate_limits_store.py), read with `parse_rate_bucket`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from schemas.fields import Reader

SCHEMA_VERSION = 1

CREATE_CUSTOM_JOB = "create-custom-job"
"""The region's submission bucket (LANDFALL_VERTEX_CREATE_PER_MINUTE): CreateCustomJob and UploadModel, which Google
counts in one quota, "Job or LRO submission requests" (docs/deploy.md); the id is kept from when it held jobs only."""


def bucket_id(call: str, region: str) -> str:
    return f"{call}--{region}"


@dataclass(frozen=True)
class RateBucket:
    call: str
    """Which Vertex AI call it limits: create-custom-job."""
    region: str
    per_minute: int
    """The limit of the last take (a changed setting takes effect from the next slot)."""
    next_slot_us: int
    """Microseconds since the Unix epoch (UTC): the earliest moment the next call may be made."""
    schema_version: int = SCHEMA_VERSION

    def to_document(self) -> dict[str, Any]:
        return asdict(self)


def parse_rate_bucket(data: object) -> RateBucket:
    """A stored bucket document; raises SchemaError naming the field that does not fit."""
    r = Reader(data, "rate_bucket")
    return RateBucket(
        call=r.string("call"),
        region=r.string("region"),
        per_minute=r.integer("per_minute", minimum=1),
        next_slot_us=r.integer("next_slot_us", minimum=0),
        schema_version=r.integer("schema_version", SCHEMA_VERSION),
    )
