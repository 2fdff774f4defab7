"""ContentRecord: one document per distinct content of a dataset, in the subcollection `contents` of its `datasets`
document (`datasets/{dataset_id}/contents/{digest}`), keyed by the content's digest (readiness.Scan.content_digest:
the names, sizes and checksums of the data objects and landfall.json).

Created with create() by the first version that publishes that content, it names the run that trains it; a later
version with the same content is a DUPLICATE of that run. `landfall retrain` counts `retrains` on it (creating it,
naming no run yet, when absent). Written as `ContentRecord.to_dict()`, read with `parse_content_record`; golden
example schemas/examples/content_record.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.dataset_record import PATH_LEN, SCHEMA_VERSION, read_generation
from schemas.errors import SchemaError
from schemas.fields import Reader

CONTENTS_SUBCOLLECTION = "contents"
"""The subcollection of each `datasets` document that holds its contents."""


@dataclass(frozen=True)
class ContentRecord:
    content_key: str
    """content:BUCKET/PREFIX:DIGEST (content_key_for)."""
    digest: str
    """Hex digest of the content: the document's id."""
    dataset_id: str
    uri: str
    run_id: str
    """The run that trains this content (the latest `landfall retrain` of it, if any); "" before any."""
    idempotency_key: str
    """That run's request key."""
    generation: str
    """The dataset version (completing object's generation) that run came from."""
    object_count: int
    total_bytes: int
    retrains: int = 0
    """How many times `landfall retrain` asked for this content again."""
    created_at: str = ""
    updated_at: str = ""
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "content_key": self.content_key,
            "digest": self.digest,
            "dataset_id": self.dataset_id,
            "uri": self.uri,
            "run_id": self.run_id,
            "idempotency_key": self.idempotency_key,
            "generation": self.generation,
            "object_count": self.object_count,
            "total_bytes": self.total_bytes,
            "retrains": self.retrains,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


def parse_content_record(data: Mapping[str, Any]) -> ContentRecord:
    """Read a stored content document; raises SchemaError naming the field that does not fit."""
    r = Reader(data, "content")
    digest = r.string("digest", max_len=128)
    if not digest or any(ch not in "0123456789abcdef" for ch in digest):
        raise SchemaError(f"{digest!r} is not a lower-case hex digest", field="content.digest")
    return ContentRecord(
        content_key=r.string("content_key", max_len=PATH_LEN),
        digest=digest,
        dataset_id=r.string("dataset_id", max_len=200),
        uri=r.string("uri", max_len=PATH_LEN),
        run_id=r.string("run_id", max_len=200),
        idempotency_key=r.string("idempotency_key", max_len=PATH_LEN),
        generation=read_generation(r),
        object_count=r.integer("object_count", minimum=0),
        total_bytes=r.integer("total_bytes", minimum=0),
        retrains=r.integer("retrains", 0, minimum=0),
        created_at=r.timestamp("created_at", "", allow_empty=True),
        updated_at=r.timestamp("updated_at", "", allow_empty=True),
        schema_version=r.integer("schema_version", SCHEMA_VERSION, minimum=1),
    )


__all__ = ["CONTENTS_SUBCOLLECTION", "ContentRecord", "parse_content_record"]
