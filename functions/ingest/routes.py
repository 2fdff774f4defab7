"""The routes ingest applies: the settings' routes_file (LANDFALL_ROUTES_FILE) when set, else the shipped
deploy/routes.toml, read and checked by deploy/routes.py (the loader lives beside the data it reads). The file is
read again when it changes (deploy/reloading.py): an edit takes effect without a restart, a broken edit keeps the
last good routes and logs why."""

from __future__ import annotations

from importlib.resources.abc import Traversable
from pathlib import Path

from deploy.reloading import ReloadingFile
from deploy.routes import ROUTES_FILE, Route, RouteError, read_routes
from functions.settings import get_settings


class _Routes(ReloadingFile[tuple[Route, ...]]):
    def __call__(self, path: Traversable | None = None) -> tuple[Route, ...]:
        """The routes in path, checked. Default: the settings' routes_file when set, else the shipped routes.toml."""
        if path is None:
            path = Path(get_settings().routes_file) if get_settings().routes_file else ROUTES_FILE
        return self.read(path)


load_routes = _Routes(read_routes, (RouteError, TypeError, KeyError))
"""load_routes(path=None): the routes in effect now (see the module docstring); load_routes.cache_clear() forgets."""


def route_for(bucket: str, name: str, routes: tuple[Route, ...] | None = None) -> Route | None:
    """The first route that covers the object or prefix `name` in bucket."""
    return next((r for r in (routes or load_routes()) if r.matches(bucket, name)), None)
