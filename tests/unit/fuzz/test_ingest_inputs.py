"""Ingest's inputs from the bucket: hostile object names, and arbitrary _MANIFEST.json and landfall.json contents.

- A name is ignored with a reason, or it is taken under a route and every dataset it touches stays inside that
  route's prefix (no '..', no '//', nothing above the prefix).
- A manifest or landfall.json of any content gives a published request that is exactly the route's template with
  the allowed overrides, or a readable refusal (REFUSED, or WAITING for listed objects) naming the file.
"""

from __future__ import annotations

from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from functions.ingest.dataset_names import name_problem
from functions.ingest.routes import ROUTES_FILE, load_routes
from schemas.dataset_layout import MANIFEST, MARKER, OVERRIDES
from schemas.training_request import parse_training_request
from tests.fakes.ingest import BUCKET, World
from tests.unit.fuzz import strategies as s
from tests.unit.fuzz.harness import assert_readable

ROUTES = load_routes(ROUTES_FILE)
DATASET = "datasets/fuzz/"


def _segments_ok(prefix: str, route_prefix: str) -> bool:
    parts = prefix.removeprefix(route_prefix).rstrip("/").split("/")
    return prefix.startswith(route_prefix) and prefix.endswith("/") and all(p not in ("", ".", "..") for p in parts)


@given(st.lists(s.object_names(), min_size=1, max_size=4))
def test_a_hostile_name_is_ignored_with_a_reason_or_stays_in_its_dataset(names: list[str]) -> None:
    w = World(ROUTES)
    w.objects.put("datasets/ok/part-0.csv", b"a,b\n1,2\n")
    for name in [*names, *(f"{n}/{MARKER}" for n in names[:1])]:
        if name_problem(name) is None:
            info = w.objects.put(name, b"a,b\n1,2\n")
            outcome = w.deliver(name, info.generation)
        else:
            outcome = w.deliver(name, "7")
            assert outcome == "ignored:bad-name", (name, outcome)
        event(outcome.split(":")[0])
        assert outcome, "no outcome"
    route_prefixes = {r.name: r.prefix for r in ROUTES}
    for doc in [*w.datasets.docs.values(), *w.datasets.versions.values()]:
        prefix = doc.get("prefix") or doc["uri"].removeprefix(f"gs://{BUCKET}/")
        route = doc["route"]
        assert _segments_ok(prefix, route_prefixes[route]), f"dataset {prefix!r} escapes route {route}'s prefix"
        if doc.get("reason"):
            assert_readable(doc["reason"])
    for request in w.requests():
        assert _segments_ok(request.dataset.prefix, "datasets/") or _segments_ok(request.dataset.prefix, "exports/")


def _world_with(files: dict[str, bytes]) -> World:
    w = World(ROUTES)
    w.objects.put(f"{DATASET}part-0.csv", b"a,b\n1,2\n")
    w.objects.put(f"{DATASET}sub/part-2.csv", b"a,b\n3,4\n")
    for name, data in files.items():
        w.objects.put(f"{DATASET}{name}", data)
    return w


def _check(w: World, outcome: str, file: str) -> dict[str, Any]:
    event(outcome.split(":")[0])
    doc = w.dataset(DATASET)
    if outcome.startswith("published:"):
        (request,) = w.requests()
        assert parse_training_request(request.to_json()) == request
        assert request.dataset.uri == f"gs://{BUCKET}/{DATASET}"
        assert request.labels["landfall-route"] == "default-tabular"
    else:
        assert outcome.split(":")[0] in ("refused", "waiting"), outcome
        assert w.requests() == []
        assert file in doc["reason"] or "data object" in doc["reason"], doc["reason"]
        assert_readable(doc["reason"])
    return doc


@given(s.manifests)
def test_any_manifest_publishes_what_it_lists_or_says_why_not(manifest: bytes) -> None:
    w = _world_with({MANIFEST: manifest})
    outcome = w.deliver(f"{DATASET}{MANIFEST}", w.objects.objects[f"{DATASET}{MANIFEST}"].generation)
    _check(w, outcome, MANIFEST)


@given(s.overrides)
def test_any_landfall_json_applies_only_allowed_fields_or_is_refused_by_name(overrides: bytes) -> None:
    w = _world_with({OVERRIDES: overrides})
    outcome = w.upload(f"{DATASET}{MARKER}", b"")
    _check(w, outcome, OVERRIDES)
    if outcome.startswith("published:"):
        (request,) = w.requests()
        base = _world_with({})
        base.upload(f"{DATASET}{MARKER}", b"")
        (template,) = base.requests()
        assert request.dataset.uri == template.dataset.uri and request.task == template.task
        assert request.model.preset == template.model.preset, "landfall.json changed a field the route keeps"
