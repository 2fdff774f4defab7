"""OrphanRecord: a Vertex job labelled by Landfall (`landfall-run-id`) that no run names, one document per job in the
Firestore collection `orphans` (topology firestore.orphans_collection), keyed by `orphan_id_for(job_name)`.

The reconciler creates it once (create-if-absent) when it finds such a job older than the submission lease: the
label names no run, or the run it names records another job (neither its current job nor an earlier attempt's).
With LANDFALL_CANCEL_ORPHANS=true it also asks Vertex to cancel the job if it has not ended, and notes that here.
Written as `OrphanRecord.to_document()`, read with `parse_orphan_record`; `schemas/examples/orphan_record.json`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from schemas.errors import SchemaError
from schemas.fields import Reader

SCHEMA_VERSION = 1


class OrphanKind(StrEnum):
    NO_RUN = "no-run"
    """The job's run label names no run document."""
    OTHER_JOB = "other-job"
    """The run exists and records another job: this one is a duplicate (e.g. a submission that died after
    CreateCustomJob, then was made again)."""


@dataclass(frozen=True)
class OrphanCancel:
    """The reconciler's CancelCustomJob of the orphan."""

    at: str
    """RFC 3339: when the cancel was claimed (before the call is made)."""
    outcome: str
    """asking (claimed, call under way or died), asked (Vertex took it), had-ended, or "error: ..." (tried again)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


CANCEL_OUTCOMES = ("asking", "asked", "had-ended")
"""Outcomes besides "error: ...", which the next pass tries again."""


@dataclass(frozen=True)
class OrphanRecord:
    job_name: str
    """projects/{p}/locations/{region}/customJobs/{id}."""
    job_id: str
    region: str
    run_id: str
    """The job's `landfall-run-id` label."""
    kind: OrphanKind
    reason: str
    """For a person: why no run accounts for the job."""
    job_state: str
    """The Vertex JobState name when it was found."""
    job_created_at: str
    found_at: str
    """RFC 3339: when the reconciler recorded it."""
    display_name: str = ""
    run_job_name: str | None = None
    """OTHER_JOB: the job the run records instead."""
    cancel: OrphanCancel | None = None
    """Set when the reconciler cancels it (LANDFALL_CANCEL_ORPHANS=true); absent otherwise."""
    schema_version: int = SCHEMA_VERSION

    @property
    def orphan_id(self) -> str:
        return orphan_id_for(self.job_name)

    def to_document(self) -> dict[str, Any]:
        doc = {
            "schema_version": self.schema_version,
            "job_name": self.job_name,
            "job_id": self.job_id,
            "region": self.region,
            "run_id": self.run_id,
            "kind": self.kind.value,
            "reason": self.reason,
            "job_state": self.job_state,
            "job_created_at": self.job_created_at,
            "found_at": self.found_at,
            "display_name": self.display_name,
            "run_job_name": self.run_job_name,
            "cancel": None if self.cancel is None else self.cancel.to_dict(),
        }
        return {k: v for k, v in doc.items() if v is not None}


def orphan_id_for(job_name: str) -> str:
    """The document id of a job's orphan record: `REGION-JOBID` (a job name holds '/', which ids cannot)."""
    parts = job_name.split("/")
    if len(parts) != 6 or parts[0] != "projects" or parts[2] != "locations" or parts[4] != "customJobs":
        raise SchemaError(f"{job_name!r} is not projects/P/locations/REGION/customJobs/ID", field="orphan.job_name")
    return f"{parts[3]}-{parts[5]}"


def parse_orphan_record(data: object) -> OrphanRecord:
    """Read a stored orphan document; raises SchemaError naming the field that does not fit."""
    r = Reader(data, "orphan")
    cancel = r.optional_obj("cancel")
    return OrphanRecord(
        job_name=r.string("job_name", max_len=400),
        job_id=r.string("job_id"),
        region=r.string("region"),
        run_id=r.string("run_id", max_len=200),
        kind=OrphanKind(r.string("kind", choices=tuple(k.value for k in OrphanKind))),
        reason=r.string("reason", max_len=8000),
        job_state=r.string("job_state"),
        job_created_at=r.string("job_created_at", "", max_len=64),
        found_at=r.string("found_at", max_len=64),
        display_name=r.string("display_name", "", max_len=400),
        run_job_name=None if r.data.get("run_job_name") is None else r.string("run_job_name", max_len=400),
        cancel=None
        if cancel is None
        else OrphanCancel(at=cancel.string("at", max_len=64), outcome=cancel.string("outcome", max_len=8000)),
        schema_version=r.integer("schema_version", SCHEMA_VERSION),
    )


__all__ = [
    "CANCEL_OUTCOMES",
    "SCHEMA_VERSION",
    "OrphanCancel",
    "OrphanKind",
    "OrphanRecord",
    "orphan_id_for",
    "parse_orphan_record",
]
