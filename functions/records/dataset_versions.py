"""Pure rules for ingest's records: claiming and finishing a dataset version (the outbox, under the shared lease
rule of leases.py), which version may train a content (the same objects are trained once, unless retrained on
purpose) and which version's outcome a dataset document keeps. The Firestore adapter
(functions/gcp/datasets_store.py) applies them in transactions; tests/fakes/ingest.py applies the same ones.

They take and return the typed records of schemas/ (DatasetRecord, DatasetVersion, ContentRecord); the adapters
parse what they read and write `to_dict()`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any

from functions.records.leases import Claim, ClaimOutcome, Lease, held_by_other
from functions.records.retries import retry_request
from schemas.content_record import ContentRecord
from schemas.dataset_record import DatasetRecord, DatasetStatus, VersionStatus
from schemas.dataset_version import DatasetVersion
from schemas.errors import SchemaError
from schemas.run_record import RunRecord
from schemas.times import format_timestamp, parse_timestamp
from schemas.training_request import TrainingRequest


def version_lease(version: DatasetVersion) -> Lease | None:
    """The lease a version holds: only a CLAIMED version has one (`owner` until `claim_until`)."""
    if version.status != VersionStatus.CLAIMED:
        return None
    return Lease(version.owner, version.claim_until)


def _with_lease(version: DatasetVersion, lease: Lease, now: datetime, attempts: int) -> DatasetVersion:
    return replace(
        version,
        status=VersionStatus.CLAIMED,
        owner=lease.owner,
        claim_until=lease.until,
        updated_at=format_timestamp(now),
        attempts=attempts,
    )


def first_claim(version: DatasetVersion, *, owner: str, now: datetime, lease_seconds: int) -> DatasetVersion:
    """The version as created by the first delivery that sees it: CLAIMED by `owner`."""
    lease = Lease.granted(owner, now=now, seconds=lease_seconds)
    return replace(_with_lease(version, lease, now, 1), created_at=format_timestamp(now))


def claim(cur: DatasetVersion, *, owner: str, now: datetime, lease_seconds: int) -> Claim[DatasetVersion]:
    """Whether a delivery may take an existing version, and the version that records its claim."""
    if cur.final:
        return Claim(ClaimOutcome.DONE, cur)
    if held_by_other(version_lease(cur), owner, now):
        return Claim(ClaimOutcome.BUSY, cur)
    lease = Lease.granted(owner, now=now, seconds=lease_seconds)
    return Claim(ClaimOutcome.CLAIMED, _with_lease(cur, lease, now, cur.attempts + 1))


def finished(
    cur: DatasetVersion | None,
    *,
    owner: str,
    status: VersionStatus,
    now: datetime,
    outcome: VersionOutcome | None = None,
) -> DatasetVersion | None:
    """The version after `owner` records its outcome (`status` CLAIMED gives the claim back early), or None when
    that is not `owner`'s to write: the version is gone, final already, or claimed by another live delivery."""
    if cur is None or cur.final:
        return None
    if held_by_other(version_lease(cur), owner, now):
        return None
    stamp = format_timestamp(now)
    new = replace(cur, status=status, claim_until=stamp, updated_at=stamp)
    return new if outcome is None else outcome.applied(new)


@dataclass(frozen=True)
class VersionOutcome:
    """What finishing a version records besides its status (None: left as it was)."""

    reason: str | None = None
    message_id: str | None = None
    request: dict[str, Any] | None = None
    content_key: str | None = None
    duplicate_of: str | None = None
    answered: bool | None = None

    def applied(self, version: DatasetVersion) -> DatasetVersion:
        changes = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
        return replace(version, **changes)


def content_claim(
    cur: ContentRecord | None, holder: DatasetVersion | None, new: ContentRecord, *, now: datetime, retrain: bool
) -> Claim[ContentRecord]:
    """Whether the version `new.run_id` may publish this content, and the content record that says so.

    cur is the content record (None: never seen), holder the version of the run it names. DONE: that run was
    published, so this version is a duplicate of it. BUSY: that version is being published by a live delivery right
    now. Otherwise CLAIMED: the content is new, or this version's own, or the version holding it never published
    (refused by the topic, or its delivery died and its lease lapsed); a retrain always claims.
    """
    stamp = format_timestamp(now)
    if cur is None:
        return Claim(ClaimOutcome.CLAIMED, replace(new, retrains=0, created_at=stamp, updated_at=stamp))
    if cur.run_id == new.run_id:
        return Claim(ClaimOutcome.CLAIMED, cur)
    if not retrain and holder is not None:
        if holder.status == VersionStatus.PUBLISHED:
            return Claim(ClaimOutcome.DONE, cur)
        lease = version_lease(holder)
        if lease is not None and lease.live(now):
            return Claim(ClaimOutcome.BUSY, cur)
    taken = replace(
        cur,
        run_id=new.run_id,
        idempotency_key=new.idempotency_key,
        generation=new.generation,
        object_count=new.object_count,
        total_bytes=new.total_bytes,
        updated_at=stamp,
    )
    return Claim(ClaimOutcome.CLAIMED, taken)


def retrain_counted(cur: ContentRecord | None, new: ContentRecord, *, now: datetime) -> ContentRecord:
    """The content record after one more `landfall retrain` of it (created, naming no run yet, if absent)."""
    stamp = format_timestamp(now)
    base = cur if cur is not None else replace(new, run_id="", idempotency_key="", retrains=0, created_at=stamp)
    return replace(base, retrains=base.retrains + 1, updated_at=stamp)


# Unanswered versions: a PUBLISHED version is stored with `answered: False` until the reconciler sees the run its
# request names; while none exists after a grace period it publishes the kept request again (the dispatcher's
# exactly-once path makes a duplicate harmless), claiming each republish first so two passes publish it once.


def _published_unanswered(cur: DatasetVersion | None) -> bool:
    return cur is not None and cur.status == VersionStatus.PUBLISHED and cur.answered is False


def answered(cur: DatasetVersion | None, *, now: datetime) -> DatasetVersion | None:
    """The version once the run its request names exists (None: nothing to write, it was marked already)."""
    if cur is None or not _published_unanswered(cur):
        return None
    return replace(cur, answered=True, answered_at=format_timestamp(now))


def republish_claimed(cur: DatasetVersion | None, *, now: datetime, grace_seconds: int) -> DatasetVersion | None:
    """The version with a republish claimed at `now` (`last_republished_at`), or None when none is due: it is not
    an unanswered PUBLISHED version, or it was published (or republished) less than grace_seconds ago."""
    if cur is None or not _published_unanswered(cur):
        return None
    last = cur.last_republished_at or cur.updated_at
    if last and (now - parse_timestamp(last, field="last_republished_at")).total_seconds() < grace_seconds:
        return None
    return replace(cur, last_republished_at=format_timestamp(now))


def republish_counted(cur: DatasetVersion | None, *, message_id: str) -> DatasetVersion | None:
    """The version after its claimed republish went out as message_id (`republished_count` one more)."""
    if cur is None:
        return None
    return replace(cur, republished_count=(cur.republished_count or 0) + 1, last_republished_message_id=message_id)


def newer_version(cur: DatasetRecord | None, new: DatasetRecord) -> bool:
    """Whether new may replace cur: a dataset document never goes back to an older version's outcome."""
    return cur is None or new.generation >= cur.generation


def collecting(cur: DatasetRecord | None, new: DatasetRecord) -> DatasetRecord | None:
    """The dataset marked COLLECTING (keeping the version it shows), or None when it is collecting already."""
    if cur is not None and cur.status == DatasetStatus.COLLECTING:
        return None
    return replace(new, version=None if cur is None else cur.version)


def made_by_ingest(version: DatasetVersion | None, request: TrainingRequest) -> bool | None:
    """Whether ingest made the request: its dataset version is in ingest's outbox under the run's id (a document only
    Landfall's functions write), PUBLISHED with that very request (what ingest published, recorded right after).
    None: not known yet (the version is CLAIMED: ingest published and has not recorded what, a moment's race; ask
    again shortly). A version that published nothing (refused, waiting, a duplicate) made no request."""
    if version is None:
        return False
    uri = f"gs://{request.dataset.bucket}/{request.dataset.prefix}"
    if version.uri.rstrip("/") != uri.rstrip("/"):
        return False
    if version.request is not None:
        return version.request == request.to_dict()
    return None if version.status == VersionStatus.CLAIMED else False


def retry_of_team_run(old: RunRecord | None, request: TrainingRequest) -> bool:
    """Whether the request is `landfall retry` of a run charged to a team: the old run names this run as its retry
    (set once, in the retry's own transaction), was charged to a team, and the request is exactly its retry request
    (functions/records/retries.py retry_request: the same trainer, model and data; only its key, lineage and time
    differ), so no one else's code rides on the team's retry."""
    if old is None or old.team is None or old.retried_by != request.run_id:
        return False
    try:
        expected = retry_request(old, datetime.now(UTC), from_scratch=not request.checkpoint_lineage)
    except SchemaError:
        return False
    return replace(expected, created_at=request.created_at).to_dict() == request.to_dict()


__all__ = [
    "VersionOutcome",
    "answered",
    "claim",
    "collecting",
    "content_claim",
    "finished",
    "first_claim",
    "made_by_ingest",
    "newer_version",
    "republish_claimed",
    "republish_counted",
    "retrain_counted",
    "retry_of_team_run",
    "version_lease",
]
