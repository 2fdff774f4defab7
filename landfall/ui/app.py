"""The dashboard's ASGI app (Starlette, Jinja2 templates): read-only pages over the records the CLI reads, and the
CLI's cancel and retry where LANDFALL_UI_ACTIONS allows them, each behind a confirmation page.

`create_app()` builds it from the environment the CLI reads (the local stack's `.landfall/env` fills what is unset);
nothing is read from a client until a page asks. `app` is the object an ASGI server loads (`landfall.ui.app:app`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from landfall.errors import CommandError
from landfall.ui import views
from landfall.ui.hosts import HOSTS_ENV, allowed_hosts, host_allowed, origin_allowed
from landfall.ui.query import BadParameter, run_id, runs_query
from landfall.ui.source import ACTIONS_ENV, KNOWN_ACTIONS, LandfallSource, RunsQuery, Source, allowed_actions, tail
from schemas.errors import SchemaError
from schemas.orphan_record import OrphanRecord, parse_orphan_record

HERE = Path(__file__).parent
POLL_MS = 3000
"""How often an open page asks for what changed (the runs table, a run that has not ended)."""

LIVE_SECTIONS = ("facts", "head", "timeline", "plan", "links", "logs")
"""The parts of a run's page that its poll replaces (templates run_NAME.html, elements #run-NAME)."""
PAGES = (
    ("runs", "Runs"),
    ("datasets", "Datasets"),
    ("models", "Models"),
    ("teams", "Teams"),
    ("dead-letters", "Dead letters and orphans"),
)


def _filters(query: RunsQuery, request: Request) -> dict[str, str]:
    return {
        "state": query.state or "",
        "dataset": query.dataset or "",
        "team": query.team or "",
        "since": request.query_params.get("since", ""),
    }


def create_app(
    source: Source | None = None,
    actions: frozenset[str] | None = None,
    *,
    poll_ms: int = POLL_MS,
    hosts: tuple[str, ...] | None = None,
) -> Starlette:
    """The dashboard over `source` (default: the CLI's clients), offering `actions` (default: LANDFALL_UI_ACTIONS)
    to requests whose Host and Origin are among `hosts` (default: LANDFALL_UI_HOSTS); open pages ask for what
    changed every `poll_ms`."""
    from landfall.stack_env import load_stack_env

    if source is None:
        load_stack_env()
        source = LandfallSource()
    offered = allowed_actions() if actions is None else actions
    answered = allowed_hosts() if hosts is None else hosts
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.globals.update(pages=PAGES, poll_ms=poll_ms, actions=sorted(offered))
    templates.env.filters["when"] = views.short_time

    def page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
        return templates.TemplateResponse(request, name, context, status_code=status)

    def failed(request: Request, active: str, exc: Exception, status: int = 502) -> Response:
        return page(request, "error.html", {"active": active, "message": str(exc)}, status)

    def runs_page_data(request: Request) -> dict[str, Any]:
        query = runs_query(request.query_params)
        docs = source.runs(query, views.PAGE_SIZE + 1)
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
            "next_url": "/runs?" + urlencode({**{k: v for k, v in filters.items() if v}, "after": last})
            if last
            else "",
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
        """The table's rows alone: the page asks for them every POLL_MS, so it updates without a reload."""
        try:
            data = runs_page_data(request)
        except (BadParameter, CommandError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400 if isinstance(exc, BadParameter) else 502)
        return page(request, "runs_rows.html", data)

    def run_context(run_id: str) -> dict[str, Any]:
        run = source.run(run_id)
        lines, where = source.log_lines(run)
        curves = views.run_curves(run, lines)
        return {
            "run": run,
            "row": views.run_row(run),
            "timeline": views.timeline(run),
            "plan_rows": views.plan_rows(run.plan),
            "canary_rows": views.canary_rows(run),
            "curves": views.finite_json(curves.to_dict()),
            "progress": views.progress(run, lines),
            "failure": views.failure(run),
            "reconcile": views.reconcile_note(run),
            "log_tail": tail(lines, views.LOG_TAIL_LINES),
            "log_where": where,
            "open": views.is_open(run),
            "console_url": views.vertex_console_url(run, source.project()) if not _local() else "",
        }

    def run_page(request: Request) -> Response:
        try:
            context = run_context(run_id(request.path_params["run_id"]))
        except BadParameter as exc:
            return failed(request, "runs", exc, 400)
        except CommandError as exc:
            return failed(request, "runs", exc, 404 if str(exc).startswith("no run ") else 502)
        # inside a <script> element: "</" written as "<\/" (still the same JSON) so no value can end the element
        curves_json = json.dumps(context["curves"], allow_nan=False).replace("</", "<\\/")
        return page(request, "run.html", {"active": "runs", **context, "curves_json": curves_json})

    def run_live(request: Request) -> Response:
        """What changes on a run's page while it is open: its live sections as HTML, and the curves' data."""
        try:
            context = run_context(run_id(request.path_params["run_id"]))
        except BadParameter as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        except CommandError as exc:
            return JSONResponse({"error": str(exc)}, status_code=502)
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
        action = request.path_params["action"]
        if action not in KNOWN_ACTIONS:
            return failed(request, "runs", CommandError(f"no page {request.url.path!r}"), 404)
        if action not in offered:
            return failed(request, "runs", CommandError(_not_offered(action, offered)), 403)
        try:
            run = run_id(request.path_params["run_id"])
        except BadParameter as exc:
            return failed(request, "runs", exc, 400)
        if request.method == "GET":
            return page(request, "confirm.html", {"active": "runs", "action": action, "run_id": run})
        refused = _refused(request, answered)
        if refused:
            return failed(request, "runs", CommandError(refused), 403)
        try:
            said = source.cancel(run) if action == "cancel" else source.retry(run)
        except CommandError as exc:
            return failed(request, "runs", exc, 409)
        return page(request, "done.html", {"active": "runs", "action": action, "run_id": run, "said": said})

    def datasets_page(request: Request) -> Response:
        from landfall.commands.datasets import read_dataset
        from landfall.words import started_run

        rows, skipped, errors = [], [], []
        try:
            docs = source.datasets(200)
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
        return page(
            request, "datasets.html", {"active": "datasets", "rows": rows, "skipped": skipped, "errors": errors}
        )

    def models_page(request: Request) -> Response:
        from landfall.words import score_text

        errors = []
        try:
            versions = source.models()
        except CommandError as exc:
            versions, errors = [], [str(exc)]
        rows = []
        for v in versions:
            promotion = v.metadata.get("promotion") or {}
            rows.append(
                {
                    "model": v.model_id,
                    "version": v.version_id,
                    "aliases": ", ".join(v.aliases),
                    "decision": promotion.get("decision", v.labels.get("landfall-decision", "")),
                    "why": promotion.get("reason", ""),
                    "score": score_text(v.metadata),
                    "run_id": v.labels.get("landfall-run", ""),
                }
            )
        return page(request, "models.html", {"active": "models", "rows": rows, "errors": errors})

    def teams_page(request: Request) -> Response:
        from landfall.words import gpus_in_flight, spend_text

        errors = []
        try:
            uses = source.teams()
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
        errors: list[str] = []
        subscription, letters, orphans = "", list[Any](), list[OrphanRecord]()
        letters_read = orphans_read = False
        try:
            subscription, letters = source.dead_letters()
            letters_read = True
        except CommandError as exc:
            errors.append(str(exc))
        try:
            docs = source.orphans(200)
            orphans_read = True
            for doc in docs:
                try:
                    orphans.append(parse_orphan_record(doc))
                except SchemaError as exc:
                    errors.append(f"orphan {doc.get('job_id', '?')!r} does not fit schemas/orphan_record.py: {exc}")
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

    routes = [
        Route("/", lambda request: RedirectResponse("/runs")),
        Route("/runs", runs_page),
        Route("/runs/rows", runs_rows),
        Route("/runs/{run_id}", run_page),
        Route("/api/runs/{run_id}", run_live),
        Route("/runs/{run_id}/{action}", confirm, methods=["GET", "POST"]),
        Route("/datasets", datasets_page),
        Route("/models", models_page),
        Route("/teams", teams_page),
        Route("/dead-letters", dead_letters_page),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    return Starlette(routes=routes)


def _refused(request: Request, hosts: tuple[str, ...]) -> str:
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


def _local() -> bool:
    import os

    return bool(os.environ.get("LANDFALL_VERTEX_ENDPOINT"))


def _not_offered(action: str, offered: frozenset[str]) -> str:
    return (
        f"this dashboard does not offer {action!r}: it offers what {ACTIONS_ENV} names (here: "
        f"{', '.join(sorted(offered)) or 'nothing, it is read-only'}); `landfall {action} RUN_ID` does it from the CLI"
    )


def __getattr__(name: str) -> Any:
    """`app`, built on first use (`landfall.ui.app:app` for an ASGI server), so importing the module builds nothing."""
    if name == "app":
        built = create_app()
        globals()["app"] = built
        return built
    raise AttributeError(name)
