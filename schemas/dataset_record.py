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
  trains it; a later version with the same content is a DUPLICATE of that run. CONTENT_FIELDS lists its fields.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum

SCHEMA_VERSION = 1


class DatasetStatus(StrEnum):
    COLLECTING = "COLLECTING"
    """Quiet-period route: objects are arriving; the sweep closes the dataset after the quiet period."""
    WAITING = "WAITING"
    """A manifest landed but names objects that are missing or differ; `reason` lists them. It completes when
    they land."""
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

# Fields of a `datasets` document (all present; "" / None when unset):
DATASET_FIELDS = (
    "schema_version",
    "dataset_id",
    "bucket",
    "prefix",
    "uri",  # gs://bucket/prefix/
    "route",  # name of the route in deploy/routes.toml
    "status",  # DatasetStatus
    "reason",  # why no request (WAITING / REFUSED), else ""
    "updated_at",  # RFC 3339
    "version",  # {"idempotency_key", "run_id", "completed_by", "generation", "kind", "status", "content_key",
    #  "duplicate_of" (DUPLICATE: the run that trained this content)} or None
)

# Fields of a `datasets/{id}/contents/{digest}` document:
CONTENT_FIELDS = (
    "schema_version",
    "content_key",  # content:BUCKET/PREFIX:DIGEST
    "digest",  # DIGEST, the document's id
    "dataset_id",
    "uri",
    "run_id",  # the run that trains this content (the latest `landfall retrain` of it, if any)
    "idempotency_key",  # that run's request key
    "generation",  # the dataset version (completing object's generation) that run came from
    "object_count",
    "total_bytes",
    "retrains",  # how many times `landfall retrain` asked for this content again
    "created_at",
    "updated_at",
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
