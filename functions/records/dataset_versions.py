"""Pure rules for ingest's records: claiming and finishing a dataset version (the outbox, under the shared lease
rule of leases.py) and which version's outcome a dataset document keeps. The Firestore adapter
(functions/gcp/datasets_store.py) applies them in transactions; tests/fakes/ingest.py applies the same ones.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from functions.records.leases import Claim, ClaimOutcome, Lease, held_by_other
from schemas.dataset_record import FINAL_VERSION_STATUSES, VersionStatus
from schemas.times import format_timestamp

Doc = dict[str, Any]


def version_lease(doc: Doc) -> Lease | None:
    """The lease a version document holds: only a CLAIMED version has one (`owner` until `claim_until`)."""
    if VersionStatus(doc["status"]) != VersionStatus.CLAIMED:
        return None
    return Lease(str(doc.get("owner", "")), str(doc["claim_until"]))


def _with_lease(doc: Doc, lease: Lease, now: datetime, attempts: int) -> Doc:
    return {**doc, "status": VersionStatus.CLAIMED.value, "owner": lease.owner, "claim_until": lease.until,
            "updated_at": format_timestamp(now), "attempts": attempts}


def first_claim(doc: Doc, *, owner: str, now: datetime, lease_seconds: int) -> Doc:
    """The version document as created by the first delivery that sees this version: CLAIMED by `owner`."""
    lease = Lease.granted(owner, now=now, seconds=lease_seconds)
    return {**_with_lease(copy.deepcopy(doc), lease, now, 1), "created_at": format_timestamp(now)}


def claim(cur: Doc, *, owner: str, now: datetime, lease_seconds: int) -> Claim[Doc]:
    """Whether a delivery may take an existing version document, and the document that records its claim."""
    if VersionStatus(cur["status"]) in FINAL_VERSION_STATUSES:
        return Claim(ClaimOutcome.DONE, cur)
    if held_by_other(version_lease(cur), owner, now):
        return Claim(ClaimOutcome.BUSY, cur)
    lease = Lease.granted(owner, now=now, seconds=lease_seconds)
    return Claim(ClaimOutcome.CLAIMED, _with_lease(copy.deepcopy(cur), lease, now, int(cur.get("attempts", 0)) + 1))


def finished(cur: Doc | None, *, owner: str, status: VersionStatus, now: datetime, updates: Doc) -> Doc | None:
    """The version after `owner` records its outcome (`status` CLAIMED gives the claim back early), or None when
    that is not `owner`'s to write: the version is gone, final already, or claimed by another live delivery."""
    if cur is None or VersionStatus(cur["status"]) in FINAL_VERSION_STATUSES:
        return None
    if held_by_other(version_lease(cur), owner, now):
        return None
    stamp = format_timestamp(now)
    return {**cur, **updates, "status": status.value, "claim_until": stamp, "updated_at": stamp}


def _generation(doc: Doc | None) -> int:
    version = (doc or {}).get("version") or {}
    try:
        return int(version.get("generation") or 0)
    except (TypeError, ValueError):
        return 0


def newer_version(cur: Doc | None, new: Doc) -> bool:
    """Whether new may replace cur: a dataset document never goes back to an older version's outcome."""
    return cur is None or _generation(new) >= _generation(cur)


__all__ = ["claim", "finished", "first_claim", "newer_version", "version_lease"]
