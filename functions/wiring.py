"""Builds each handler's dependencies from the lazily created clients. Called per request; cheap after the first.

Each builder imports the handler and adapters it needs when it first runs: a function instance imports only its
own handler's modules (cold start, bench/cold_start.py), never the other functions'.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import replace
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from functions.gcp import clients
from functions.settings import get_settings

if TYPE_CHECKING:
    from deploy.reloading import ReloadingFile
    from deploy.teams import Teams
    from functions.dispatch.handler import DispatchDeps
    from functions.gcp.datasets_store import DatasetsStore
    from functions.gcp.gcs_objects import GcsObjects
    from functions.gcp.runs_store import RunsStore
    from functions.gcp.team_ledger_store import TeamLedgerStore
    from functions.gcp.unit_of_work import UnitOfWork
    from functions.gcp.vertex import VertexJobs
    from functions.ingest.handler import IngestDeps
    from functions.listener.handler import ListenerDeps
    from functions.records.continuation import Committed
    from functions.records.team_ledger import TeamUse


def utc_now() -> datetime:
    return datetime.now(UTC)


@cache
def unit_of_work() -> UnitOfWork:
    """The write side of the runs collection, shared by every store that writes runs: what this instance read and
    wrote of each run (with its update time), and the submission slot that rides in a claim's Commit."""
    from functions.gcp.unit_of_work import UnitOfWork

    return UnitOfWork(
        clients.firestore_client(),
        get_settings().runs_collection,
        slots=rate_limits_store(),
        slot_region=_slot_region,
        now=utc_now,
    )


def _slot_region(result: object) -> str | None:
    """The dispatcher's rule for the region whose slot rides with a claim (imported when a claim is first written)."""
    from functions.dispatch.queueing import slot_region

    return slot_region(result)


@cache
def runs_store() -> RunsStore:
    from functions.gcp.runs_store import RunsStore

    return RunsStore(clients.firestore_client(), get_settings().runs_collection, unit_of_work())


def teams() -> Teams:
    """The teams of the settings' teams file (LANDFALL_TEAMS_FILE, else the shipped deploy/teams.toml), read again
    when the file changes (deploy/reloading.py; a broken edit keeps the last good teams and logs why)."""
    from deploy.teams import TEAMS_FILE

    file = get_settings().teams_file
    return _teams_file().read(Path(file) if file else TEAMS_FILE)


@cache
def _teams_file() -> ReloadingFile[Teams]:
    from deploy.reloading import ReloadingFile
    from deploy.teams import read_teams

    return ReloadingFile(read_teams, (ValueError, TypeError, KeyError))


@cache
def team_ledger_store() -> TeamLedgerStore:
    from functions.gcp.team_ledger_store import TeamLedgerStore
    from functions.records.team_wakes import TeamWaker

    settings = get_settings()
    store = TeamLedgerStore(
        clients.firestore_client(), settings.runs_collection, settings.teams_collection, work=unit_of_work()
    )
    # A settle wakes the team's waiting runs that now fit: each is handed to the dispatcher as a delivery of its
    # request (docs/teams.md, "Waiting and priority"), by the teams file as it is at the settle.
    store.waker = TeamWaker(
        teams=teams,
        ledger_of=store.ledger_of,
        waiting_of=store.waiting_of,
        runs=runs_store(),
        hand_over=lambda run: _republish_request(json.dumps(run.request).encode(), run_id=run.run_id),
        now=utc_now,
    ).wake
    return store


@cache
def functions_runs_store() -> RunsStore:
    """The runs store the dispatcher, listener and reconciler write through: one that settles a run's team
    reservation when the run ends or waits (functions/gcp/team_ledger_store.py). Whether there are teams is the teams
    file's as it is now, so it is chosen whatever the file said when the instance started (a run of no team holds no
    reservation: nothing is settled for it)."""
    from functions.gcp.team_ledger_store import SettlingRunsStore

    return SettlingRunsStore(clients.firestore_client(), get_settings().runs_collection, team_ledger_store())


def team_usage(now: datetime | None = None) -> list[TeamUse]:
    """Each team's use against its limits now: GPUs in flight per kind, the month's reserved and settled spend, in
    the teams file's order (what `landfall teams` and the dashboard's teams page show). Raises deploy.teams.TeamsError
    for a bad teams file, and functions.errors' errors when Firestore does not answer."""
    from functions.records.team_ledger import uses_of

    known = teams()
    ledgers = team_ledger_store().ledgers(t.name for t in known.teams)
    return uses_of(known, ledgers, now or utc_now())


@cache
def vertex_jobs() -> VertexJobs:
    from functions.gcp.vertex import VertexJobs

    return VertexJobs(get_settings().project, clients.job_service_client)


@cache
def datasets_store() -> DatasetsStore:
    from functions.gcp.datasets_store import DatasetsStore

    settings = get_settings()
    return DatasetsStore(clients.firestore_client(), settings.datasets_collection, settings.dataset_versions_collection)


@cache
def gcs_objects() -> GcsObjects:
    from functions.gcp.gcs_objects import GcsObjects

    return GcsObjects(clients.storage_client(), page_size=get_settings().list_page_size)


def _publish_request(data: bytes, **attributes: str) -> str:
    future = clients.publisher_client().publish(get_settings().requests_topic_path, data, **attributes)
    return str(future.result(timeout=60))


@cache
def dispatcher_planner_config() -> Any:
    """The dispatcher's PlannerConfig from settings: the default region, the project's quota overrides and margins."""
    from functions.dispatch.planner_config import planner_config

    return planner_config(get_settings())


def _publish_result(message: Any) -> str:
    """Publish one RunFinished (schemas/run_finished.py) on the run-results topic; its run_id is an attribute too."""
    from functions.errors import as_transient

    try:
        future = clients.publisher_client().publish(
            get_settings().run_results_topic_path, message.to_bytes(), run_id=message.run_id, state=message.state
        )
        return str(future.result(timeout=60))
    except Exception as exc:
        raise as_transient(exc, "Pub/Sub run results") from exc


@cache
def model_registry() -> Any:
    """Vertex AI Model Registry in the deployment's default region (docs/models.md)."""
    from functions.gcp.model_registry import ModelRegistry

    settings = get_settings()
    return ModelRegistry(settings.project, settings.default_region, clients.model_service_client)


def _model_target(request: dict[str, Any]) -> Any:
    from functions.ingest.routes import load_routes
    from functions.records.model_registration import target_for

    settings = get_settings()
    return target_for(request, load_routes(), settings.trainer_image_for(settings.default_region))


def _champion_env(request: Any) -> dict[str, str]:
    """The route's production model for the job to score (none without a promotion rule)."""
    from functions.errors import PermanentError
    from functions.records.model_registration import champion_env

    try:
        return champion_env(_model_target(request.to_dict()), model_registry())
    except PermanentError:  # no ModelService here: the job runs without a champion, whose decision says so
        return {}


def _register_model(run_id: str) -> str:
    """UploadModel takes its slot from the dispatcher's per-region limiter: Google counts it in the same "Job or LRO
    submission requests" quota as CreateCustomJob (docs/deploy.md, "Vertex AI rate limits")."""
    from functions.records.model_registration import register_model

    registry = model_registry()
    return register_model(
        run_id,
        runs_store(),
        registry,
        _model_target,
        now=utc_now,
        promotions=model_promotions_store(),
        holds_model=_holds_model,
        limiter=rate_limits_store(),
        region=registry.region,
    )


@cache
def model_promotions_store() -> Any:
    """The promotion lease of each registry model: promotions of one model are decided one at a time."""
    from functions.gcp.model_promotions_store import ModelPromotionsStore

    return ModelPromotionsStore(clients.firestore_client(), get_settings().model_promotions_collection)


def _holds_model(folder: str) -> bool:
    """Whether the run's model folder (gs://BUCKET/PREFIX/) holds a model, not only figures."""
    from functions.records.model_registration import holds_a_model

    bucket, _, prefix = folder.removeprefix("gs://").partition("/")
    return holds_a_model((o.name, o.size) for o in gcs_objects().list(bucket, prefix))


def _announce(run_id: str) -> str:
    """A SUCCEEDED run's model is registered first (functions/records/model_registration.py), so RunFinished names
    its version; a registration that fails raises before anything is published, and the next delivery or reconcile
    pass (which announces every ended run still unannounced) tries both again."""
    import logging

    from functions.errors import PermanentError
    from functions.records.model_registration import QUEUED
    from functions.records.results import announce

    try:
        registered = _register_model(run_id)
        # Another delivery holds the registration lease: it announces once its version exists (a reconcile pass
        # does, after the lease, if it dies). Announcing now would publish RunFinished naming no model.
        # Likewise a registration whose limiter slot is further off than it waits: the reconcile pass after the slot
        # uploads, then announces.
        if registered in ("registering-elsewhere", QUEUED):
            return registered
    except PermanentError as exc:  # Vertex refused the upload: retrying cannot help, the run is announced without
        registered = "refused"
        logging.getLogger("landfall.models").error("run %s: model not registered: %s", run_id, exc)
    said = announce(run_id, runs_store(), _publish_result, now=utc_now)
    return said if registered in _NOTHING_TO_REGISTER else f"{said} model={registered}"


_NOTHING_TO_REGISTER = ("not-succeeded", "already-registered")


@cache
def capacity_store() -> Any:
    from functions.gcp.capacity_store import CapacityStore

    return CapacityStore(clients.firestore_client(), get_settings().capacity_events_collection)


def _capacity_history() -> Any:
    """What capacity Landfall's recent jobs met (schemas/capacity_event.py), as the planner's history; the priors
    alone, with a warning, when it cannot be read: a request is never held back for it."""
    import logging

    from functions.planning.risk import NO_HISTORY
    from functions.records.capacity_events import capacity_history

    try:
        events = capacity_store().newest()
    except Exception as exc:  # the priors plan the request: it is never held back for its history
        logging.getLogger("landfall.dispatch").warning("capacity history not read, planning on the priors: %s", exc)
        return NO_HISTORY
    with _HISTORY_LOCK:
        made = _HISTORY.get("made")
        if made is None or made[0] is not events:  # the store read again: make its history once
            made = _HISTORY["made"] = (events, capacity_history(events))
    return made[1]


_HISTORY: dict[str, tuple[Any, Any]] = {}
"""The capacity history made of the store's newest events, while the store keeps the same ones (a minute)."""
_HISTORY_LOCK = threading.Lock()


def _record_refusal(event: Any) -> None:
    """Record a CreateCustomJob call Vertex refused for capacity; a failure is logged, never the delivery's: the
    event is an observation for the planner, and the run's own record of the attempt is written either way."""
    import logging

    try:
        capacity_store().record(event)
    except Exception as exc:  # an observation for the planner: never the reason a delivery fails
        logging.getLogger("landfall.dispatch").warning("capacity refusal %s not recorded: %s", event.event_id, exc)


@cache
def measurements_store() -> Any:
    from functions.gcp.measurements_store import MeasurementsStore

    return MeasurementsStore(clients.firestore_client(), get_settings().measurements_collection)


PREFETCH_KEPT = 64
"""Measurements queries started ahead of their plans and kept for them (the most recent; a delivery that never
plans, a duplicate or a refused request, leaves its read to end unseen)."""
PREFETCH_FOR_S = 30.0
"""How long a prefetched read stands for the plan of its request."""
_PREFETCHED: OrderedDict[str, tuple[float, Future[list[Any]], Future[list[Any]]]] = OrderedDict()
_PREFETCHED_LOCK = threading.Lock()


def _prefetch(request: Any) -> None:
    """Start the measurements query a plan of this request will make, beside the run's create (one round trip less
    on the way to CreateCustomJob); `_measured` takes it."""
    from functions.beside import beside
    from schemas.measurement import workload_key

    try:
        key = workload_key(request)
        store = measurements_store()
    except Exception:  # a prefetch never fails a delivery: the plan reads (and says why) as it would without one
        return
    read = beside(lambda: store.for_workload(key))
    newest = beside(store.newest)
    with _PREFETCHED_LOCK:
        _PREFETCHED[request.run_id] = (time.monotonic(), read, newest)
        while len(_PREFETCHED) > PREFETCH_KEPT:
            _PREFETCHED.popitem(last=False)


def _prefetched(request: Any) -> tuple[Future[list[Any]], Future[list[Any]]] | None:
    """The request's workload's measurements and the newest ones of every workload, read ahead."""
    with _PREFETCHED_LOCK:
        kept = _PREFETCHED.pop(getattr(request, "run_id", ""), None)
    if kept is None or time.monotonic() - kept[0] >= PREFETCH_FOR_S:
        return None
    return kept[1], kept[2]


def _measured(request: Any) -> list[Any]:
    """What past runs and canaries of the request's workload measured, with its image (one equality query, started
    ahead by `_prefetch` where the delivery did); none, with a warning, when they cannot be read: the model plans
    alone rather than the request waiting."""
    import logging

    from functions.errors import TransientError
    from functions.records.measurements import planner_figures, similar_figures, startup_figures
    from schemas.errors import SchemaError
    from schemas.measurement import image_of, workload_key

    key = workload_key(request)
    try:
        ahead = _prefetched(request)
        found = ahead[0].result() if ahead is not None else measurements_store().for_workload(key)
    except (TransientError, SchemaError) as exc:
        logging.getLogger("landfall.dispatch").warning("measurements not read, planning from the model: %s", exc)
        return []
    try:  # the machines' start-ups, whatever work measured them: only an addition
        newest = ahead[1].result() if ahead is not None else measurements_store().newest()
    except (TransientError, SchemaError) as exc:
        logging.getLogger("landfall.dispatch").warning("recent start-ups not read: %s", exc)
        newest = []
    image = image_of(request)
    return [
        *planner_figures(found, image),
        *startup_figures(newest, image, key),
        *similar_figures(newest, image, key),
    ]


def _plan(request: Any) -> Any:
    return _planned(request, _measured(request), _capacity_history())


def _planned(request: Any, measured: list[Any], capacity: Any) -> Any:
    """The request planned from the measured figures over the model, with the capacity history's risks; from the
    model alone, with a warning, when the planner refuses the figures (PlanInputError): what was measured never
    fails a delivery."""
    import logging

    from functions.planning import PlanInputError, plan_input_from_request, plan_request

    inputs = plan_input_from_request(request)
    config = replace(dispatcher_planner_config(), capacity=capacity)
    if measured:
        try:
            return plan_request(inputs, config, measured=measured)
        except PlanInputError as exc:
            logging.getLogger("landfall.dispatch").warning(
                "measured figures not used, planning from the model: %s", exc
            )
    return plan_request(inputs, config)


def _measure(run: Any) -> None:
    """Record what a SUCCEEDED run measured (functions/records/measurements.py). A transient error is raised (the
    delivery is retried, the merge is idempotent); a stored document that no longer fits its schema is logged and
    left alone, rather than holding the run's event back for ever."""
    import logging

    from functions.records.measurements import measurement_from_run, planner_steps
    from schemas.errors import SchemaError

    measurement = measurement_from_run(run, planner_steps(run.request))
    if measurement is None:
        return
    try:
        measurements_store().record(measurement)
    except SchemaError as exc:
        logging.getLogger("landfall.job_events").warning(
            "run %s: measurement %s not recorded: %s", run.run_id, measurement.measurement_id, exc
        )


def _replan(request: Any, plan: Any, figures: Any) -> Any:
    """The run planned again from its canary's figures over what past runs measured
    (functions/dispatch/canary_replan.py)."""
    from functions.dispatch.canary_replan import canary_measured
    from schemas.times import format_timestamp

    measured = [*_measured(request), canary_measured(request, plan, figures, at=format_timestamp(utc_now()))]
    return _planned(request, measured, _capacity_history())


def _measure_canary(run: Any, figures: Any) -> None:
    """Record what a run's canary measured (functions/records/measurements.py)."""
    from functions.records.measurements import measurement_from_canary
    from schemas.times import format_timestamp

    measurement = measurement_from_canary(run, figures.to_dict(), format_timestamp(utc_now()))
    if measurement is not None:
        measurements_store().record(measurement)


def ingest_deps() -> IngestDeps:
    from functions.ingest.handler import IngestDeps

    return IngestDeps(
        settings=get_settings(), objects=gcs_objects(), datasets=datasets_store(), publish=_publish_request, now=utc_now
    )


def dispatch_deps() -> DispatchDeps:
    from functions.dispatch.handler import DispatchDeps

    known = teams()
    return DispatchDeps(
        settings=get_settings(),
        store=functions_runs_store(),
        vertex=vertex_jobs(),
        plan=_plan,
        now=utc_now,
        objects=gcs_objects(),
        prefetch=_prefetch,
        limiter=rate_limits_store(),
        champion=_champion_env,
        replan=_replan,
        teams=known or None,
        ledger=team_ledger_store() if known else None,
        ingested=_made_by_ingest if known else None,
        capacity=_record_refusal,
    )


def _made_by_ingest(request: Any) -> bool:
    """Whether Landfall made the request for the team owning its data: ingest (its version in ingest's outbox,
    functions/records/dataset_versions.py), or `landfall retry` of a run charged to that team (the old run names
    this one as its retry: both documents only Landfall and its operators write)."""
    from functions.errors import TransientError
    from functions.records.dataset_versions import made_by_ingest, retry_of_team_run

    if request.retry_of:
        return retry_of_team_run(runs_store().get(request.retry_of), request)
    made = made_by_ingest(datasets_store().version(request.run_id), request)
    if made is None:  # ingest published it and has not recorded what yet: the delivery is tried again shortly
        raise TransientError(
            f"run {request.run_id}: its dataset version is still being published by ingest; retried to read what it "
            "published"
        )
    return made


def listener_deps() -> ListenerDeps:
    from functions.dispatch.handler import attempt_policy, resubmit
    from functions.job_states import read_gcs_text
    from functions.listener.handler import ListenerDeps
    from functions.records.continuation import ContinuationPolicy

    return ListenerDeps(
        store=functions_runs_store(),
        vertex=vertex_jobs(),
        read_text=read_gcs_text(clients.storage_client()),
        now=utc_now,
        resubmit=lambda run_id: resubmit(run_id, dispatch_deps()),
        policy=attempt_policy(get_settings()),
        announce=_announce,
        canary_margin=get_settings().canary_margin,
        measure=_measure,
        measure_canary=_measure_canary,
        checkpoints=_committed_checkpoints,
        continuation=ContinuationPolicy(max_extensions=get_settings().timeout_extensions),
        capacity=capacity_store().record,
    )


CHECKPOINT_OBJECTS_READ = 20_000
"""Objects of a run's checkpoint folder read at most to find its commit records (a team's code may write many)."""


def _committed_checkpoints(run: Any) -> list[Committed]:
    """The committed checkpoints of the run's line (its own folder, or its first run's for a retry that goes on
    from it) in the job's region, with when each commit record was written."""
    import logging

    from functions.dispatch.job_spec import artifacts
    from functions.records.continuation import Committed
    from schemas.checkpoint_layout import committed_step

    owner = str(run.request.get("checkpoint_lineage") or "") or run.run_id
    team = run.team.name if run.team is not None else ""  # a team's runs keep their folders under its own
    folder = artifacts(get_settings(), owner, run.vertex.region if run.vertex else None, team)["checkpoint_dir"]
    bucket, _, prefix = folder.removeprefix("gs://").partition("/")
    found: list[Committed] = []
    for i, info in enumerate(gcs_objects().list(bucket, prefix)):
        if i >= CHECKPOINT_OBJECTS_READ:
            logging.getLogger("landfall.job_events").warning(
                "run %s: only the first %d objects of %s were read for its checkpoints", run.run_id, i, folder
            )
            break
        step = committed_step(info.name.removeprefix(prefix))
        if step is not None and info.updated is not None:
            found.append(Committed(step, info.updated))
    return found


@cache
def orphans_store() -> Any:
    from functions.gcp.orphans_store import OrphansStore

    return OrphansStore(clients.firestore_client(), get_settings().orphans_collection)


def _republish_request(data: bytes, run_id: str = "") -> str:
    """Ingest's publish of a TrainingRequest, its client errors translated (a failed republish is tried next pass);
    with run_id, the request of a run that exists, said in its RUN_ID_ATTRIBUTE (the dispatcher reads it first)."""
    from functions.errors import as_transient
    from schemas.training_request import RUN_ID_ATTRIBUTE

    try:
        return _publish_request(data, **({RUN_ID_ATTRIBUTE: run_id} if run_id else {}))
    except Exception as exc:
        raise as_transient(exc, "Pub/Sub training requests") from exc


def reconciler_deps() -> Any:
    from functions.dispatch.handler import attempt_policy, resubmit
    from functions.gcp.watermarks_store import WatermarksStore
    from functions.reconciler.changes import ChangeDeps
    from functions.reconciler.handler import OPEN_STATES, ReconcilerDeps
    from functions.reconciler.orphans import OrphanDeps
    from functions.reconciler.republish import RepublishDeps

    settings = get_settings()
    orphans = OrphanDeps(
        store=orphans_store(),
        runs=runs_store().get_many,
        regions=settings.job_regions,
        cancel=settings.cancel_orphans,
        grace_seconds=settings.submission_lease_seconds,
    )
    republish = RepublishDeps(
        versions=datasets_store(),
        runs=runs_store().get_many,
        publish=_republish_request,
        grace_seconds=settings.republish_grace_seconds,
    )
    return ReconcilerDeps(
        open_runs=lambda: runs_store().in_states_or_unreadable(OPEN_STATES),
        vertex=vertex_jobs(),
        listener=listener_deps(),
        resubmit=lambda run_id: resubmit(run_id, dispatch_deps()),
        policy=attempt_policy(settings),
        lease_seconds=settings.submission_lease_seconds,
        now=utc_now,
        grace_seconds=settings.reconcile_grace_seconds,
        unannounced=lambda: runs_store().unannounced_or_unreadable(),
        announce=_announce,
        long_wait_seconds=settings.long_wait_seconds,
        orphans=orphans,
        republish=republish,
        changes=ChangeDeps(
            watermarks=WatermarksStore(clients.firestore_client(), settings.reconciler_collection),
            shards=settings.reconcile_shards,
            overlap_seconds=settings.reconcile_overlap_seconds,
            full_after_seconds=settings.reconcile_full_after_seconds,
            orphan_window_seconds=settings.orphan_window_seconds,
        ),
        teams=_team_looks(),
        marks=runs_store(),
    )


def _team_looks() -> Any:
    """The reconciler's team looks (functions/reconciler/team_looks.py); None without teams."""
    known = teams()
    if not known:
        return None
    from functions.reconciler.team_looks import TeamLooks

    ledger = team_ledger_store()

    def priority(name: str) -> int:
        team = known.named(name)
        return team.priority if team is not None else 0

    waker = ledger.waker

    return TeamLooks(
        priority=priority,
        held_to_settle=ledger.held_to_settle,
        settle=lambda run: ledger.settle(run, utc_now()),
        wake=waker,
        known=lambda name: known.named(name) is not None,
        budgets=lambda: {t.name: t.monthly_budget_usd for t in known.teams},
        ledgers=ledger.ledgers,
    )


@cache
def rate_limits_store() -> Any:
    """The per-region submission limiter (LANDFALL_VERTEX_CREATE_PER_MINUTE): CreateCustomJob, and UploadModel."""
    from functions.gcp.rate_limits_store import RateLimitsStore

    settings = get_settings()
    if settings.vertex_create_per_minute == 0:
        return None
    return RateLimitsStore(
        clients.firestore_client(), settings.rate_limits_collection, settings.vertex_create_per_minute
    )
