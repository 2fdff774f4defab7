"""In-memory stand-ins for ingest's adapters (GcsObjects, DatasetsStore), for pure-logic tests only.

The fake store applies the same pure rules as the Firestore adapter (functions/records/dataset_versions.py and the
lease rule in leases.py); tests/integration/test_store_contracts.py checks both against the same behaviours.
"""

from __future__ import annotations

import base64
import copy
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import google_crc32c

from deploy.routes import Route
from functions import envelopes
from functions.gcp.gcs_objects import ObjectInfo, TooLarge
from functions.ingest.handler import IngestDeps, handle_object_event
from functions.ingest.sweep import handle_sweep
from functions.records.dataset_versions import (
    Doc,
    answered,
    claim,
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
from schemas.dataset_record import DatasetStatus, VersionStatus, dataset_id_for
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

    def read(self, bucket: str, name: str, generation: str, max_bytes: int) -> bytes | None:
        info = self.objects.get(name)
        if info is None or info.generation != generation:
            return None
        if len(self.content[name]) > max_bytes:
            raise TooLarge(f"{name} is larger than {max_bytes} bytes")
        return self.content[name]


class FakeDatasets:
    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, dict[str, Any]] = {}
        self.contents: dict[tuple[str, str], dict[str, Any]] = {}
        """(dataset_id, digest) -> content document."""
        self._lock = threading.Lock()

    def datasets(self, ids: Any) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {i: copy.deepcopy(self.docs[i]) for i in ids if i in self.docs}

    def save_dataset(self, doc: dict[str, Any]) -> bool:
        with self._lock:
            if newer_version(self.docs.get(doc["dataset_id"]), doc):
                self.docs[doc["dataset_id"]] = copy.deepcopy(doc)
                return True
            return False

    def mark_collecting(self, doc: dict[str, Any]) -> bool:
        with self._lock:
            cur = self.docs.get(doc["dataset_id"])
            if cur and cur["status"] == DatasetStatus.COLLECTING:
                return False
            self.docs[doc["dataset_id"]] = {**(cur or {}), **doc, "version": (cur or {}).get("version")}
            return True

    def open_datasets(self) -> list[dict[str, Any]]:
        with self._lock:
            return [
                copy.deepcopy(d)
                for d in self.docs.values()
                if d["status"] in (DatasetStatus.COLLECTING, DatasetStatus.WAITING)
            ]

    def claim_version(self, doc: dict[str, Any], *, owner: str, now: datetime, lease_seconds: int) -> Claim[Doc]:
        with self._lock:
            cur = self.versions.get(doc["run_id"])
            if cur is None:
                fresh = first_claim(doc, owner=owner, now=now, lease_seconds=lease_seconds)
                self.versions[doc["run_id"]] = fresh
                return Claim(ClaimOutcome.CLAIMED, copy.deepcopy(fresh))
            result = claim(cur, owner=owner, now=now, lease_seconds=lease_seconds)
            if result.outcome == ClaimOutcome.CLAIMED:
                self.versions[doc["run_id"]] = result.doc
            return Claim(result.outcome, copy.deepcopy(result.doc))

    def finish_version(
        self, run_id: str, *, owner: str, status: VersionStatus, now: datetime, updates: dict[str, Any]
    ) -> bool:
        with self._lock:
            new = finished(self.versions.get(run_id), owner=owner, status=status, now=now, updates=updates)
            if new is not None:
                self.versions[run_id] = copy.deepcopy(new)
            return new is not None

    def version(self, run_id: str) -> dict[str, Any] | None:
        with self._lock:
            return copy.deepcopy(self.versions.get(run_id))

    def unanswered_versions(self, *, page_size: int = 200) -> Iterator[Doc]:
        with self._lock:
            docs = [
                copy.deepcopy(self.versions[k])
                for k in sorted(self.versions)
                if self.versions[k].get("answered") is False
            ]
        yield from docs

    def _change_version(self, run_id: str, rule: Callable[[Doc | None], Doc | None]) -> bool:
        with self._lock:
            new = rule(copy.deepcopy(self.versions.get(run_id)))
            if new is not None:
                self.versions[run_id] = new
            return new is not None

    def mark_answered(self, run_id: str, *, now: datetime) -> bool:
        return self._change_version(run_id, lambda cur: answered(cur, now=now))

    def claim_republish(self, run_id: str, *, now: datetime, grace_seconds: int) -> bool:
        return self._change_version(run_id, lambda cur: republish_claimed(cur, now=now, grace_seconds=grace_seconds))

    def count_republish(self, run_id: str, *, message_id: str) -> bool:
        return self._change_version(run_id, lambda cur: republish_counted(cur, message_id=message_id))

    def claim_content(self, doc: dict[str, Any], *, now: datetime, retrain: bool = False) -> Claim[Doc]:
        with self._lock:
            key = (doc["dataset_id"], doc["digest"])
            cur = self.contents.get(key)
            holder = self.versions.get(cur["run_id"]) if cur and cur.get("run_id") else None
            result = content_claim(cur, holder, doc, now=now, retrain=retrain)
            if result.outcome == ClaimOutcome.CLAIMED:
                self.contents[key] = copy.deepcopy(result.doc)
            return Claim(result.outcome, copy.deepcopy(result.doc))

    def count_retrain(self, doc: dict[str, Any], *, now: datetime) -> dict[str, Any]:
        with self._lock:
            key = (doc["dataset_id"], doc["digest"])
            self.contents[key] = retrain_counted(self.contents.get(key), doc, now=now)
            return copy.deepcopy(self.contents[key])

    def content(self, dataset_id: str, digest: str) -> dict[str, Any] | None:
        with self._lock:
            return copy.deepcopy(self.contents.get((dataset_id, digest)))


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
