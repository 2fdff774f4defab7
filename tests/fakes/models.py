"""In-memory stand-in for Vertex AI Model Registry (functions/gcp/model_registry.py ModelRegistry): versions numbered
from 1 per model, the first one `default`, aliases unique within a model, label lookups by run. Counts uploads, so a
test can hold registration to once per run."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import replace
from datetime import datetime
from typing import Any

from schemas.model_version import RUN_LABEL, VersionView, label_value

PARENT = "projects/p/locations/us-central1"


class FakeRegistry:
    def __init__(self) -> None:
        self.by_model: dict[str, list[VersionView]] = {}
        self.uploads: Counter[str] = Counter()
        """Uploads by run label."""
        self.fail_upload: BaseException | None = None
        self.fail_alias: Exception | None = None
        self._lock = threading.Lock()

    def model_name(self, model_id: str) -> str:
        return f"{PARENT}/models/{model_id}"

    def get(self, name: str) -> VersionView | None:
        model, _, ref = name.partition("@")
        with self._lock:
            versions = self.by_model.get(model, [])
            ref = ref or "default"
            return next((v for v in versions if v.version_id == ref or ref in v.aliases), None)

    def find_by_run(self, model_id: str, run_id: str) -> VersionView | None:
        with self._lock:
            versions = self.by_model.get(self.model_name(model_id), [])
            return next((v for v in versions if v.labels.get(RUN_LABEL) == label_value(run_id)), None)

    def upload(self, model_id: str, model: dict[str, Any]) -> VersionView:
        if self.fail_upload is not None:
            raise self.fail_upload
        name = self.model_name(model_id)
        with self._lock:
            versions = self.by_model.setdefault(name, [])
            version = VersionView(
                model=name,
                version_id=str(len(versions) + 1),
                display_name=model["display_name"],
                aliases=() if versions else ("default",),
                labels=dict(model["labels"]),
                artifact_uri=model["artifact_uri"],
                version_description=model["version_description"],
                metadata=dict(model["metadata"]),
            )
            versions.append(version)
            self.uploads[model["labels"][RUN_LABEL]] += 1
            return version

    def set_alias(self, version_name: str, alias: str) -> VersionView:
        if self.fail_alias is not None:
            raise self.fail_alias
        model, _, version_id = version_name.partition("@")
        with self._lock:
            versions = self.by_model[model]
            for i, v in enumerate(versions):
                others = tuple(a for a in v.aliases if a != alias)
                versions[i] = replace(v, aliases=(*others, alias) if v.version_id == version_id else others)
            return next(v for v in versions if v.version_id == version_id)

    def holder(self, model_id: str, alias: str = "production") -> str:
        """The version id holding alias ("" when none does)."""
        found = self.get(f"{self.model_name(model_id)}@{alias}")
        return "" if found is None else found.version_id

    def versions(self, model_id: str, *, label_filter: str = "") -> list[VersionView]:
        with self._lock:
            return list(self.by_model.get(self.model_name(model_id), []))

    def models(self) -> list[VersionView]:
        with self._lock:
            return [versions[0] for versions in self.by_model.values() if versions]


class FakePromotions:
    """In-memory promotion leases (functions/gcp/model_promotions_store.py ModelPromotionsStore), through the same
    steps (functions/records/promotion_leases.py), one at a time."""

    def __init__(self) -> None:
        from schemas.promotion_lease import PromotionLease

        self.leases: dict[str, PromotionLease] = {}
        self._lock = threading.Lock()

    def _apply(self, model_id: str, step: Any) -> bool:
        with self._lock:
            new, answer = step(self.leases.get(model_id))
            if new is not None:
                self.leases[model_id] = new
            return bool(answer)

    def hold(self, model_id: str, holder: str, *, now: datetime, until: datetime) -> bool:
        from functions.records.promotion_leases import taken

        return self._apply(model_id, taken(model_id, holder, now=now, until=until))

    def release(self, model_id: str, holder: str, *, now: datetime) -> None:
        from functions.records.promotion_leases import given_back

        self._apply(model_id, given_back(holder, now=now))
