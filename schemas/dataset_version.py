"""DatasetVersion: one document per dataset version in Firestore collection `dataset_versions` (topology
firestore.dataset_versions_collection), keyed by the run id of the version's idempotency key: ingest's outbox.

A version is created CLAIMED by the first delivery that sees it (functions/records/dataset_versions.py), then
becomes PUBLISHED (its TrainingRequest is on the requests topic and kept in `request`), REFUSED or DUPLICATE, once;
WAITING while its manifest names objects that have not landed. A PUBLISHED version keeps `answered: False` until
the reconciler sees its run (functions/reconciler/republish.py). Written as `DatasetVersion.to_dict()`, read with
`parse_dataset_version`; golden example schemas/examples/dataset_version.json.

Fields a version gains later in its life (`content_key`, `duplicate_of`, `answered`, the republish counts) are
None while unset and left out of the document; documents written before those fields existed read the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.dataset_record import (
    PATH_LEN,
    SCHEMA_VERSION,
    TEXT_LEN,
    VERSION_KINDS,
    VersionStatus,
    VersionSummary,
    optional_string,
    read_generation,
)
from schemas.fields import Reader


@dataclass(frozen=True)
class DatasetVersion:
    run_id: str
    """The run the version's request names: run_id_for(idempotency_key), the document's id."""
    idempotency_key: str
    dataset_id: str
    uri: str
    """gs://BUCKET/PREFIX/ of the dataset."""
    route: str
    kind: str
    """VERSION_KINDS: what completed it."""
    completed_by: str
    """gs:// URI of the completing object."""
    generation: str
    """The completing object's generation."""
    status: VersionStatus
    owner: str = ""
    """The delivery that claimed it last."""
    claim_until: str = ""
    """RFC 3339 end of that claim's lease (set to the finish time when the version is finished)."""
    attempts: int = 0
    """How many deliveries claimed it."""
    created_at: str = ""
    updated_at: str = ""
    event_id: str = ""
    """The event (or sweep tick, or retrain-N) that completed it."""
    reason: str = ""
    """Why no request was made (WAITING, REFUSED, DUPLICATE)."""
    message_id: str = ""
    """PUBLISHED: the requests topic's message id."""
    request: dict[str, Any] | None = None
    """PUBLISHED: the TrainingRequest as published (canonical dict), for the reconciler to republish."""
    content_key: str | None = None
    duplicate_of: str | None = None
    """DUPLICATE: the run that trained the same content."""
    answered: bool | None = None
    """PUBLISHED: False until the reconciler sees the run, then True; None for other versions."""
    answered_at: str | None = None
    last_republished_at: str | None = None
    """RFC 3339: the last republish the reconciler claimed."""
    republished_count: int | None = None
    last_republished_message_id: str | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def final(self) -> bool:
        return self.status in (VersionStatus.PUBLISHED, VersionStatus.REFUSED, VersionStatus.DUPLICATE)

    def summary(self) -> VersionSummary:
        """What the dataset document shows of this version."""
        return VersionSummary(
            idempotency_key=self.idempotency_key,
            run_id=self.run_id,
            kind=self.kind,
            generation=self.generation,
            completed_by=self.completed_by,
            status=self.status,
            content_key=self.content_key or None,
            duplicate_of=self.duplicate_of or None,
        )

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "idempotency_key": self.idempotency_key,
            "dataset_id": self.dataset_id,
            "uri": self.uri,
            "route": self.route,
            "kind": self.kind,
            "completed_by": self.completed_by,
            "generation": self.generation,
            "event_id": self.event_id,
            "reason": self.reason,
            "message_id": self.message_id,
            "request": None if self.request is None else dict(self.request),
            "status": self.status.value,
            "owner": self.owner,
            "claim_until": self.claim_until,
            "updated_at": self.updated_at,
            "attempts": self.attempts,
            "created_at": self.created_at,
        }
        later = {
            "content_key": self.content_key,
            "duplicate_of": self.duplicate_of,
            "answered": self.answered,
            "answered_at": self.answered_at,
            "last_republished_at": self.last_republished_at,
            "republished_count": self.republished_count,
            "last_republished_message_id": self.last_republished_message_id,
        }
        return {**doc, **{k: v for k, v in later.items() if v is not None}}


def _optional_time(r: Reader, key: str) -> str | None:
    return None if r.data.get(key) is None else r.timestamp(key)


def parse_dataset_version(data: Mapping[str, Any]) -> DatasetVersion:
    """Read a stored `dataset_versions` document; raises SchemaError naming the field that does not fit."""
    r = Reader(data, "dataset_version")
    request = r.optional_obj("request")
    return DatasetVersion(
        run_id=r.string("run_id", max_len=200),
        idempotency_key=r.string("idempotency_key", max_len=PATH_LEN),
        dataset_id=r.string("dataset_id", max_len=200),
        uri=r.string("uri", max_len=PATH_LEN),
        route=r.string("route", max_len=200),
        kind=r.string("kind", choices=VERSION_KINDS),
        completed_by=r.string("completed_by", max_len=PATH_LEN),
        generation=read_generation(r),
        status=VersionStatus(r.string("status", choices=tuple(VersionStatus))),
        owner=r.string("owner", "", max_len=200),
        claim_until=r.timestamp("claim_until", "", allow_empty=True),
        attempts=r.integer("attempts", 0, minimum=0),
        created_at=r.timestamp("created_at", "", allow_empty=True),
        updated_at=r.timestamp("updated_at", "", allow_empty=True),
        event_id=r.string("event_id", "", max_len=PATH_LEN),
        reason=r.string("reason", "", max_len=TEXT_LEN),
        message_id=r.string("message_id", "", max_len=200),
        request=None if request is None else dict(request.data),
        content_key=optional_string(r, "content_key", max_len=PATH_LEN),
        duplicate_of=optional_string(r, "duplicate_of", max_len=200),
        answered=None if r.data.get("answered") is None else r.boolean("answered"),
        answered_at=_optional_time(r, "answered_at"),
        last_republished_at=_optional_time(r, "last_republished_at"),
        republished_count=None
        if r.data.get("republished_count") is None
        else r.integer("republished_count", minimum=0),
        last_republished_message_id=optional_string(r, "last_republished_message_id", max_len=200),
        schema_version=r.integer("schema_version", SCHEMA_VERSION, minimum=1),
    )


__all__ = ["DatasetVersion", "parse_dataset_version"]
