"""Whether a complete dataset may become a TrainingRequest: one paged pass over the prefix measures it, the route's
rules (minimums, formats), the manifest and landfall.json are checked, and the request is built. Pure except for
the listing iterator and the bounded reads it is given."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from deploy.routes import Route
from functions.gcp.gcs_objects import ObjectInfo, TooLarge
from functions.ingest.dataset_names import MANIFEST, MARKER, OVERRIDES, Role, format_of, role_of
from functions.ingest.manifest import MAX_MANIFEST_BYTES, Entry, ManifestError, manifest_problems, parse_manifest
from functions.ingest.overrides import MAX_OVERRIDES_BYTES, OverrideError, apply_overrides, parse_overrides
from schemas.data_objects import INLINE_LIST_BYTES, DataObject, ListDigest, entry_bytes
from schemas.errors import SchemaError
from schemas.times import format_timestamp
from schemas.training_request import (
    Constraints,
    DatasetRef,
    Hyperparameters,
    ModelSpec,
    RequestSource,
    TrainingRequest,
    parse_training_request,
)

NO_FORMAT = "(none)"


@dataclass
class Scan:
    """What one listing of a dataset prefix found."""

    count: int = 0
    total_bytes: int = 0
    formats: set[str] = field(default_factory=set)
    newest: ObjectInfo | None = None
    """The data object with the highest generation (quiet-period versions are named by it)."""
    latest_update: datetime | None = None
    overrides: ObjectInfo | None = None
    manifest: ObjectInfo | None = None
    present: dict[str, ObjectInfo] = field(default_factory=dict)
    """Objects whose relative names were asked for (the manifest's entries)."""
    objects: list[DataObject] | None = field(default_factory=list)
    """The data objects (relative names, generations, sizes) while their list fits INLINE_LIST_BYTES; None past it
    (the digest then names them)."""
    list_bytes: int = 2
    """What `objects` takes as compact JSON (schemas/data_objects.py encode_objects)."""
    objects_digest: ListDigest = field(default_factory=ListDigest)
    """The digest of every data object's name, generation and size, in listing (name) order."""
    content: Any = field(default_factory=hashlib.sha256)
    """Running SHA-256 over what is trained: each data object's and landfall.json's relative name, size and crc32c
    (its generation where the listing has no crc32c), in listing order (Cloud Storage lists names in order)."""

    @property
    def content_digest(self) -> str:
        """The dataset's content as 32 hex characters: the same objects, the same digest, whatever marked them."""
        return str(self.content.hexdigest()[:32])

    def add_object(self, obj: DataObject) -> None:
        self.objects_digest.add(obj)
        if self.objects is None:
            return
        self.list_bytes += entry_bytes(obj) + (1 if self.objects else 0)
        if self.list_bytes > INLINE_LIST_BYTES:
            self.objects = None
        else:
            self.objects.append(obj)

    def add_content(self, relative: str, obj: ObjectInfo) -> None:
        checksum = obj.crc32c or f"generation:{obj.generation}"
        self.content.update(json.dumps([relative, obj.size, checksum]).encode() + b"\n")


def scan_prefix(objects: Iterable[ObjectInfo], prefix: str, wanted: frozenset[str] = frozenset()) -> Scan:
    """Measure the data objects under prefix in one pass, keeping only what is needed (constant memory)."""
    scan = Scan()
    for obj in objects:
        relative = obj.name[len(prefix) :]
        if relative in wanted:
            scan.present[relative] = obj
        if relative == OVERRIDES:
            scan.overrides = obj
            scan.add_content(relative, obj)
        elif relative == MANIFEST:
            scan.manifest = obj
        if role_of(relative) != Role.DATA:
            continue
        scan.add_content(relative, obj)
        scan.add_object(DataObject(relative, obj.generation, obj.size))
        scan.count += 1
        scan.total_bytes += obj.size
        scan.formats.add(format_of(obj.name) or NO_FORMAT)
        if scan.newest is None or int(obj.generation or 0) > int(scan.newest.generation or 0):
            scan.newest = obj
        if obj.updated is not None and (scan.latest_update is None or obj.updated > scan.latest_update):
            scan.latest_update = obj.updated
    return scan


@dataclass(frozen=True)
class Completion:
    """A dataset version that claims to be complete, and what completed it."""

    bucket: str
    prefix: str
    route: Route
    kind: str
    """"marker", "manifest" or "quiet-period"."""
    object_name: str
    generation: str
    event_id: str = ""
    key: str = ""
    """The idempotency key when it is not the completing object's (`landfall retrain`: derived from the content)."""

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}"

    @property
    def idempotency_key(self) -> str:
        return self.key or f"gcs:{self.bucket}/{self.prefix}:{self.generation}"


_SOURCE_KIND = {
    "marker": "gcs-marker",
    "manifest": "gcs-manifest",
    "quiet-period": "quiet-period",
    "retrain": "retrain",
}


@dataclass(frozen=True)
class Verdict:
    request: TrainingRequest | None = None
    reason: str = ""
    waiting: bool = False
    """Not ready yet (a manifest names objects still to land), rather than refused."""
    content_digest: str = ""
    """With a request: the digest of what it trains (Scan.content_digest)."""


ReadObject = Callable[[str, str, int], bytes | None]
"""(object name, generation, max bytes) -> content, None when gone; raises TooLarge past max bytes."""


def read_manifest(c: Completion, read: ReadObject) -> tuple[Entry, ...]:
    try:
        data = read(c.object_name, c.generation, MAX_MANIFEST_BYTES)
    except TooLarge as exc:
        raise ManifestError(
            f"_MANIFEST.json is larger than {MAX_MANIFEST_BYTES} bytes; list fewer objects, or "
            "complete big datasets with a _SUCCESS marker instead"
        ) from exc
    if data is None:
        raise ManifestError(
            f"gs://{c.bucket}/{c.object_name} generation {c.generation} no longer exists "
            "(replaced or deleted); the newer manifest, if any, is evaluated on its own"
        )
    return parse_manifest(data)


def evaluate(c: Completion, scan: Scan, read: ReadObject, entries: tuple[Entry, ...], now: datetime) -> Verdict:
    """The request for this dataset version, or the reason there is none."""
    route = c.route
    if entries:
        problems = manifest_problems(entries, scan.present)
        if problems:
            return Verdict(
                reason=f"{c.uri}{MANIFEST}: "
                + "; ".join(problems)
                + ". The dataset completes when the listed objects land as listed (checked by the ingest sweep "
                "each minute, or at once by a new manifest).",
                waiting=True,
            )
    if scan.count < max(route.min_objects, 1):
        if c.kind == "marker":
            # The marker landed before its data (gcloud uploads files in parallel): wait for the data rather than
            # refuse. The next sweep tick (or a new marker) evaluates the version again; data objects themselves are
            # acknowledged unread (functions/ingest/handler.py _on_data).
            return Verdict(
                reason=f"{c.uri}{MARKER} landed while the folder held {scan.count} data object(s); route "
                f"{route.name!r} needs at least {max(route.min_objects, 1)}. Waiting for data: the ingest "
                "sweep cuts the version within a minute of the data landing. Upload the marker last (docs/ingest.md)",
                waiting=True,
            )
        return Verdict(
            reason=f"{c.uri} holds {scan.count} data object(s); route {route.name!r} needs at least "
            f"{max(route.min_objects, 1)} (markers, manifests, landfall.json and _/. files do not count)"
        )
    if scan.total_bytes < route.min_bytes:
        return Verdict(
            reason=f"{c.uri} holds {scan.total_bytes} bytes of data; route {route.name!r} needs at "
            f"least {route.min_bytes}"
        )
    if route.formats:
        refused = sorted(scan.formats - set(route.formats))
        if refused:
            return Verdict(
                reason=f"{c.uri} holds objects in format(s) {', '.join(refused)}; route {route.name!r} "
                f"accepts {', '.join(route.formats)}. Remove or convert them, then mark the dataset "
                "complete again"
            )
    overrides: dict[str, object] = {}
    if scan.overrides is not None:
        try:
            data = read(scan.overrides.name, scan.overrides.generation, MAX_OVERRIDES_BYTES)
            overrides = parse_overrides(data or b"{}")
        except TooLarge:
            return Verdict(reason=f"{c.uri}{OVERRIDES} is larger than {MAX_OVERRIDES_BYTES} bytes")
        except OverrideError as exc:
            return Verdict(reason=f"{c.uri}{OVERRIDES}: {exc}")
    base = template(c, scan, now)
    try:
        merged = apply_overrides(base.to_dict(), overrides, route) if overrides else base.to_dict()
        labels = merged.get("labels", {})
        if isinstance(labels, dict):  # anything else is refused below, naming the field
            merged["labels"] = {**labels, "landfall-route": route.name}
        return Verdict(request=parse_training_request(merged), content_digest=scan.content_digest)
    except OverrideError as exc:
        return Verdict(reason=f"{c.uri}{OVERRIDES}: {exc}")
    except SchemaError as exc:
        where = f"{c.uri}{OVERRIDES}" if overrides else f"route {route.name!r} in deploy/routes.toml"
        return Verdict(reason=f"{where} gives an invalid value: {exc}")


def template(c: Completion, scan: Scan, now: datetime) -> TrainingRequest:
    """The route's training template for this dataset version, with its measured stats."""
    route = c.route
    constraints: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in route.constraints.items()}
    return TrainingRequest(
        idempotency_key=c.idempotency_key,
        dataset=DatasetRef(
            uri=c.uri,
            object_count=scan.count,
            total_bytes=scan.total_bytes,
            formats=tuple(sorted(scan.formats - {NO_FORMAT})),
            objects=tuple(scan.objects or ()),
            objects_digest=scan.objects_digest.hexdigest(),
        ),
        task=route.task,
        model=ModelSpec(preset=route.model_preset, label_column=route.label_column),
        hyperparameters=Hyperparameters(**route.hyperparameters),
        constraints=Constraints(**constraints),
        source=RequestSource(
            kind=_SOURCE_KIND[c.kind],
            object=f"gs://{c.bucket}/{c.object_name}",
            generation=c.generation,
            event_id=c.event_id,
        ),
        created_at=format_timestamp(now),
        labels={"landfall-route": route.name},
        trainer=route.trainer_spec,
        workload=route.workload_spec,
    )
