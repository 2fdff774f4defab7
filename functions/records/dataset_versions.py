"""Pure rules for ingest's records: claiming and finishing a dataset version (the outbox, under the shared lease
rule of leases.py), which version may train a content (the same objects are trained once, unless retrained on
purpose) and which version's outcome a dataset document keeps. The Firestore adapter
(functions/gcp/datasets_store.py) applies them in transactions; tests/fakes/ingest.py applies the same ones.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from functions.records.leases import Claim, ClaimOutcome, Lease, held_by_other
from schemas.dataset_record import FINAL_VERSION_STATUSES, VersionStatus
from schemas.times import format_timestamp, parse_timestamp

Doc = dict[str, Any]


def version_lease(doc: Doc) -> Lease | None:
    """The lease a version document holds: only a CLAIMED version has one (`owner` until `claim_until`)."""
    if VersionStatus(doc["status"]) != VersionStatus.CLAIMED:
        return None
    return Lease(str(doc.get("owner", "")), str(doc["claim_until"]))


def _with_lease(doc: Doc, lease: Lease, now: datetime, attempts: int) -> Doc:
    return {
        **doc,
        "status": VersionStatus.CLAIMED.value,
        "owner": lease.owner,
        "claim_until": lease.until,
        "updated_at": format_timestamp(now),
        "attempts": attempts,
    }


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


def content_claim(cur: Doc | None, holder: Doc | None, new: Doc, *, now: datetime, retrain: bool) -> Claim[Doc]:
    """Whether the version `new["run_id"]` may publish this content, and the content document that records it.

    cur is the content document (None: never seen), holder the version document of the run it names. DONE: that
    run was published, so this version is a duplicate of it. BUSY: that version is being published by a live
    delivery right now. Otherwise CLAIMED: the content is new, or this version's own, or the version holding it
    never published (refused by the topic, or its delivery died and its lease lapsed); a retrain always claims.
    """
    stamp = format_timestamp(now)
    if cur is None:
        return Claim(
            ClaimOutcome.CLAIMED, {**copy.deepcopy(new), "retrains": 0, "created_at": stamp, "updated_at": stamp}
        )
    if cur.get("run_id") == new["run_id"]:
        return Claim(ClaimOutcome.CLAIMED, cur)
    if not retrain and holder is not None:
        status = VersionStatus(holder["status"])
        if status == VersionStatus.PUBLISHED:
            return Claim(ClaimOutcome.DONE, cur)
        lease = version_lease(holder)
        if lease is not None and lease.live(now):
            return Claim(ClaimOutcome.BUSY, cur)
    taken = {**cur, **{k: new[k] for k in _HOLDER_FIELDS}, "updated_at": stamp}
    return Claim(ClaimOutcome.CLAIMED, taken)


_HOLDER_FIELDS = ("run_id", "idempotency_key", "generation", "object_count", "total_bytes")
"""What a content document says about the version that trains it (replaced when another version takes it)."""


def retrain_counted(cur: Doc | None, new: Doc, *, now: datetime) -> Doc:
    """The content document after one more `landfall retrain` of it (created, naming no run yet, if absent)."""
    stamp = format_timestamp(now)
    base = (
        cur
        if cur is not None
        else {**copy.deepcopy(new), "run_id": "", "idempotency_key": "", "retrains": 0, "created_at": stamp}
    )
    return {**base, "retrains": int(base.get("retrains", 0)) + 1, "updated_at": stamp}


# Unanswered versions: a PUBLISHED version is stored with `answered: False` until the reconciler sees the run its
# request names; while none exists after a grace period it publishes the kept request again (the dispatcher's
# exactly-once path makes a duplicate harmless), claiming each republish first so two passes publish it once.


def _published_unanswered(cur: Doc | None) -> bool:
    return cur is not None and cur.get("status") == VersionStatus.PUBLISHED and cur.get("answered") is False


def answered(cur: Doc | None, *, now: datetime) -> Doc | None:
    """The version once the run its request names exists (None: nothing to write, it was marked already)."""
    if not _published_unanswered(cur):
        return None
    assert cur is not None
    return {**cur, "answered": True, "answered_at": format_timestamp(now)}


def republish_claimed(cur: Doc | None, *, now: datetime, grace_seconds: int) -> Doc | None:
    """The version with a republish claimed at `now` (`last_republished_at`), or None when none is due: it is not
    an unanswered PUBLISHED version, or it was published (or republished) less than grace_seconds ago."""
    if not _published_unanswered(cur):
        return None
    assert cur is not None
    last = cur.get("last_republished_at") or cur.get("updated_at") or ""
    if last and (now - parse_timestamp(str(last), field="last_republished_at")).total_seconds() < grace_seconds:
        return None
    return {**cur, "last_republished_at": format_timestamp(now)}


def republish_counted(cur: Doc | None, *, message_id: str) -> Doc | None:
    """The version after its claimed republish went out as message_id (`republished_count` one more)."""
    if cur is None:
        return None
    return {
        **cur,
        "republished_count": int(cur.get("republished_count") or 0) + 1,
        "last_republished_message_id": message_id,
    }


def _generation(doc: Doc | None) -> int:
    version = (doc or {}).get("version") or {}
    try:
        return int(version.get("generation") or 0)
    except (TypeError, ValueError):
        return 0


def newer_version(cur: Doc | None, new: Doc) -> bool:
    """Whether new may replace cur: a dataset document never goes back to an older version's outcome."""
    return cur is None or _generation(new) >= _generation(cur)


__all__ = [
    "answered",
    "claim",
    "content_claim",
    "finished",
    "first_claim",
    "newer_version",
    "republish_claimed",
    "republish_counted",
    "retrain_counted",
    "version_lease",
]
