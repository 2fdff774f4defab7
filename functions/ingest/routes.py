"""The routes ingest applies: the settings' routes_file (LANDFALL_ROUTES_FILE) when set, else the shipped
deploy/routes.toml, read and checked by deploy/routes.py (the loader lives beside the data it reads)."""

from __future__ import annotations

from functools import cache
from importlib.resources.abc import Traversable
from pathlib import Path

from deploy.routes import ROUTES_FILE, Route, read_routes
from functions.settings import get_settings


@cache
def load_routes(path: Traversable | None = None) -> tuple[Route, ...]:
    """The routes in path, checked. Default: the settings' routes_file when set, else the shipped routes.toml."""
    if path is None:
        path = Path(get_settings().routes_file) if get_settings().routes_file else ROUTES_FILE
    return read_routes(path)


def route_for(bucket: str, name: str, routes: tuple[Route, ...] | None = None) -> Route | None:
    """The first route that covers the object or prefix `name` in bucket."""
    return next((r for r in (routes or load_routes()) if r.matches(bucket, name)), None)
