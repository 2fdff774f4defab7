"""The reconciler's look for unanswered dataset versions: a version ingest recorded PUBLISHED whose request names no
run after a grace period had its message lost between ingest and dispatch. Its request is kept on the version
record, so it is published again through the same publish function ingest uses; the run id comes from the request's
idempotency key, so the dispatcher's exactly-once path makes any duplicate harmless (one run). Each republish is
claimed on the version in a transaction first and counted after (`republished_count`, `last_republished_at`), so
two passes publish it once. A version whose run exists is marked `answered` and never looked at again."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Protocol

from functions.errors import LandfallError
from schemas.dataset_version import DatasetVersion
from schemas.errors import SchemaError
from schemas.run_record import RunRecord
from schemas.training_request import TrainingRequest, parse_training_request

log = logging.getLogger("landfall.reconciler")

BATCH = 100
"""Versions whose runs are read in one batched read."""


class VersionsOutbox(Protocol):
    def unanswered_versions(self, *, page_size: int = 200) -> Iterator[DatasetVersion]: ...
    def mark_answered(self, run_id: str, *, now: datetime) -> bool: ...
    def claim_republish(self, run_id: str, *, now: datetime, grace_seconds: int) -> bool: ...
    def count_republish(self, run_id: str, *, message_id: str) -> bool: ...


@dataclass(frozen=True)
class RepublishDeps:
    versions: VersionsOutbox
    runs: Callable[[Iterable[str]], dict[str, RunRecord]]
    """The stored runs among some ids (the runs store's get_many)."""
    publish: Callable[[bytes], str]
    """Ingest's publish of a TrainingRequest on the requests topic; returns the message id."""
    grace_seconds: int
    """settings.republish_grace_seconds."""


def republish_unanswered(deps: RepublishDeps, *, now: datetime) -> Counter[str]:
    """One look; counts: answered (run found, version marked), republished, republish-error."""
    counts: Counter[str] = Counter()
    versions = deps.versions.unanswered_versions()
    while batch := list(islice(versions, BATCH)):
        requests = [(doc, _request(doc)) for doc in batch]
        runs = deps.runs(r.run_id for _, r in requests if r is not None)
        for doc, request in requests:
            if request is None:
                counts["republish-error"] += 1
                continue
            try:
                if request.run_id in runs:
                    if deps.versions.mark_answered(doc.run_id, now=now):
                        counts["answered"] += 1
                elif deps.versions.claim_republish(doc.run_id, now=now, grace_seconds=deps.grace_seconds):
                    message_id = deps.publish(request.to_json())
                    deps.versions.count_republish(doc.run_id, message_id=message_id)
                    log.warning(
                        "dataset version %s (%s): no run %s after %d s; request published again as message %s",
                        doc.run_id,
                        doc.uri,
                        request.run_id,
                        deps.grace_seconds,
                        message_id,
                    )
                    counts["republished"] += 1
            except LandfallError as exc:
                log.warning("dataset version %s: not republished this pass: %s", doc.run_id, exc)
                counts["republish-error"] += 1
    return counts


def _request(doc: DatasetVersion) -> TrainingRequest | None:
    """The request kept on a PUBLISHED version, or None (logged) when it cannot be read."""
    try:
        if doc.request is None:
            raise SchemaError("is required on a PUBLISHED version but missing", field="dataset_version.request")
        return parse_training_request(doc.request)
    except SchemaError as exc:
        log.error("dataset version %s: its kept request cannot be read (%s); it cannot be republished", doc.run_id, exc)
        return None


__all__ = ["RepublishDeps", "VersionsOutbox", "republish_unanswered"]
