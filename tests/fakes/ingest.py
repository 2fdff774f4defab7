"""In-memory stand-ins for ingest's adapters (GcsObjects, DatasetsStore), for pure-logic tests only.

The fake store applies the same pure rules as the Firestore adapter (functions/records/dataset_versions.py and the
lease rule in leases.py); tests/integration/test_store_contracts.py checks both against the same behaviours.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import google_crc32c

from deploy.routes import Route
from functions import envelopes
from functions.gcp.gcs_objects import ObjectInfo, TooLarge
from functions.ingest.handler import IngestDeps, handle_object_event
from functions.ingest.sweep import handle_sweep
from functions.records.dataset_versions import (
    VersionOutcome,
    answered,
    claim,
    collecting,
    content_claim,
    finished,
    first_claim,
    newer_version,
    republish_claimed,
    republish_counted,
    retrain_counted,
)
from functions.records.leases import Claim, ClaimOutcome
from functions.settings import settings_from_env
from schemas.content_record import ContentRecord, parse_content_record
from schemas.dataset_record import DatasetRecord, DatasetStatus, VersionStatus, dataset_id_for, parse_dataset_record
from schemas.dataset_version import DatasetVersion, parse_dataset_version
from schemas.training_request import TrainingRequest, parse_training_request

SETTINGS = settings_from_env({"GOOGLE_CLOUD_PROJECT": "landfall-local"})
BUCKET = "landfall-landing"
T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


class FakeObjects:
    def __init__(self) -> None:
        self.objects: dict[str, ObjectInfo] = {}
        self.content: dict[str, bytes] = {}
        self._generation = 1000
        self.list_calls = 0
        self.written: list[tuple[str, str]] = []
        """(bucket, name) of every write, in order."""

    def put(self, name: str, data: bytes | int = b"x", *, at: datetime = T0, crc32c: str | None = None) -> ObjectInfo:
        """Write a new generation of name; its crc32c is computed from the bytes, as Cloud Storage does, unless
        given."""
        self._generation += 1
        payload = data if isinstance(data, bytes) else b"x" * data
        if crc32c is None:
            crc32c = base64.b64encode(google_crc32c.value(payload).to_bytes(4, "big")).decode()
        info = ObjectInfo(name, len(payload), str(self._generation), crc32c, at)
        self.objects[name] = info
        self.content[name] = payload
        return info

    def list(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]:
        self.list_calls += 1
        for name in sorted(self.objects):
            if name.startswith(prefix):
                yield self.objects[name]

    def stat(self, bucket: str, name: str) -> ObjectInfo | None:
        return self.objects.get(name)

    def write(self, bucket: str, name: str, data: bytes, content_type: str) -> None:
        self.written.append((bucket, name))
        self.put(name, data)

    def read_head(self, bucket: str, name: str, generation: str, max_bytes: int) -> bytes | None:
        info = self.objects.get(name)
        if info is None or info.generation != generation:
            return None
        return self.content[name][:max_bytes]

    def read(self, bucket: str, name: str, generation: str, max_bytes: int) -> bytes | None:
        info = self.objects.get(name)
        if info is None or info.generation != generation:
            return None
        if len(self.content[name]) > max_bytes:
            raise TooLarge(f"{name} is larger than {max_bytes} bytes")
        return self.content[name]


def version_stub(run_id: str) -> DatasetVersion:
    """A version with nothing but its id filled in: for a test that claims it (as a delivery that then dies would)
    before ingest sees it."""
    return DatasetVersion(
        run_id=run_id,
        idempotency_key=f"stub:{run_id}",
        dataset_id="ds-stub",
        uri=f"gs://{BUCKET}/stub/",
        route="stub",
        kind="marker",
        completed_by=f"gs://{BUCKET}/stub/_SUCCESS",
        generation="1",
        status=VersionStatus.CLAIMED,
    )


class FakeDatasets:
    """Holds the documents as Firestore would (their `to_dict()` form) and reads them back through their schemas,
    as functions/gcp/datasets_store.py does, so a test can look at the stored shape."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, dict[str, Any]] = {}
        self.contents: dict[tuple[str, str], dict[str, Any]] = {}
        """(dataset_id, digest) -> content document."""
        self._lock = threading.Lock()

    def _dataset(self, dataset_id: str) -> DatasetRecord | None:
        doc = self.docs.get(dataset_id)
        return None if doc is None else parse_dataset_record(doc)

    def _version(self, run_id: str) -> DatasetVersion | None:
        doc = self.versions.get(run_id)
        return None if doc is None else parse_dataset_version(doc)

    def _content(self, key: tuple[str, str]) -> ContentRecord | None:
        doc = self.contents.get(key)
        return None if doc is None else parse_content_record(doc)

    def datasets(self, ids: Iterable[str]) -> dict[str, DatasetRecord]:
        with self._lock:
            return {i: parse_dataset_record(self.docs[i]) for i in ids if i in self.docs}

    def save_dataset(self, record: DatasetRecord) -> bool:
        with self._lock:
            if newer_version(self._dataset(record.dataset_id), record):
                self.docs[record.dataset_id] = record.to_dict()
                return True
            return False

    def mark_collecting(self, record: DatasetRecord) -> bool:
        with self._lock:
            new = collecting(self._dataset(record.dataset_id), record)
            if new is None:
                return False
            self.docs[record.dataset_id] = new.to_dict()
            return True

    def open_datasets(self) -> list[DatasetRecord]:
        with self._lock:
            return [
                parse_dataset_record(d)
                for d in self.docs.values()
                if d["status"] in (DatasetStatus.COLLECTING, DatasetStatus.WAITING)
            ]

    def claim_version(
        self, version: DatasetVersion, *, owner: str, now: datetime, lease_seconds: int
    ) -> Claim[DatasetVersion]:
        with self._lock:
            cur = self._version(version.run_id)
            if cur is None:
                fresh = first_claim(version, owner=owner, now=now, lease_seconds=lease_seconds)
                self.versions[version.run_id] = fresh.to_dict()
                return Claim(ClaimOutcome.CLAIMED, fresh)
            result = claim(cur, owner=owner, now=now, lease_seconds=lease_seconds)
            if result.outcome == ClaimOutcome.CLAIMED:
                self.versions[version.run_id] = result.doc.to_dict()
            return result

    def claim_new(
        self, version: DatasetVersion, content: ContentRecord, *, owner: str, now: datetime, lease_seconds: int
    ) -> bool:
        with self._lock:
            key = (content.dataset_id, content.digest)
            if self._version(version.run_id) is not None or self._content(key) is not None:
                return False
            fresh = first_claim(version, owner=owner, now=now, lease_seconds=lease_seconds)
            self.versions[version.run_id] = fresh.to_dict()
            self.contents[key] = content_claim(None, None, content, now=now, retrain=False).doc.to_dict()
            return True

    def finish_version(
        self,
        run_id: str,
        *,
        owner: str,
        status: VersionStatus,
        now: datetime,
        outcome: VersionOutcome | None = None,
    ) -> bool:
        return self._change_version(
            run_id, lambda cur: finished(cur, owner=owner, status=status, now=now, outcome=outcome)
        )

    def version(self, run_id: str, *, dataset_id: str = "") -> DatasetVersion | None:
        with self._lock:
            return self._version(run_id)

    def unanswered_versions(self, *, page_size: int = 200) -> Iterator[DatasetVersion]:
        with self._lock:
            found = [
                parse_dataset_version(self.versions[k])
                for k in sorted(self.versions)
                if self.versions[k].get("answered") is False
            ]
        yield from found

    def _change_version(self, run_id: str, rule: Callable[[DatasetVersion | None], DatasetVersion | None]) -> bool:
        with self._lock:
            new = rule(self._version(run_id))
            if new is not None:
                self.versions[run_id] = new.to_dict()
            return new is not None

    def mark_answered(self, run_id: str, *, now: datetime) -> bool:
        return self._change_version(run_id, lambda cur: answered(cur, now=now))

    def claim_republish(self, run_id: str, *, now: datetime, grace_seconds: int) -> bool:
        return self._change_version(run_id, lambda cur: republish_claimed(cur, now=now, grace_seconds=grace_seconds))

    def count_republish(self, run_id: str, *, message_id: str) -> bool:
        return self._change_version(run_id, lambda cur: republish_counted(cur, message_id=message_id))

    def claim_content(self, content: ContentRecord, *, now: datetime, retrain: bool = False) -> Claim[ContentRecord]:
        with self._lock:
            key = (content.dataset_id, content.digest)
            cur = self._content(key)
            holder = self._version(cur.run_id) if cur is not None and cur.run_id else None
            result = content_claim(cur, holder, content, now=now, retrain=retrain)
            if result.outcome == ClaimOutcome.CLAIMED:
                self.contents[key] = result.doc.to_dict()
            return result

    def count_retrain(self, content: ContentRecord, *, now: datetime) -> ContentRecord:
        with self._lock:
            key = (content.dataset_id, content.digest)
            new = retrain_counted(self._content(key), content, now=now)
            self.contents[key] = new.to_dict()
            return new

    def content(self, dataset_id: str, digest: str) -> ContentRecord | None:
        with self._lock:
            return self._content((dataset_id, digest))


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def fake_deps(
    objects: FakeObjects,
    datasets: FakeDatasets,
    routes: tuple[Route, ...],
    published: list[bytes],
    clock: Clock | None = None,
) -> IngestDeps:
    def publish(data: bytes) -> str:
        published.append(data)
        return str(len(published))

    return IngestDeps(
        settings=SETTINGS,
        objects=objects,
        datasets=datasets,  # type: ignore[arg-type]  # FakeDatasets stands in for DatasetsStore (no Protocol names it)
        publish=publish,
        now=clock or Clock(),
        routes=lambda: routes,
    )


class World:
    """A landing bucket, ingest's stores and its published requests, driven the way Cloud Storage drives them."""

    def __init__(self, routes: tuple[Route, ...]) -> None:
        self.objects = FakeObjects()
        self.datasets = FakeDatasets()
        self.published: list[bytes] = []
        self.clock = Clock()
        self.deps = fake_deps(self.objects, self.datasets, routes, self.published, self.clock)

    def upload(self, name: str, data: bytes | int = b"a,b\n1,2\n", **kw: object) -> str:
        """Put the object and deliver its finalize notification, as GCS would; returns the handler's outcome."""
        info = self.objects.put(name, data, at=self.clock.now, **kw)  # type: ignore[arg-type]
        return self.deliver(name, info.generation)

    def deliver(self, name: str, generation: str, kind: str = "finalize", bucket: str = BUCKET) -> str:
        event = envelopes.ObjectEvent(kind=kind, bucket=bucket, name=name, generation=generation, event_id="e1")
        return handle_object_event(event, self.deps)

    def requests(self) -> list[TrainingRequest]:
        return [parse_training_request(m) for m in self.published]

    def dataset(self, prefix: str) -> dict[str, Any]:
        return self.datasets.docs[dataset_id_for(BUCKET, prefix)]

    def sweep(self) -> str:
        return handle_sweep(envelopes.PubSubMessage(data=b"{}", message_id="tick"), self.deps)
