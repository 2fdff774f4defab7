"""The dashboard's pages: one function per page at module level, and PAGES, the one list that builds both the
navigation (the pages with a title) and the routes (every page). A new page is a function here and a line in PAGES.

Each page reads through the Source the app was built with (landfall/ui/source.py: the CLI's read side), shapes what
it read with views.py (in landfall/words.py's words) and renders a template of templates/. What the app was built
with (the Source, the actions offered, the names it answers to, the templates) is the Dashboard on `app.state`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.templating import Jinja2Templates

from deploy.teams import Teams
from landfall.access import NotYours, request_identity, viewer_for
from landfall.errors import CommandError
from landfall.queries.datasets import read_dataset
from landfall.queries.dead_letters import parse_orphans
from landfall.ui import views
from landfall.ui.hosts import HOSTS_ENV, host_allowed, origin_allowed
from landfall.ui.query import BadParameter, run_id, runs_query
from landfall.ui.source import ACTIONS_ENV, KNOWN_ACTIONS, RunsQuery, Source, tail
from landfall.ui.viewer import ScopedSource
from landfall.words import decision_text, gpus_in_flight, score_text, spend_text, started_run
from schemas.errors import SchemaError
from schemas.orphan_record import OrphanRecord

LIVE_SECTIONS = ("facts", "head", "timeline", "plan", "links", "logs")
"""The parts of a run's page that its poll replaces (templates run_NAME.html, elements #run-NAME)."""


@dataclass(frozen=True)
class Dashboard:
    """What the app was built with: where it reads and acts, the actions it offers, the names (Host, Origin) it takes
    an action from, its templates, whether the deployment is the local stack (no Vertex console to link), the teams
    file that says who sees what (None: everyone sees everything), and the identity chosen for every caller
    (LANDFALL_IDENTITY; "" for the one each request's ID token names)."""

    source: Source
    offered: frozenset[str]
    hosts: tuple[str, ...]
    templates: Jinja2Templates
    local: bool
    access: Callable[[], Teams] | None = None
    identity: str = ""
    verify: Callable[[str], Mapping[str, Any]] | None = None
    """How an ID token is verified (None: Google's keys, landfall/access.py request_identity); tests give their own."""


def dashboard(request: Request) -> Dashboard:
    built: Dashboard = request.app.state.dashboard
    return built


def source_of(request: Request) -> Source:
    """Where this caller reads and acts: the dashboard's Source, scoped to the caller's teams where the teams file
    says who is who (landfall/ui/viewer.py)."""
    built = dashboard(request)
    if built.access is None:
        return built.source
    teams = built.access()
    viewer = viewer_for(built.identity or request_identity(request.headers, built.verify), teams)
    return built.source if viewer is None else ScopedSource(built.source, viewer, teams)


def _refusal_status(exc: CommandError, otherwise: int) -> int:
    return 403 if isinstance(exc, NotYours) else otherwise


def page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    return dashboard(request).templates.TemplateResponse(request, name, context, status_code=status)


def failed(request: Request, active: str, exc: Exception, status: int = 502) -> Response:
    return page(request, "error.html", {"active": active, "message": str(exc)}, status)


def _filters(query: RunsQuery, request: Request) -> dict[str, str]:
    return {
        "state": query.state or "",
        "dataset": query.dataset or "",
        "team": query.team or "",
        "since": request.query_params.get("since", ""),
    }


def runs_page_data(request: Request) -> dict[str, Any]:
    query = runs_query(request.query_params)
    docs = source_of(request).runs(query, views.PAGE_SIZE + 1)
    runs, skipped = views.readable(docs[: views.PAGE_SIZE])
    filters = _filters(query, request)
    more = len(docs) > views.PAGE_SIZE
    last = docs[views.PAGE_SIZE - 1].get("run_id") if more else None
    return {
        "rows": [views.run_row(r) for r in runs],
        "skipped": skipped,
        "filters": filters,
        "states": views.STATES,
        "paged": query.after is not None,
        "first_url": "/runs?" + urlencode({k: v for k, v in filters.items() if v}),
        "next_url": "/runs?" + urlencode({**{k: v for k, v in filters.items() if v}, "after": last}) if last else "",
        "rows_url": "/runs/rows?" + urlencode({k: v for k, v in request.query_params.items()}),
    }


def runs_page(request: Request) -> Response:
    try:
        data = runs_page_data(request)
    except BadParameter as exc:
        return failed(request, "runs", exc, 400)
    except CommandError as exc:
        return failed(request, "runs", exc)
    return page(request, "runs.html", {"active": "runs", **data})


def runs_rows(request: Request) -> Response:
    """The table's rows alone: the page asks for them every poll, so it updates without a reload."""
    try:
        data = runs_page_data(request)
    except (BadParameter, CommandError) as exc:
        return JSONResponse({"error": str(exc)}, status_code=400 if isinstance(exc, BadParameter) else 502)
    return page(request, "runs_rows.html", data)


def run_context(request: Request, run: str) -> dict[str, Any]:
    built = dashboard(request)
    source = source_of(request)
    record = source.run(run)
    lines, where = source.log_lines(record)
    curves = views.run_curves(record, lines)
    return {
        "run": record,
        "row": views.run_row(record),
        "timeline": views.timeline(record),
        "plan_rows": views.plan_rows(record.plan),
        "canary_rows": views.canary_rows(record),
        "curves": views.finite_json(curves.to_dict()),
        "progress": views.progress(record, lines),
        "failure": views.failure(record),
        "reconcile": views.reconcile_note(record),
        "log_tail": tail(lines, views.LOG_TAIL_LINES),
        "log_where": where,
        "open": views.is_open(record),
        "console_url": views.vertex_console_url(record, source.project()) if not built.local else "",
    }


def run_page(request: Request) -> Response:
    try:
        context = run_context(request, run_id(request.path_params["run_id"]))
    except BadParameter as exc:
        return failed(request, "runs", exc, 400)
    except CommandError as exc:
        return failed(request, "runs", exc, _refusal_status(exc, 404 if str(exc).startswith("no run ") else 502))
    # inside a <script> element: "</" written as "<\/" (still the same JSON) so no value can end the element
    curves_json = json.dumps(context["curves"], allow_nan=False).replace("</", "<\\/")
    return page(request, "run.html", {"active": "runs", **context, "curves_json": curves_json})


def run_live(request: Request) -> Response:
    """What changes on a run's page while it is open: its live sections as HTML, and the curves' data."""
    try:
        context = run_context(request, run_id(request.path_params["run_id"]))
    except BadParameter as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    except CommandError as exc:
        return JSONResponse({"error": str(exc)}, status_code=_refusal_status(exc, 502))
    templates = dashboard(request).templates
    sections = {name: templates.get_template(f"run_{name}.html").render(context) for name in LIVE_SECTIONS}
    return JSONResponse(
        {
            "open": context["open"],
            "state": context["run"].state.value,
            "sections": sections,
            "curves": context["curves"],
        }
    )


def confirm(request: Request) -> Response:
    """An action on a run: its confirmation page (GET), then the action itself (POST), where the dashboard offers
    it and the request comes from one of its own pages."""
    built = dashboard(request)
    action = request.path_params["action"]
    if action not in KNOWN_ACTIONS:
        return failed(request, "runs", CommandError(f"no page {request.url.path!r}"), 404)
    if action not in built.offered:
        return failed(request, "runs", CommandError(_not_offered(action, built.offered)), 403)
    try:
        run = run_id(request.path_params["run_id"])
    except BadParameter as exc:
        return failed(request, "runs", exc, 400)
    if request.method == "GET":
        return page(request, "confirm.html", {"active": "runs", "action": action, "run_id": run})
    refused = refused_because(request, built.hosts)
    if refused:
        return failed(request, "runs", CommandError(refused), 403)
    source = source_of(request)
    try:
        said = source.cancel(run) if action == "cancel" else source.retry(run)
    except CommandError as exc:
        return failed(request, "runs", exc, _refusal_status(exc, 409))
    return page(request, "done.html", {"active": "runs", "action": action, "run_id": run, "said": said})


def datasets_page(request: Request) -> Response:
    rows, skipped, errors = [], [], []
    try:
        docs = source_of(request).datasets(200)
    except CommandError as exc:
        docs, errors = [], [str(exc)]
    for doc in docs:
        try:
            record = read_dataset(doc).record
        except SchemaError as exc:
            skipped.append(f"{doc.get('uri', '?')}: {exc}")
            continue
        version = record.version
        rows.append(
            {
                "uri": record.uri,
                "route": record.route,
                "status": record.status.value,
                "reason": record.reason,
                "updated": record.updated_at,
                "version": "" if version is None else str(version.generation),
                "version_status": "" if version is None else version.status.value,
                "run_id": started_run(record),
                "runs_url": "/runs?" + urlencode({"dataset": record.uri}),
            }
        )
    return page(request, "datasets.html", {"active": "datasets", "rows": rows, "skipped": skipped, "errors": errors})


def models_page(request: Request) -> Response:
    errors = []
    try:
        source = source_of(request)
        versions = source.models()
        decisions = source.model_decisions(versions)
    except CommandError as exc:
        versions, decisions, errors = [], {}, [str(exc)]
    rows = []
    for v in versions:
        rows.append(
            {
                "model": v.model_id,
                "version": v.version_id,
                "aliases": ", ".join(v.aliases),
                "decision": decision_text(v.metadata, v.labels, decisions.get(v.version_name, "")),
                "why": (v.metadata.get("promotion") or {}).get("reason", ""),
                "score": score_text(v.metadata),
                "run_id": v.labels.get("landfall-run", ""),
            }
        )
    return page(request, "models.html", {"active": "models", "rows": rows, "errors": errors})


def teams_page(request: Request) -> Response:
    errors = []
    try:
        uses = source_of(request).teams()
    except CommandError as exc:
        uses, errors = [], [str(exc)]
    rows = [
        {
            "team": u.team,
            "priority": u.priority,
            "gpus": gpus_in_flight(u.gpus, u.gpu_cap),
            "spent": spend_text(u.spent_usd),
            "budget": spend_text(u.budget_usd),
            "share": f"{u.spent_usd / u.budget_usd:.0%}" if u.budget_usd else "",
            "reserved": spend_text(u.reserved_usd),
            "settled": spend_text(u.settled_usd),
            "run_limit": spend_text(u.run_limit_usd),
            "runs": u.runs,
            "over": "; ".join(u.over),
            "month": u.month,
        }
        for u in uses
    ]
    return page(request, "teams.html", {"active": "teams", "rows": rows, "errors": errors})


def dead_letters_page(request: Request) -> Response:
    source = source_of(request)
    errors: list[str] = []
    subscription, letters, orphans = "", list[Any](), list[OrphanRecord]()
    letters_read = orphans_read = False
    try:
        subscription, letters = source.dead_letters()
        letters_read = True
    except CommandError as exc:
        errors.append(str(exc))
    try:
        read = parse_orphans(source.orphans(200))
        orphans_read = True
        orphans = list(read.orphans)
        errors += [f"orphan {u.key!r} does not fit schemas/orphan_record.py: {u.problem}" for u in read.unreadable]
    except CommandError as exc:
        errors.append(str(exc))
    return page(
        request,
        "dead_letters.html",
        {
            "active": "dead-letters",
            "subscription": subscription,
            "letters": letters,
            "orphans": orphans,
            "errors": errors,
            "letters_read": letters_read,
            "orphans_read": orphans_read,
        },
    )


def refused_because(request: Request, hosts: tuple[str, ...]) -> str:
    """Why a POST is refused ("" when it is taken): it must come from this dashboard's own page, opened by one of its
    names. A browser sends Sec-Fetch-Site, Host and Origin with a form's POST, so neither a page elsewhere (cross-site
    request forgery) nor one served from a name rebound to this machine (DNS rebinding) can have a user's browser act:
    Host and Origin are each compared with `hosts` (LANDFALL_UI_HOSTS), not with each other."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"an action is taken only from this dashboard's own page (this request came from a {site} page)"
    names = ", ".join(hosts)
    host = request.headers.get("host", "")
    if not host_allowed(host, hosts):
        return (
            f"this dashboard takes actions only when it is opened as one of {names} ({HOSTS_ENV}); this request "
            f"named the host {host[:80]!r}: open it by one of those names, or add the name to {HOSTS_ENV}"
        )
    origin = request.headers.get("origin")
    if origin is not None and not origin_allowed(origin, hosts):
        return (
            f"an action is taken only from a page of this dashboard, opened as one of {names} ({HOSTS_ENV}); this "
            f"request came from {origin[:80]!r}"
        )
    return ""


def _not_offered(action: str, offered: frozenset[str]) -> str:
    return (
        f"this dashboard does not offer {action!r}: it offers what {ACTIONS_ENV} names (here: "
        f"{', '.join(sorted(offered)) or 'nothing, it is read-only'}); `landfall {action} RUN_ID` does it from the CLI"
    )


@dataclass(frozen=True)
class Page:
    """One route of the dashboard: its path, the function that answers it, and, for a page of the navigation, its
    title (the navigation links to /SECTION, and a page marks the entry of the section it belongs to as current)."""

    path: str
    endpoint: Callable[[Request], Response]
    title: str = ""
    methods: tuple[str, ...] = ("GET",)

    @property
    def section(self) -> str:
        """The navigation entry the page belongs to: the first part of its path (runs for /runs/RUN_ID)."""
        return self.path.removeprefix("/api").strip("/").split("/", 1)[0]


PAGES = (
    Page("/runs", runs_page, "Runs"),
    Page("/runs/rows", runs_rows),
    Page("/runs/{run_id}", run_page),
    Page("/api/runs/{run_id}", run_live),
    Page("/runs/{run_id}/{action}", confirm, methods=("GET", "POST")),
    Page("/datasets", datasets_page, "Datasets"),
    Page("/models", models_page, "Models"),
    Page("/teams", teams_page, "Teams"),
    Page("/dead-letters", dead_letters_page, "Dead letters and orphans"),
)
"""Every page of the dashboard, in the navigation's order; the first titled one is where / leads."""
NAVIGATION = tuple((p.section, p.title) for p in PAGES if p.title)
"""(section, title) of each entry of the navigation (templates/base.html)."""
