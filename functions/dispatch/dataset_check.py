"""Refuse before paying: what the dispatcher checks in the dataset itself before any CreateCustomJob.

- A dataset with no data objects (control files such as _SUCCESS and names starting with _ or . do not count) is
  REJECTED: a job on an empty prefix would start machines only to fail. A request that carries its version's list
  (dataset.objects, what ingest listed when it cut the version) is checked on that list, without listing the bucket
  again: the trainer reads exactly those objects.
- For the built-in trainer's tabular tasks, the first CSV shard's header must hold model.label_column; if not, the
  request is REJECTED naming the columns it has (Parquet and JSON lines shards are checked by the trainer). Where
  the request's list names that shard, its head can be read ahead (`read_head_ahead`), beside the run's create.

Also, for a team's code (script, package or container), the dataset version's listing is written to the run's
folder (job_spec.DATA_FILES_NAME) so its LANDFALL_DATA_FILES exists when the job starts: the request's snapshot
(dataset.objects, what ingest measured when it cut the version), or, where the request carries none (a request
published by hand, or one whose list was too long to travel inline), the listing taken here.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from functions.beside import beside
from functions.dispatch.job_spec import DATA_FILES_NAME, output_bucket, run_folder
from functions.gcp.gcs_objects import ObjectInfo
from functions.settings import Settings
from schemas.dataset_layout import is_data_object
from schemas.training_request import TrainingRequest

HEADER_BYTES = 64 * 1024
"""Bytes read from the head of the first CSV shard for its header (a shard of any size: only its head is read). A
header line longer than this is not checked here; the trainer checks it when it reads the shard."""


class DatasetObjects(Protocol):
    """What the check needs of Cloud Storage (functions/gcp/gcs_objects.GcsObjects)."""

    def list(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]: ...
    def stat(self, bucket: str, name: str) -> ObjectInfo | None: ...
    def read_head(self, bucket: str, name: str, generation: str, max_bytes: int) -> bytes | None: ...
    def write(self, bucket: str, name: str, data: bytes, content_type: str) -> None: ...


@dataclass(frozen=True)
class Refusal:
    code: str
    """empty-dataset | missing-label-column."""
    reason: str


@dataclass(frozen=True)
class HeadAhead:
    """The head of a CSV shard, read ahead of the check (`read_head_ahead`)."""

    object: ObjectInfo
    read: Future[bytes | None]


def _tabular(request: TrainingRequest) -> bool:
    return request.trainer.builtin and request.task.startswith("tabular")


def _snapshot_data(request: TrainingRequest) -> list[ObjectInfo]:
    """The data objects of the request's list (dataset.objects), with their full names; none when it has no list."""
    prefix = request.dataset.prefix
    return [
        ObjectInfo(name=prefix + o.name, size=o.size, generation=o.generation)
        for o in request.dataset.objects
        if is_data_object(o.name)
    ]


def _first_csv(data: list[ObjectInfo]) -> ObjectInfo | None:
    """The shard whose header is checked: the first CSV object by name."""
    return next((o for o in sorted(data, key=lambda o: o.name) if o.name.lower().endswith(".csv")), None)


def read_head_ahead(request: TrainingRequest, objects: DatasetObjects) -> HeadAhead | None:
    """Start reading the head check_dataset will read, on another thread, where the request's list names the
    shard (no listing needed to find it); None where there is nothing to read ahead. Only a read: a check that
    never comes leaves it unseen, and check_dataset raises its error if it failed."""
    if not _tabular(request) or not request.dataset.objects:
        return None
    first = _first_csv(_snapshot_data(request))
    if first is None or not first.size:
        return None
    bucket = request.dataset.bucket
    return HeadAhead(first, beside(lambda: objects.read_head(bucket, first.name, first.generation, HEADER_BYTES)))


def check_dataset(
    request: TrainingRequest,
    objects: DatasetObjects,
    settings: Settings,
    ahead: HeadAhead | None = None,
    team: str = "",
) -> Refusal | None:
    """The reason the dataset cannot train this request, or None. Writes the listing for a container's run (in its
    team's folder for a team's run). ahead: the header's read, started earlier (read_head_ahead)."""
    bucket, prefix = request.dataset.bucket, request.dataset.prefix
    tabular = _tabular(request)
    snapshot = request.dataset.objects
    whole = not request.trainer.builtin and not snapshot  # the listing written for the code is the one taken here
    data: list[ObjectInfo] = []
    if snapshot:  # what ingest listed when it cut the version (its digest checked when the request was read)
        data = _snapshot_data(request)
    else:
        for o in objects.list(bucket, prefix):  # in name order, as Cloud Storage lists
            if is_data_object(o.name[len(prefix) :]):
                data.append(o)
                # Enough: one data object (and, for a tabular table, its first CSV shard), unless the code's listing
                # is this one.
                if not whole and (not tabular or o.name.lower().endswith(".csv")):
                    break
    if not data:
        return Refusal(
            "empty-dataset",
            f"dataset.uri: {request.dataset.uri} holds no data objects (control files such as _SUCCESS and names "
            "starting with _ or . do not count); upload the data, then the marker",
        )
    if tabular:
        refusal = _label_refusal(request, objects, data, ahead)
        if refusal is not None:
            return refusal
    if not request.trainer.builtin:
        rows = (
            [(o.name, o.generation, o.size) for o in snapshot]
            if snapshot
            else [(o.name[len(prefix) :], o.generation, o.size) for o in data]
        )
        listing = "".join(
            json.dumps({"name": name, "generation": generation, "size": size}, sort_keys=True) + "\n"
            for name, generation, size in rows
        )
        name = listing_name(settings, request.run_id, team)
        for bucket in listing_buckets(settings):
            objects.write(bucket, name, listing.encode(), "application/x-ndjson")
    return None


def listing_name(settings: Settings, run_id: str, team: str = "") -> str:
    """The object name of a run's dataset listing (job_spec.DATA_FILES_NAME in the run's folder, its team's for a
    team's run), in every bucket of listing_buckets."""
    return f"{run_folder(settings, run_id, team)}{DATA_FILES_NAME}"


def listing_uris(settings: Settings, run_id: str, team: str = "") -> list[str]:
    """Every gs:// URI check_dataset writes a run's dataset listing to."""
    return [f"gs://{bucket}/{listing_name(settings, run_id, team)}" for bucket in listing_buckets(settings)]


def listing_buckets(settings: Settings) -> list[str]:
    """Every artifacts bucket a job of this deployment may run against, once each: the listing is written before the
    plan picks a region, and a job reads it from its own region's bucket (a fallback may move it to another)."""
    return list(dict.fromkeys(output_bucket(settings, region) for region in settings.job_regions))


def _label_refusal(
    request: TrainingRequest, objects: DatasetObjects, data: list[ObjectInfo], ahead: HeadAhead | None
) -> Refusal | None:
    first = _first_csv(data)
    if first is None:
        return None
    if not first.size:
        raw: bytes | None = b""
    elif ahead is not None and ahead.object == first:
        raw = ahead.read.result()
    else:
        raw = objects.read_head(request.dataset.bucket, first.name, first.generation, HEADER_BYTES)
    if raw is None:
        return None  # replaced since it was listed: the trainer reads what is there
    if len(raw) >= HEADER_BYTES and not any(end in raw for end in (b"\n", b"\r")):
        return None  # a header line longer than the head read: the trainer checks it
    line = raw.decode("utf-8", errors="replace").splitlines()[0] if raw.strip() else ""
    columns = [c.strip() for c in next(csv.reader(io.StringIO(line)), [])]
    label = request.model.label_column
    if label in columns:
        return None
    return Refusal(
        "missing-label-column",
        f"model.label_column: {label!r} is not a column of gs://{request.dataset.bucket}/{first.name}; its columns "
        f"are {', '.join(repr(c) for c in columns) or 'none (empty header)'}: set model.label_column (landfall.json "
        "where the route allows it) or rename the column",
    )
