"""The dashboard's ASGI app (Starlette, Jinja2 templates): read-only pages over the records the CLI reads, and the
CLI's cancel and retry where LANDFALL_UI_ACTIONS allows them, each behind a confirmation page. The pages and the list
that makes both the navigation and the routes are landfall/ui/pages.py's.

`create_app()` builds it from the environment the CLI reads (the local stack's `.landfall/env` fills what is unset);
nothing is read from a client until a page asks. `app` is the object an ASGI server loads (`landfall.ui.app:app`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from deploy.teams import Teams
from landfall.access import chosen_identity
from landfall.ui import views
from landfall.ui.hosts import allowed_hosts
from landfall.ui.pages import NAVIGATION, PAGES, Dashboard
from landfall.ui.source import LandfallSource, Source, allowed_actions

HERE = Path(__file__).parent
POLL_MS = 3000
"""How often an open page asks for what changed (the runs table, a run that has not ended)."""


def create_app(
    source: Source | None = None,
    actions: frozenset[str] | None = None,
    *,
    poll_ms: int = POLL_MS,
    hosts: tuple[str, ...] | None = None,
    access: Callable[[], Teams] | None = None,
    identity: str | None = None,
    verify: Callable[[str], Mapping[str, Any]] | None = None,
) -> Starlette:
    """The dashboard over `source` (default: the CLI's clients), offering `actions` (default: LANDFALL_UI_ACTIONS)
    to requests whose Host and Origin are among `hosts` (default: LANDFALL_UI_HOSTS); open pages ask for what
    changed every `poll_ms`. `access`: the teams file that says who sees what (default with the CLI's clients: the
    functions' teams file, LANDFALL_TEAMS_FILE else deploy/teams.toml; None: everyone sees everything); `identity`:
    the caller for every request (default LANDFALL_IDENTITY; "" for the one each request's ID token names)."""
    from landfall.stack_env import load_stack_env

    if source is None:
        load_stack_env()
        source = LandfallSource()
        if access is None:
            from functions.wiring import teams

            access = teams
    offered = allowed_actions() if actions is None else actions
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.globals.update(pages=NAVIGATION, titles=dict(NAVIGATION), poll_ms=poll_ms, actions=sorted(offered))
    templates.env.filters["when"] = views.short_time
    app = Starlette(routes=routes())
    app.state.dashboard = Dashboard(
        source=source,
        offered=offered,
        hosts=allowed_hosts() if hosts is None else hosts,
        templates=templates,
        local=bool(os.environ.get("LANDFALL_VERTEX_ENDPOINT")),
        access=access,
        identity=chosen_identity() if identity is None else identity,
        verify=verify,
    )
    return app


def routes() -> list[BaseRoute]:
    """/ (to the first page of the navigation), every page of PAGES, and the static files."""
    first = f"/{NAVIGATION[0][0]}"

    def home(request: Request) -> Response:
        return RedirectResponse(first)

    return [
        Route("/", home),
        *(Route(p.path, p.endpoint, methods=list(p.methods)) for p in PAGES),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]


def __getattr__(name: str) -> Any:
    """`app`, built on first use (`landfall.ui.app:app` for an ASGI server), so importing the module builds nothing."""
    if name == "app":
        built = create_app()
        globals()["app"] = built
        return built
    raise AttributeError(name)
