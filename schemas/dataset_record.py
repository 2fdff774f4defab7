"""DatasetRecord and DatasetVersion: what ingest knows about each landing prefix, in Firestore.

- Collection `datasets` (topology firestore.datasets_collection): one document per dataset prefix, keyed by
  `dataset_id_for(bucket, prefix)`. It says where the dataset stands and, when no request was made, why.
- Collection `dataset_versions` (firestore.dataset_versions_collection): the ingest outbox, one document per
  dataset version, keyed by the run id of the version's idempotency key. A version is claimed under a lease,
  then becomes published (its TrainingRequest is on the requests topic), refused (with the reason) or a duplicate
  (its content was trained already), once. A PUBLISHED version keeps its `request` and `answered: False` until the
  reconciler sees its run (then `answered: True`, `answered_at`); while no run exists after a grace period the
  reconciler publishes the request again and counts it (`republished_count`, `last_republished_at`,
  `last_republished_message_id`: functions/reconciler/republish.py).
- Subcollection `contents` of each dataset document: one document per distinct content of the dataset, keyed by
  its digest (`content_digest` of readiness.Scan: the names, sizes and checksums of the data objects and
  landfall.json). Created with create() by the first version that publishes that content, it names the run that
  trains it; a later version with the same content is a DUPLICATE of that run.

Each kind of document has its frozen record and parse (one SchemaError naming the field): DatasetRecord
(`parse_dataset_record`, here), DatasetVersion (schemas/dataset_version.py) and ContentRecord
(schemas/content_record.py). Written only as `record.to_dict()`, read only through the parse:
`parse_X(doc).to_dict() == doc` for every document Landfall writes. Golden examples: schemas/examples/dataset_*.json.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from schemas.errors import SchemaError
from schemas.fields import Reader

SCHEMA_VERSION = 1


class DatasetStatus(StrEnum):
    COLLECTING = "COLLECTING"
    """Quiet-period route: objects are arriving; the sweep closes the dataset after the quiet period."""
    WAITING = "WAITING"
    """A manifest landed but names objects that are missing or differ, or a marker landed before any data;
    `reason` says which. The ingest sweep's next tick after they land completes it."""
    REFUSED = "REFUSED"
    """The dataset was complete but broke a rule (route minimums, formats, landfall.json, manifest); `reason`
    says which and what to do. A new marker or manifest (a new version) tries again."""
    REQUESTED = "REQUESTED"
    """A TrainingRequest was published for `version`; the run is `version.run_id`."""
    DUPLICATE = "DUPLICATE"
    """The newest version holds the same objects (names, sizes, checksums) as one trained already: no request was
    made; `version.duplicate_of` names the run that trained them. `landfall retrain URI` trains them again."""


class VersionStatus(StrEnum):
    CLAIMED = "CLAIMED"
    """A delivery is evaluating and publishing this version (until `claim_until`)."""
    WAITING = "WAITING"
    """Manifest incomplete: evaluated again when a listed object lands or on the next sweep."""
    PUBLISHED = "PUBLISHED"
    REFUSED = "REFUSED"
    DUPLICATE = "DUPLICATE"
    """Same content as a version published before (`duplicate_of` names its run): nothing published."""


FINAL_VERSION_STATUSES = frozenset({VersionStatus.PUBLISHED, VersionStatus.REFUSED, VersionStatus.DUPLICATE})
DATASET_STATUS_OF_VERSION = {
    VersionStatus.PUBLISHED: DatasetStatus.REQUESTED,
    VersionStatus.REFUSED: DatasetStatus.REFUSED,
    VersionStatus.DUPLICATE: DatasetStatus.DUPLICATE,
}
"""Where a dataset stands once its newest version is final."""

# Fields of a `datasets` document, in the order DatasetRecord.to_dict() writes them (all present; "" / None when
# unset): see DatasetRecord.
DATASET_FIELDS = (
    "schema_version",
    "dataset_id",
    "bucket",
    "prefix",
    "uri",
    "route",
    "status",
    "reason",
    "updated_at",
    "version",
)

VERSION_KINDS = ("marker", "manifest", "quiet-period", "retrain")
"""What completed a dataset version: a `_SUCCESS` marker, a manifest, a quiet period, or `landfall retrain`."""

TEXT_LEN = 1 << 20
"""Free text (reasons) is bounded only by Firestore's 1 MiB document."""
PATH_LEN = 4096
"""Keys and URIs name an object (up to 1,024 bytes) with its bucket and more: bounded loosely, as text."""


def read_generation(r: Reader, key: str = "generation") -> str:
    """An object generation: decimal text (how Cloud Storage sends it); an integer is read as its text."""
    value = r.data.get(key)
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else r.string(key, max_len=32)
    if text and not text.isdigit():
        raise SchemaError(f"{text!r} is not an object generation (decimal digits)", field=r._name(key))
    return text


def optional_string(r: Reader, key: str, *, max_len: int = 1024) -> str | None:
    """A string field that older documents (or an unset value) leave out: None when absent or null."""
    return None if r.data.get(key) is None else r.string(key, max_len=max_len)


@dataclass(frozen=True)
class VersionSummary:
    """The version a dataset document shows: the newest one ingest evaluated (a subset of its DatasetVersion)."""

    idempotency_key: str
    run_id: str
    """The run the version's request names (the version document's id)."""
    kind: str
    """VERSION_KINDS."""
    generation: str
    """The completing object's generation: it orders the versions of a dataset."""
    completed_by: str
    """gs:// URI of the object that completed the version."""
    status: VersionStatus
    content_key: str | None = None
    """content:BUCKET/PREFIX:DIGEST once the content was claimed (absent before, and for refused versions)."""
    duplicate_of: str | None = None
    """DUPLICATE: the run that trained this content."""

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "idempotency_key": self.idempotency_key,
            "run_id": self.run_id,
            "kind": self.kind,
            "generation": self.generation,
            "completed_by": self.completed_by,
            "status": self.status.value,
        }
        if self.content_key is not None:
            doc["content_key"] = self.content_key
        if self.duplicate_of is not None:
            doc["duplicate_of"] = self.duplicate_of
        return doc


@dataclass(frozen=True)
class DatasetRecord:
    """One document of collection `datasets`: where one dataset folder stands."""

    dataset_id: str
    """dataset_id_for(bucket, prefix): the document's id."""
    bucket: str
    prefix: str
    """The dataset folder, ending in '/'."""
    uri: str
    """gs://bucket/prefix."""
    route: str
    """The name of the route in deploy/routes.toml that covers it."""
    status: DatasetStatus
    reason: str
    """Why no request was made (WAITING, REFUSED, DUPLICATE), else ""."""
    updated_at: str
    """RFC 3339 (text, so that `landfall datasets` orders by it)."""
    version: VersionSummary | None = None
    """The newest version evaluated; None while COLLECTING a first version."""
    schema_version: int = SCHEMA_VERSION

    @property
    def generation(self) -> int:
        """The generation of the version it shows (0: none): a dataset never goes back to an older one."""
        return int(self.version.generation or 0) if self.version is not None else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "dataset_id": self.dataset_id,
            "bucket": self.bucket,
            "prefix": self.prefix,
            "uri": self.uri,
            "route": self.route,
            "status": self.status.value,
            "reason": self.reason,
            "updated_at": self.updated_at,
            "version": None if self.version is None else self.version.to_dict(),
        }


def parse_version_summary(r: Reader) -> VersionSummary:
    return VersionSummary(
        idempotency_key=r.string("idempotency_key", max_len=PATH_LEN),
        run_id=r.string("run_id", max_len=200),
        kind=r.string("kind", choices=VERSION_KINDS),
        generation=read_generation(r),
        completed_by=r.string("completed_by", max_len=PATH_LEN),
        status=VersionStatus(r.string("status", choices=tuple(VersionStatus))),
        content_key=optional_string(r, "content_key", max_len=PATH_LEN),
        duplicate_of=optional_string(r, "duplicate_of", max_len=200),
    )


def parse_dataset_record(data: Mapping[str, Any]) -> DatasetRecord:
    """Read a stored `datasets` document; raises SchemaError naming the field that does not fit."""
    r = Reader(data, "dataset")
    version = r.optional_obj("version")
    return DatasetRecord(
        dataset_id=r.string("dataset_id", max_len=200),
        bucket=r.string("bucket", max_len=222),
        prefix=r.string("prefix", max_len=PATH_LEN),
        uri=r.string("uri", max_len=PATH_LEN),
        route=r.string("route", max_len=200),
        status=DatasetStatus(r.string("status", choices=tuple(DatasetStatus))),
        reason=r.string("reason", "", max_len=TEXT_LEN),
        updated_at=r.timestamp("updated_at"),
        version=None if version is None else parse_version_summary(version),
        schema_version=r.integer("schema_version", SCHEMA_VERSION, minimum=1),
    )


def dataset_id_for(bucket: str, prefix: str) -> str:
    """Firestore document id of a dataset prefix (object names may hold '/', which ids cannot)."""
    return "ds-" + hashlib.sha256(f"{bucket}/{prefix}".encode()).hexdigest()[:20]


def content_key_for(bucket: str, prefix: str, digest: str) -> str:
    """The key of one content of a dataset folder (digest: hex, from readiness.Scan.content_digest)."""
    return f"content:{bucket}/{prefix}:{digest}"


def retrain_key(content_key: str, count: int) -> str:
    """The idempotency key of the count-th `landfall retrain` of a content: a new run, on purpose."""
    return f"{content_key}:retrain-{count}"


__all__ = [
    "DATASET_FIELDS",
    "DATASET_STATUS_OF_VERSION",
    "FINAL_VERSION_STATUSES",
    "PATH_LEN",
    "SCHEMA_VERSION",
    "TEXT_LEN",
    "VERSION_KINDS",
    "DatasetRecord",
    "DatasetStatus",
    "VersionStatus",
    "VersionSummary",
    "content_key_for",
    "dataset_id_for",
    "optional_string",
    "parse_dataset_record",
    "parse_version_summary",
    "read_generation",
    "retrain_key",
]
