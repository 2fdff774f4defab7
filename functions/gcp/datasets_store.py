"""Firestore adapter for ingest: dataset documents (status and reason per prefix) and the version outbox
(one document per dataset version, claimed under a lease and finished exactly once).

The claim rules are pure functions (`claim`, `newer_version`) so they can be tested without a server.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from functions.errors import as_transient
from functions.gcp.firestore_tx import in_transaction
from functions.records.run_rules import Doc
from schemas.dataset_record import FINAL_VERSION_STATUSES, DatasetStatus, VersionStatus
from schemas.times import format_timestamp, parse_timestamp


class ClaimOutcome(StrEnum):
    CLAIMED = "claimed"
    """This delivery owns the version until the lease ends: evaluate, publish, finish."""
    DONE = "done"
    """Published or refused already: a duplicate delivery."""
    BUSY = "busy"
    """Another delivery holds a live claim: retry later."""


@dataclass(frozen=True)
class VersionClaim:
    outcome: ClaimOutcome
    doc: Doc


def claim(cur: Doc, *, owner: str, now: datetime, lease_seconds: int) -> VersionClaim:
    """Whether a delivery may take an existing version document (pure)."""
    status = VersionStatus(cur["status"])
    if status in FINAL_VERSION_STATUSES:
        return VersionClaim(ClaimOutcome.DONE, cur)
    if status == VersionStatus.CLAIMED and parse_timestamp(cur["claim_until"], field="claim_until") > now:
        return VersionClaim(ClaimOutcome.BUSY, cur)
    new = {**copy.deepcopy(cur), "status": VersionStatus.CLAIMED.value, "owner": owner,
           "claim_until": format_timestamp(now + timedelta(seconds=lease_seconds)), "updated_at": format_timestamp(now),
           "attempts": int(cur.get("attempts", 0)) + 1}
    return VersionClaim(ClaimOutcome.CLAIMED, new)


def _generation(doc: Doc | None) -> int:
    version = (doc or {}).get("version") or {}
    try:
        return int(version.get("generation") or 0)
    except (TypeError, ValueError):
        return 0


def newer_version(cur: Doc | None, new: Doc) -> bool:
    """Whether new may replace cur: a dataset document never goes back to an older version's outcome."""
    return cur is None or _generation(new) >= _generation(cur)


class DatasetsStore:
    def __init__(self, client: Any, datasets_collection: str, versions_collection: str) -> None:
        self._client = client
        self._datasets = datasets_collection
        self._versions = versions_collection

    def _dataset_ref(self, dataset_id: str) -> Any:
        return self._client.collection(self._datasets).document(dataset_id)

    def _version_ref(self, run_id: str) -> Any:
        return self._client.collection(self._versions).document(run_id)

    # datasets ---------------------------------------------------------------------------------------------------
    def datasets(self, dataset_ids: Iterable[str]) -> dict[str, Doc]:
        refs = [self._dataset_ref(i) for i in dict.fromkeys(dataset_ids)]
        if not refs:
            return {}
        try:
            return {s.id: s.to_dict() for s in self._client.get_all(refs) if s.exists}
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc

    def save_dataset(self, doc: Doc) -> bool:
        """Write the dataset document unless a newer version's outcome is already there; True when written."""
        return bool(in_transaction(self._client, self._dataset_ref(doc["dataset_id"]),
                                   lambda cur: (doc, True) if newer_version(cur, doc) else (None, False)))

    def mark_collecting(self, doc: Doc) -> bool:
        """Quiet-period: note that objects are arriving (the caller has seen it is not COLLECTING already)."""
        from google.api_core.exceptions import Conflict

        ref = self._dataset_ref(doc["dataset_id"])
        try:
            ref.create(doc)
            return True
        except Conflict:
            pass
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc

        def change(cur: Doc | None) -> tuple[Doc | None, bool]:
            if cur and cur.get("status") == DatasetStatus.COLLECTING:
                return None, False
            return {**(cur or {}), **doc, "version": (cur or {}).get("version")}, True

        return bool(in_transaction(self._client, ref, change))

    def open_datasets(self) -> list[Doc]:
        """Datasets the sweep looks at: COLLECTING (quiet period) and WAITING (manifest short of objects)."""
        from google.cloud.firestore_v1.base_query import FieldFilter

        query = self._client.collection(self._datasets).where(
            filter=FieldFilter("status", "in", [DatasetStatus.COLLECTING.value, DatasetStatus.WAITING.value]))
        try:
            return [s.to_dict() for s in query.stream()]
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc

    # versions (the outbox) -------------------------------------------------------------------------------------
    def claim_version(self, doc: Doc, *, owner: str, now: datetime, lease_seconds: int) -> VersionClaim:
        """Create the version as CLAIMED by owner, or take it over if its earlier claim lapsed or it was WAITING."""
        from google.api_core.exceptions import Conflict

        stamp = format_timestamp(now)
        fresh = {**doc, "status": VersionStatus.CLAIMED.value, "owner": owner, "attempts": 1,
                 "claim_until": format_timestamp(now + timedelta(seconds=lease_seconds)), "created_at": stamp,
                 "updated_at": stamp}
        ref = self._version_ref(doc["run_id"])
        try:
            ref.create(fresh)
            return VersionClaim(ClaimOutcome.CLAIMED, fresh)
        except Conflict:
            pass
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc

        def change(cur: Doc | None) -> tuple[Doc | None, VersionClaim]:
            if cur is None:
                return fresh, VersionClaim(ClaimOutcome.CLAIMED, fresh)
            result = claim(cur, owner=owner, now=now, lease_seconds=lease_seconds)
            return (result.doc if result.outcome == ClaimOutcome.CLAIMED else None), result

        return in_transaction(self._client, ref, change)  # type: ignore[no-any-return]

    def finish_version(self, run_id: str, *, owner: str, status: VersionStatus, now: datetime,
                       updates: Doc) -> bool:
        """Record the outcome of owner's claim; False (nothing written) when another delivery finished it first."""

        def change(cur: Doc | None) -> tuple[Doc | None, bool]:
            if cur is None or VersionStatus(cur["status"]) in FINAL_VERSION_STATUSES:
                return None, False
            if cur.get("owner") != owner and VersionStatus(cur["status"]) == VersionStatus.CLAIMED \
                    and parse_timestamp(cur["claim_until"], field="claim_until") > now:
                return None, False
            stamp = format_timestamp(now)
            return {**cur, **updates, "status": status.value, "claim_until": stamp, "updated_at": stamp}, True

        return bool(in_transaction(self._client, self._version_ref(run_id), change))

    def version(self, run_id: str) -> Doc | None:
        try:
            snapshot = self._version_ref(run_id).get()
        except Exception as exc:
            raise as_transient(exc, "Firestore") from exc
        return snapshot.to_dict() if snapshot.exists else None
