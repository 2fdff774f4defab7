"""In-memory stand-ins for ingest's adapters (GcsObjects, DatasetsStore), for pure-logic tests only.

The fake store applies the same pure rules as the Firestore adapter (functions/records/dataset_versions.py and the
lease rule in leases.py); tests/integration/test_store_contracts.py checks both against the same behaviours.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from functions.gcp.gcs_objects import ObjectInfo, TooLarge
from functions.ingest.handler import IngestDeps
from functions.ingest.routes import Route
from functions.records.dataset_versions import Doc, claim, finished, first_claim, newer_version
from functions.records.leases import Claim, ClaimOutcome
from functions.settings import settings_from_env
from schemas.dataset_record import DatasetStatus, VersionStatus

SETTINGS = settings_from_env({"GOOGLE_CLOUD_PROJECT": "landfall-local"})
T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


class FakeObjects:
    def __init__(self) -> None:
        self.objects: dict[str, ObjectInfo] = {}
        self.content: dict[str, bytes] = {}
        self._generation = 1000
        self.list_calls = 0

    def put(self, name: str, data: bytes | int = b"x", *, at: datetime = T0, crc32c: str = "") -> ObjectInfo:
        self._generation += 1
        payload = data if isinstance(data, bytes) else b"x" * data
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
            return [copy.deepcopy(d) for d in self.docs.values()
                    if d["status"] in (DatasetStatus.COLLECTING, DatasetStatus.WAITING)]

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

    def finish_version(self, run_id: str, *, owner: str, status: VersionStatus, now: datetime,
                       updates: dict[str, Any]) -> bool:
        with self._lock:
            new = finished(self.versions.get(run_id), owner=owner, status=status, now=now, updates=updates)
            if new is not None:
                self.versions[run_id] = copy.deepcopy(new)
            return new is not None

    def version(self, run_id: str) -> dict[str, Any] | None:
        with self._lock:
            return copy.deepcopy(self.versions.get(run_id))


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def fake_deps(objects: FakeObjects, datasets: FakeDatasets, routes: tuple[Route, ...], published: list[bytes],
              clock: Clock | None = None) -> IngestDeps:
    def publish(data: bytes) -> str:
        published.append(data)
        return str(len(published))

    return IngestDeps(settings=SETTINGS, objects=objects, datasets=datasets, publish=publish,  # type: ignore[arg-type]
                      now=clock or Clock(), routes=lambda: routes)
