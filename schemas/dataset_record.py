"""DatasetRecord and DatasetVersion: what ingest knows about each landing prefix, in Firestore.

- Collection `datasets` (topology firestore.datasets_collection): one document per dataset prefix, keyed by
  `dataset_id_for(bucket, prefix)`. It says where the dataset stands and, when no request was made, why.
- Collection `dataset_versions` (firestore.dataset_versions_collection): the ingest outbox, one document per
  dataset version, keyed by the run id of the version's idempotency key. A version is claimed under a lease,
  then becomes published (its TrainingRequest is on the requests topic) or refused (with the reason), once.
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


class VersionStatus(StrEnum):
    CLAIMED = "CLAIMED"
    """A delivery is evaluating and publishing this version (until `claim_until`)."""
    WAITING = "WAITING"
    """Manifest incomplete: evaluated again when a listed object lands or on the next sweep."""
    PUBLISHED = "PUBLISHED"
    REFUSED = "REFUSED"


FINAL_VERSION_STATUSES = frozenset({VersionStatus.PUBLISHED, VersionStatus.REFUSED})

# Fields of a `datasets` document (all present; "" / None when unset):
DATASET_FIELDS = (
    "schema_version",
    "dataset_id",
    "bucket",
    "prefix",
    "uri",          # gs://bucket/prefix/
    "route",        # name of the route in deploy/routes.toml
    "status",       # DatasetStatus
    "reason",       # why no request (WAITING / REFUSED), else ""
    "updated_at",   # RFC 3339
    "version",      # {"idempotency_key", "run_id", "completed_by", "generation", "kind", "status"} or None
)


def dataset_id_for(bucket: str, prefix: str) -> str:
    """Firestore document id of a dataset prefix (object names may hold '/', which ids cannot)."""
    return "ds-" + hashlib.sha256(f"{bucket}/{prefix}".encode()).hexdigest()[:20]
