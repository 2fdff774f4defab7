"""The rules of a registry model's promotion lease (schemas/promotion_lease.py): promotions of one model are decided
one at a time. Pure steps over the stored lease; the Firestore adapter (functions/gcp/model_promotions_store.py) runs
each in one transaction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from schemas.promotion_lease import PromotionLease
from schemas.times import format_timestamp, parse_timestamp

LeaseStep = Callable[[PromotionLease | None], tuple[PromotionLease | None, bool]]
"""A change of the lease: (the lease to write, or None to write nothing; the step's answer)."""


def taken(model_id: str, holder: str, *, now: datetime, until: datetime) -> LeaseStep:
    """Take the model's lease for holder until `until`: free (none, lapsed, or holder's own already); answer whether
    holder has it."""

    def step(cur: PromotionLease | None) -> tuple[PromotionLease | None, bool]:
        if cur is not None and cur.holder != holder and parse_timestamp(cur.until, field="until") > now:
            return None, False
        return PromotionLease(model_id=model_id, holder=holder, until=format_timestamp(until)), True

    return step


def given_back(holder: str, *, now: datetime) -> LeaseStep:
    """End holder's lease now (another's, or none, is left as it is); answer whether it was holder's."""

    def step(cur: PromotionLease | None) -> tuple[PromotionLease | None, bool]:
        if cur is None or cur.holder != holder:
            return None, False
        return replace(cur, until=format_timestamp(now)), True

    return step


__all__ = ["LeaseStep", "given_back", "taken"]
