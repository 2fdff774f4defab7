"""Routes from deploy/routes.toml: the training template each dataset prefix gets. Data apart from logic."""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from schemas.training_request import TASKS

ROUTES_FILE = Path(__file__).resolve().parents[1] / "deploy" / "routes.toml"


class RouteError(ValueError):
    """deploy/routes.toml is malformed."""


@dataclass(frozen=True)
class Route:
    name: str
    bucket: str
    prefix: str
    task: str
    model_preset: str
    label_column: str = "label"
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    constraints: dict[str, Any] = field(default_factory=dict)

    def matches(self, bucket: str, dataset_prefix: str) -> bool:
        return fnmatch.fnmatchcase(bucket, self.bucket) and dataset_prefix.startswith(self.prefix)


@cache
def load_routes(path: Path = ROUTES_FILE) -> tuple[Route, ...]:
    raw = tomllib.loads(path.read_text())
    routes = []
    for i, entry in enumerate(raw.get("routes", [])):
        try:
            route = Route(**entry)
        except TypeError as exc:
            raise RouteError(f"{path.name}: routes[{i}] is malformed: {exc}") from exc
        if route.task not in TASKS:
            raise RouteError(f"{path.name}: route {route.name!r} has task {route.task!r}; expected one of {TASKS}")
        routes.append(route)
    if not routes:
        raise RouteError(f"{path.name}: no [[routes]] defined; add at least one")
    return tuple(routes)


def route_for(bucket: str, dataset_prefix: str, routes: tuple[Route, ...] | None = None) -> Route | None:
    return next((r for r in (routes or load_routes()) if r.matches(bucket, dataset_prefix)), None)
