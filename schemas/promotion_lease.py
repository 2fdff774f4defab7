"""PromotionLease: which registration decides a registry model's promotion now, one document per registry model in
the Firestore collection `model_promotions` (topology firestore.model_promotions_collection), id the model id.

Promotions of one model are decided one at a time: a registration holds the model's lease while it reads the version
holding `production`, decides, uploads and moves the alias (functions/records/model_registration.py), so each
decision is taken against production as it is when the alias moves. A lease whose `until` has passed is free (its
holder died). Written as `PromotionLease.to_document()`, read with `parse_promotion_lease`;
`schemas/examples/promotion_lease.json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas.fields import Reader

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class PromotionLease:
    model_id: str
    """The registry model (schemas/model_version.py model_id_for)."""
    holder: str
    """The run whose registration holds the lease."""
    until: str
    """RFC 3339: when the lease lapses; a lease given back ends at the moment it was given back."""
    schema_version: int = SCHEMA_VERSION

    def to_document(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "model_id": self.model_id,
            "holder": self.holder,
            "until": self.until,
        }


def parse_promotion_lease(data: object) -> PromotionLease:
    """Read a stored lease document; raises SchemaError naming the field that does not fit."""
    r = Reader(data, "promotion_lease")
    return PromotionLease(
        model_id=r.string("model_id", max_len=63),
        holder=r.string("holder", max_len=200),
        until=r.timestamp("until"),
        schema_version=r.integer("schema_version", SCHEMA_VERSION),
    )


__all__ = ["SCHEMA_VERSION", "PromotionLease", "parse_promotion_lease"]
