"""ReconcileWatermark: how far one shard of the reconciler's passes has seen Vertex, one document per shard in the
Firestore collection `reconciler` (topology firestore.reconciler_collection), id `shard-K-of-N`.

Per region it keeps when the last complete pass of the shard began (`regions`): the next pass asks ListCustomJobs
only for the labelled jobs updated since then, less an overlap (functions/reconciler/changes.py). A region missing
here, or one whose time is older than LANDFALL_RECONCILE_FULL_AFTER_SECONDS, gets a full pass (every open run's job
read). Written as `ReconcileWatermark.to_document()`, read with `parse_reconcile_watermark`;
`schemas/examples/reconcile_watermark.json`. Bounded: one entry per job region.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.errors import SchemaError
from schemas.fields import Reader

SCHEMA_VERSION = 1
MAX_REGIONS = 64
"""Regions one watermark keeps (Vertex AI has fewer than 50 regions); more is refused as a drifted document."""


def watermark_id(shard: int, shards: int) -> str:
    """The document id of shard `shard` (0-based) of `shards`: `shard-K-of-N`."""
    return f"shard-{shard}-of-{shards}"


@dataclass(frozen=True)
class ReconcileWatermark:
    shard: int
    """0 .. shards-1: which open runs the shard's passes look at (functions/reconciler/changes.py shard_of)."""
    shards: int
    """LANDFALL_RECONCILE_SHARDS when it was written; a document of another shard count is not used."""
    passed_at: str
    """RFC 3339: when the shard's last pass began (the shard whose pass is oldest goes next)."""
    regions: dict[str, str] = field(default_factory=dict)
    """Region -> RFC 3339: the start of the last pass that saw every change of the shard's jobs in that region."""
    schema_version: int = SCHEMA_VERSION

    @property
    def watermark_id(self) -> str:
        return watermark_id(self.shard, self.shards)

    def to_document(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "shard": self.shard,
            "shards": self.shards,
            "passed_at": self.passed_at,
            "regions": dict(self.regions),
        }


def parse_reconcile_watermark(data: object) -> ReconcileWatermark:
    """Read a stored watermark document; raises SchemaError naming the field that does not fit."""
    r = Reader(data, "reconcile_watermark")
    shards = r.integer("shards", minimum=1)
    shard = r.integer("shard", minimum=0)
    if shard >= shards:
        raise SchemaError(f"expected a shard below shards ({shards}), found {shard}", field="reconcile_watermark.shard")
    regions = r.string_map("regions", {})
    if len(regions) > MAX_REGIONS:
        raise SchemaError(
            f"expected at most {MAX_REGIONS} regions, found {len(regions)}", field="reconcile_watermark.regions"
        )
    places = r.obj("regions", {})
    return ReconcileWatermark(
        shard=shard,
        shards=shards,
        passed_at=r.timestamp("passed_at"),
        regions={region: places.timestamp(region) for region in regions},
        schema_version=r.integer("schema_version", SCHEMA_VERSION),
    )


__all__ = ["SCHEMA_VERSION", "ReconcileWatermark", "parse_reconcile_watermark", "watermark_id"]
