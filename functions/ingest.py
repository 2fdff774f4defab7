"""Ingest: an object event on the landing bucket; a `_SUCCESS` marker completes its dataset (the prefix holding it)
and publishes one TrainingRequest whose idempotency key names this dataset version."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from functions.envelopes import ObjectEvent
from functions.routes import Route, route_for
from functions.run_transitions import iso
from functions.settings import Settings
from schemas.training_request import (
    Constraints,
    DatasetRef,
    Hyperparameters,
    ModelSpec,
    RequestSource,
    TrainingRequest,
)

log = logging.getLogger("landfall.ingest")

MARKER = "_SUCCESS"
MAX_OBJECT_NAME = 1024


@dataclass(frozen=True)
class IngestDeps:
    settings: Settings
    list_objects: Callable[[str, str], Iterable[tuple[str, int]]]
    """(bucket, prefix) -> (object name, size) for every object under prefix."""
    publish: Callable[[bytes], str]
    """Publishes a TrainingRequest; returns the message id."""
    now: Callable[[], datetime]


def name_problem(name: str) -> str | None:
    if len(name.encode()) > MAX_OBJECT_NAME:
        return f"object name is {len(name.encode())} bytes; Cloud Storage allows {MAX_OBJECT_NAME}"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "object name contains control characters"
    if ".." in name.split("/") or name.startswith("/"):
        return "object name contains '..' or starts with '/'"
    return None


def is_data_object(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return bool(base) and not base.startswith(("_", "."))


def handle_object_event(event: ObjectEvent, deps: IngestDeps) -> str:
    settings = deps.settings
    if event.kind != "finalize":
        log.debug("ignoring %s event for gs://%s/%s", event.kind, event.bucket, event.name)
        return f"ignored:{event.kind}"
    problem = name_problem(event.name)
    if problem:
        log.warning("ignoring gs://%s/%r: %s", event.bucket, event.name[:200], problem)
        return "ignored:bad-name"
    if event.bucket != settings.landing_bucket or not event.name.startswith(settings.dataset_prefix):
        log.info("ignoring gs://%s/%s: outside the landing area gs://%s/%s", event.bucket, event.name,
                 settings.landing_bucket, settings.dataset_prefix)
        return "ignored:outside-landing-area"
    directory, _, base = event.name.rpartition("/")
    if base != MARKER:
        return "ignored:not-a-marker"
    prefix = f"{directory}/"
    if prefix == settings.dataset_prefix or not directory:
        log.warning("ignoring marker gs://%s/%s: a dataset is a folder below %s", event.bucket, event.name,
                    settings.dataset_prefix)
        return "ignored:marker-at-root"
    route = route_for(event.bucket, prefix)
    if route is None:
        log.warning("no route in deploy/routes.toml matches gs://%s/%s; add one", event.bucket, prefix)
        return "ignored:no-route"
    count, total, formats = 0, 0, set()
    for name, size in deps.list_objects(event.bucket, prefix):
        if is_data_object(name):
            count += 1
            total += size
            base_name = name.rsplit("/", 1)[-1]
            if "." in base_name:
                formats.add(base_name.rsplit(".", 1)[-1].lower())
    if count == 0:
        log.warning("dataset gs://%s/%s is marked complete but holds no data objects; no request", event.bucket,
                    prefix)
        return "ignored:empty-dataset"
    request = build_request(event, prefix, route, (count, total, tuple(sorted(formats))), deps.now())
    message_id = deps.publish(request.to_json())
    log.info("dataset gs://%s/%s complete (%d objects, %d bytes): request %s published as message %s",
             event.bucket, prefix, count, total, request.run_id, message_id)
    return f"published:{request.run_id}"


def build_request(event: ObjectEvent, prefix: str, route: Route, stats: tuple[int, int, tuple[str, ...]],
                  now: datetime) -> TrainingRequest:
    count, total, formats = stats
    h = route.hyperparameters
    c = route.constraints
    return TrainingRequest(
        idempotency_key=f"gcs:{event.bucket}/{prefix}:{event.generation}",
        dataset=DatasetRef(uri=f"gs://{event.bucket}/{prefix}", object_count=count, total_bytes=total,
                           formats=formats),
        task=route.task,
        model=ModelSpec(preset=route.model_preset, label_column=route.label_column),
        hyperparameters=Hyperparameters(**h),
        constraints=Constraints(**{k: tuple(v) if isinstance(v, list) else v for k, v in c.items()}),
        source=RequestSource(kind="gcs-marker", object=f"gs://{event.bucket}/{event.name}",
                             generation=event.generation, event_id=event.event_id),
        created_at=iso(now),
        labels={"landfall-route": route.name},
    )
