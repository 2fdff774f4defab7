"""The dataset records as the CLI and the dashboard read them: what ingest knows about each landing prefix
(Firestore, one document per prefix, shaped by schemas/dataset_record.py) and the dataset version whose request
names a run (schemas/dataset_version.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from landfall.errors import CommandError, client_boundary
from schemas.dataset_record import DATASET_FIELDS, DatasetRecord, dataset_id_for, parse_dataset_record
from schemas.dataset_version import DatasetVersion, parse_dataset_version
from schemas.errors import SchemaError

CALL_TIMEOUT_S = 20.0
"""Deadline of one Firestore call (a dataset record or version read while a command waits on it)."""


@dataclass(frozen=True)
class StoredDataset:
    """A `datasets` document as read: its record, and any field the schema does not name (shown, never hidden)."""

    record: DatasetRecord
    extra: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {**self.record.to_dict(), **self.extra}


def read_dataset(doc: Mapping[str, Any]) -> StoredDataset:
    """A stored dataset document through its schema; raises SchemaError naming the field that does not fit."""
    return StoredDataset(parse_dataset_record(doc), {k: v for k, v in doc.items() if k not in DATASET_FIELDS})


def datasets_collection() -> tuple[Any, str]:
    """The datasets collection and how messages name it (collection and project)."""
    from google.cloud import firestore

    from functions.settings import get_settings

    with client_boundary("open Firestore"):
        settings = get_settings()
        client = firestore.Client(project=settings.project)
    return (
        client.collection(settings.datasets_collection),
        f"Firestore collection {settings.datasets_collection!r} of project {settings.project}",
    )


def list_datasets(status: str | None, limit: int) -> list[dict[str, Any]]:
    """Dataset documents as stored, most recently updated first. A status is filtered by Firestore, which needs the
    composite index (status, updated_at desc) that `landfall deploy` creates from deploy/firestore.indexes.json."""
    from google.cloud import firestore
    from google.cloud.firestore_v1.base_query import FieldFilter

    collection, described = datasets_collection()
    with client_boundary(f"read the {described}"):
        query = collection
        if status is not None:
            query = query.where(filter=FieldFilter("status", "==", status))
        query = query.order_by("updated_at", direction=firestore.Query.DESCENDING).limit(limit)
        return [s.to_dict() for s in query.stream()]


@dataclass(frozen=True)
class DatasetDocument:
    """One dataset's document as stored (None when there is none), its id, and how messages name its collection."""

    doc: dict[str, Any] | None
    dataset_id: str
    described: str


def dataset_document(bucket: str, prefix: str) -> DatasetDocument:
    """The document ingest keeps for gs://BUCKET/PREFIX/ (`landfall dataset`)."""
    dataset_id = dataset_id_for(bucket, prefix)
    collection, described = datasets_collection()
    with client_boundary(f"read the {described}"):
        snapshot = collection.document(dataset_id).get()
    return DatasetDocument(snapshot.to_dict() if snapshot.exists else None, dataset_id, described)


def dataset_reader(bucket: str, prefix: str) -> Callable[[], StoredDataset | None]:
    """A reader of the record of gs://BUCKET/PREFIX/, asked again while a command waits for ingest (`landfall
    drop`): None while there is none; a record that does not fit the schema is a CommandError saying so."""
    from functions.operations import firestore_client
    from functions.settings import get_settings

    uri = f"gs://{bucket}/{prefix}"
    with client_boundary("open Firestore"):
        datasets = firestore_client().collection(get_settings().datasets_collection)
    ref = datasets.document(dataset_id_for(bucket, prefix))

    def read() -> StoredDataset | None:
        with client_boundary(f"read the dataset record of {uri}"):
            snapshot = ref.get(timeout=CALL_TIMEOUT_S)
        if not snapshot.exists:
            return None
        try:
            return read_dataset(snapshot.to_dict())
        except SchemaError as exc:
            raise CommandError(
                f"the record of {uri} does not fit schemas/dataset_record.py: {exc}; a newer or older Landfall wrote it"
            ) from exc

    return read


def requested_version(run_id: str) -> DatasetVersion | None:
    """The dataset version whose request names this run (collection dataset_versions is keyed by run id), if any."""
    from functions.operations import firestore_client
    from functions.settings import get_settings

    with client_boundary(f"read the dataset version of run {run_id!r}"):
        ref = firestore_client().collection(get_settings().dataset_versions_collection).document(run_id)
        snapshot = ref.get(timeout=CALL_TIMEOUT_S)
    if not snapshot.exists:
        return None
    try:
        return parse_dataset_version(snapshot.to_dict())
    except SchemaError as exc:
        raise CommandError(
            f"the dataset version of run {run_id} does not fit schemas/dataset_version.py: {exc}; a newer or "
            "older Landfall wrote it"
        ) from exc
