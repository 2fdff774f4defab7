"""A SUCCEEDED run's model into Vertex AI Model Registry, once, and the champion/challenger decision (docs/models.md).

Whoever sees a run succeed (the listener, a reconcile pass announcing it) registers its model before RunFinished is
published, so the message names the version. Exactly once:

1. claim: a lease on the run (`submission.model_lease_until`, one transaction); a run that has its `model` already,
   or whose lease another delivery holds, is left alone;
2. look up: a version of the route's registry model labelled `landfall-run=<run id>` (ListModelVersions) is the
   run's, uploaded by a delivery that died before recording it: it is adopted, not uploaded again;
3. decide, then upload: the decision (schemas/model_version.py DECISIONS) is taken against the version holding the
   `production` alias before the upload, and travels on the new version (labels, description, metadata), since
   Model Registry keeps a version's labels as uploaded. UploadModel starts a long-running operation, which Google
   counts in the region's "Job or LRO submission requests" quota beside CreateCustomJob (docs/deploy.md, "Vertex
   AI rate limits"), so the upload first takes a slot from the dispatcher's per-region limiter: a slot at most
   SLOT_WAIT away is waited for; a later one is kept on the run (`submission.model_slot_at`) with the lease held
   until then, and the registration ends `registration-queued`; the reconcile pass after the slot (which
   announces every ended run still unannounced) uploads with that slot without taking another;
4. move `production` to the new version when the decision says so, only from the champion the decision was taken
   against (a later promotion is never undone by a retry);
5. record `model` on the run and give the lease back (one transaction).

A failure before 5 releases the lease and raises: the run stays unannounced, and the next delivery or reconcile pass
(which announces ended runs still unannounced) registers it again from step 1, finding the version by its label.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from deploy.routes import Route
from functions.records.run_rules import RunsRules, Step
from schemas.errors import SchemaError
from schemas.fields import Reader
from schemas.model_version import (
    CONTENT_DIGEST_LABEL,
    DATASET_VERSION_LABEL,
    PRODUCTION_ALIAS,
    ROUTE_LABEL,
    RUN_LABEL,
    ModelVersionRef,
    Promotion,
    PromotionRule,
    VersionView,
    code_name,
    label_value,
    model_id_for,
    parse_promotion,
)
from schemas.run_record import RunRecord, RunState
from schemas.serving import builtin_container_spec
from schemas.times import format_timestamp, parse_timestamp
from schemas.training_request import Hyperparameters
from schemas.user_metrics import METRICS_LINES_FILE

REGISTRATION_LEASE = timedelta(seconds=360)
"""How long a delivery holds the right to upload a run's model (longer than the upload's own wait, 300 s)."""
DECISION_LABEL = "landfall-decision"
DIRECT_ROUTE = "direct"
"""The route name of a run whose request came from no route (`landfall submit`)."""
PROMOTING = ("first", "promoted")
"""Decisions that move `production` to the new version."""
SLOT_WAIT = timedelta(seconds=10)
"""A limiter slot at most this far away is waited for before UploadModel (the dispatcher's bound); a later one is
kept on the run and used by the registration after it."""
QUEUED = "registration-queued"
"""What register_model says of a run whose upload waits for its limiter slot, or for its model's promotion lease
past PROMOTION_WAIT (nothing is announced yet: the reconcile pass, which announces every ended run still
unannounced, registers it)."""
NO_MODEL = "no-model"
"""What register_model says of a run whose job wrote no model (nothing registered; the run's warnings say why)."""
PROMOTION_WAIT = timedelta(seconds=30)
"""How long a registration waits for its model's promotion lease (another registration of the model holds it)."""
PROMOTION_POLL = timedelta(milliseconds=200)
"""How often it asks meanwhile."""
MODEL_METRICS_FILES = ("metrics.json", METRICS_LINES_FILE)
"""Files in a model folder that are not the model (Landfall's figures and the team's metrics lines)."""


class SlotLimiter(Protocol):
    """The per-region submission limiter (functions/gcp/rate_limits_store.py RateLimitsStore)."""

    def take(self, region: str, now: datetime) -> datetime: ...


class PromotionLock(Protocol):
    """The promotion lease of each registry model (functions/gcp/model_promotions_store.py ModelPromotionsStore)."""

    def hold(self, model_id: str, holder: str, *, now: datetime, until: datetime) -> bool: ...
    def release(self, model_id: str, holder: str, *, now: datetime) -> None: ...


class Registry(Protocol):
    """What registration needs of Model Registry (functions/gcp/model_registry.py ModelRegistry)."""

    def model_name(self, model_id: str) -> str: ...
    def get(self, name: str) -> VersionView | None: ...
    def find_by_run(self, model_id: str, run_id: str) -> VersionView | None: ...
    def upload(self, model_id: str, model: dict[str, Any]) -> VersionView: ...
    def set_alias(self, version_name: str, alias: str) -> VersionView: ...


@dataclass(frozen=True)
class Target:
    """Where a run's model goes and under which rule."""

    model_id: str
    display_name: str
    route: str
    dataset: str
    rule: PromotionRule | None
    serving_image: str
    builtin_serving: bool = False
    """The built-in trainer's model in Landfall's trainer image: the container runs `python -m trainer.serve`
    (schemas/serving.py); a route's serving_image or a team's image is registered as it is (their contract)."""


def owning_route(request: dict[str, Any], routes: tuple[Route, ...]) -> Route | None:
    """The route that owns the request's data: the first whose bucket and prefix cover the dataset's URI (as ingest
    chooses it), whatever the request's labels say."""
    bucket, _, prefix = str(_obj(request.get("dataset")).get("uri", "")).removeprefix("gs://").partition("/")
    return next((r for r in routes if r.matches(bucket, prefix)), None)


def target_for(request: dict[str, Any], routes: tuple[Route, ...], default_image: str) -> Target:
    """The registry model of the run's route and dataset (and, for a team's code the route does not bind, of that
    code: model_version.code_name, so two different scripts on one folder are two models), its rule and its serving
    container. The route is the one
    that owns the data (owning_route; a run on data no route owns is `direct`), never one the request names: a
    request's labels decide nothing here. The serving container: the route's serving_image, else the team's image,
    else default_image (Landfall's trainer image, serving a built-in trainer model with trainer.serve)."""
    route = owning_route(request, routes)
    prefix = str(_obj(request.get("dataset")).get("uri", "")).removeprefix("gs://").partition("/")[2]
    if route is not None:
        dataset = prefix[len(route.prefix) :].strip("/") or prefix.strip("/")
    else:
        dataset = prefix.strip("/").rsplit("/", 1)[-1]
    name = route.name if route is not None else DIRECT_ROUTE
    trainer = _obj(request.get("trainer"))
    serving_image = route.serving_image if route else ""
    image = serving_image or str(trainer.get("image_uri", "") or "") or default_image
    code = code_name(trainer)
    if route is not None and route.trainer and code_name(route.trainer) == code:
        code = ""  # the route binds this code: its versions are one model's
    return Target(
        model_id=model_id_for(name, dataset, code),
        display_name=(f"{name}/{dataset}" + (f" ({code})" if code else ""))[:128],
        route=name,
        dataset=dataset,
        rule=route.promotion_rule if route is not None else None,
        serving_image=image,
        builtin_serving=not serving_image and not trainer,
    )


CHAMPION_DIR_ENV = "LANDFALL_CHAMPION_MODEL_DIR"
"""The job's variable naming the production model's folder (its artifact_uri) for the trainer to score on the new
dataset version's held-out split (docs/trainer-contract.md)."""
CHAMPION_VERSION_ENV = "LANDFALL_CHAMPION_MODEL_VERSION"
"""The job's variable naming that version (MODEL@VERSION_ID), reported back beside its score."""


def champion_env(where: Target, registry: Registry) -> dict[str, str]:
    """The champion variables for a job of the target's route: none without a promotion rule (nothing to compare)
    or without a production version yet."""
    if where.rule is None:
        return {}
    champion = registry.get(f"{registry.model_name(where.model_id)}@{PRODUCTION_ALIAS}")
    if champion is None or not champion.artifact_uri:
        return {}
    return {CHAMPION_DIR_ENV: champion.artifact_uri, CHAMPION_VERSION_ENV: champion.version_name}


def claimed_registration(*, now: datetime) -> Step[tuple[str, RunRecord | None]]:
    """Take the registration lease of a SUCCEEDED run with no model yet; result: ("claimed", the run) or why not."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, tuple[str, RunRecord | None]]:
        if cur is None or cur.state != RunState.SUCCEEDED:
            return None, ("not-succeeded", None)
        if cur.model is not None:
            return None, ("already-registered", None)
        until = cur.submission.model_lease_until
        if until is not None and parse_timestamp(until, field="submission.model_lease_until") > now:
            return None, ("registering-elsewhere", None)
        lease = format_timestamp(now + REGISTRATION_LEASE)
        claimed = replace(cur, submission=replace(cur.submission, model_lease_until=lease))
        return claimed, ("claimed", claimed)

    return step


def released_registration(*, now: datetime) -> Step[None]:
    """Give the lease back (the registration failed): the next delivery or reconcile pass may try at once."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, None]:
        if cur is None or cur.model is not None:
            return None, None
        submission = replace(cur.submission, model_lease_until=format_timestamp(now), model_slot_at=None)
        return replace(cur, submission=submission), None

    return step


def recorded_model(ref: ModelVersionRef) -> Step[bool]:
    """Record the version on the run and drop the lease; result: whether this call recorded it."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, bool]:
        if cur is None or cur.model is not None:
            return None, False
        submission = replace(cur.submission, model_lease_until=None, model_slot_at=None)
        return replace(cur, model=ref, submission=submission), True

    return step


def deferred_registration(slot: datetime, *, holder: str) -> Step[bool]:
    """Keep the run's UploadModel slot and hold the lease until it (the claim, `holder`, is still this delivery's);
    result: whether it was kept."""
    at = format_timestamp(slot)

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, bool]:
        if cur is None or cur.model is not None or cur.submission.model_lease_until != holder:
            return None, False
        return replace(cur, submission=replace(cur.submission, model_lease_until=at, model_slot_at=at)), True

    return step


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def scores(metrics: dict[str, Any] | None, metric: str) -> tuple[float | None, float | None, str]:
    """(the challenger's score, the champion's score on the challenger's held-out data, the champion version that
    score is of) from a run's metrics: the built-in trainer's `champion` section ({"version", "final", ...}), or a
    team code's metrics lines `champion_<metric>` and `champion_version` (docs/trainer-contract.md)."""
    metrics = metrics or {}
    final = _obj(metrics.get("final"))
    challenger = _number(final.get(metric))
    champion = metrics.get("champion")
    if isinstance(champion, dict) and isinstance(champion.get("final"), dict):
        return challenger, _number(champion["final"].get(metric)), str(champion.get("version", ""))
    return challenger, _number(final.get(f"champion_{metric}")), str(final.get("champion_version", ""))


def held_out_data(run: RunRecord) -> str:
    """What the run's figures were measured on: its evaluation split of its dataset version."""
    metrics = run.metrics or {}
    evaluation = _obj(metrics.get("evaluation"))
    uri = str((run.request.get("dataset") or {}).get("uri", ""))
    digest = (
        run.data_read.objects_digest
        if run.data_read
        else str((run.request.get("dataset") or {}).get("objects_digest", ""))
    )
    split = evaluation.get("split", "held-out")
    samples = evaluation.get("samples")
    rows = f"{samples} rows, " if samples is not None else ""
    return f"{split} split of {uri} ({rows}objects digest {digest[:16] or 'unknown'})"


def decide(run: RunRecord, rule: PromotionRule | None, champion: VersionView | None, *, now: datetime) -> Promotion:
    """The champion/challenger decision for the run's model (schemas/model_version.py DECISIONS), against champion,
    the version holding production as it is now. A run that scored the version production held before champion took
    it (a rival of the same round, decided first) is compared with champion through that version, which both scored:
    it is promoted when its improvement over that version beats champion's by the rule's least improvement."""
    at = format_timestamp(now)
    if champion is None:
        return Promotion("first", "the route's first model (no version holds production): it becomes production", at)
    if rule is None:
        return Promotion(
            "no-rule",
            f"the route declares no [routes.promotion] rule: production stays on version {champion.version_id}",
            at,
            champion_version=champion.version_id,
        )
    challenger, champion_score, scored_version = scores(run.metrics, rule.metric)
    base = Promotion(
        "not-comparable",
        "",
        at,
        metric=rule.metric,
        direction=rule.direction,
        min_improvement=rule.min_improvement,
        challenger_score=challenger,
        champion_score=champion_score,
        champion_version=champion.version_id,
        data=held_out_data(run),
    )
    if challenger is None:
        return replace(base, reason=f"the run reports no final {rule.metric}: production stays")
    scored = _version_id(scored_version, champion.model)
    through = _rival(champion, scored, rule) if champion_score is not None and scored != champion.version_id else None
    if champion_score is None or (scored != champion.version_id and through is None):
        skipped = _obj((run.metrics or {}).get("champion")).get("skipped")
        what = (
            f"no score of the champion on this run's held-out data{f' ({skipped})' if skipped else ''}"
            if champion_score is None
            else f"the champion scored was {scored_version}, not {champion.version_name}, which holds production now"
        )
        return replace(base, reason=f"{what}: production stays on version {champion.version_id}")
    mine = rule.better_by(challenger, champion_score)
    if through is None:
        margin = mine
        line = (
            f"{rule.metric} {challenger:.4f} vs the champion's {champion_score:.4f} (version {champion.version_id}, "
            f"{rule.direction} is better): {margin:+.4f}, least improvement {rule.min_improvement:g}"
        )
    else:
        theirs = rule.better_by(through.challenger_score or 0.0, through.champion_score or 0.0)
        margin = mine - theirs
        base = replace(base, scored_version=scored)
        line = (
            f"{rule.metric} {challenger:.4f} vs version {scored}'s {champion_score:.4f} on this run's held-out data "
            f"({rule.direction} is better): {mine:+.4f}; version {champion.version_id}, which took production from "
            f"version {scored} while this run ran, improved on it by {theirs:+.4f} on its own: {margin:+.4f}, least "
            f"improvement {rule.min_improvement:g}"
        )
    if margin > 0 and margin >= rule.min_improvement:
        return replace(base, decision="promoted", reason=f"{line}: production moves to this version")
    return replace(base, decision="kept", reason=f"{line}: production stays on version {champion.version_id}")


def _version_id(name: str, model: str) -> str:
    """The version id a champion version reported by a run names (MODEL@ID, or the id alone) within model ("" when
    it names another model)."""
    named, at, version = name.rpartition("@")
    if not at:
        return name
    return version if named == model else ""


def _rival(champion: VersionView, scored: str, rule: PromotionRule) -> Promotion | None:
    """champion's own promotion when it was promoted over the version `scored` by the same rule (or through it, as a
    rival of the same round), with both scores: a run that scored that version is compared with champion through
    it. None otherwise."""
    own = _promotion_of(champion)
    if own is None or own.decision != "promoted" or not scored:
        return None
    if (own.metric, own.direction) != (rule.metric, rule.direction):
        return None
    if own.challenger_score is None or own.champion_score is None:
        return None
    return own if (own.scored_version or own.champion_version) == scored else None


def _hyperparameters(given: Any, *, own_code: bool) -> Any:
    """The request's hyperparameters as the lineage keeps them: all of them for the built-in trainer, which trains
    with every one; for a team's code only those that differ from Landfall's defaults (the code decides the rest,
    and a default it never read would read as a setting it used)."""
    if not own_code or not isinstance(given, dict):
        return given
    defaults = Hyperparameters().__dict__
    return {k: v for k, v in given.items() if k not in defaults or (v != defaults[k] and v not in ({}, []))}


def lineage(run: RunRecord) -> dict[str, Any]:
    """Which data, request, plan and code made the run's model (bounded: the object list only while short)."""
    request = run.request
    dataset = request.get("dataset") or {}
    data = run.data_read.to_dict() if run.data_read else {}
    if len(data.get("objects", [])) > 20:
        data = {**data, "objects": data["objects"][:20], "objects_omitted": len(data["objects"]) - 20}
    trainer = request.get("trainer") or {}
    plan = run.plan
    return {
        "dataset": {
            "uri": dataset.get("uri", ""),
            "version_key": request.get("idempotency_key", ""),
            "objects_digest": dataset.get("objects_digest", ""),
            "read": data,
        },
        "request": {k: request.get(k) for k in ("task", "model", "source")}
        | {"hyperparameters": _hyperparameters(request.get("hyperparameters"), own_code=bool(trainer))},
        "plan": None
        if plan is None
        else {
            "region": plan.region,
            "machine_type": plan.machine_type,
            "accelerator_type": plan.accelerator_type,
            "accelerator_count": plan.accelerator_count,
            "replica_count": plan.replica_count,
            "strategy": plan.strategy,
        }
        | ({"tensor_parallel": plan.tensor_parallel} if plan.tensor_parallel > 1 else {})
        | ({"pipeline_parallel": plan.pipeline_parallel} if plan.pipeline_parallel > 1 else {}),
        # the request's trainer (its args and requirements), the exact version of each object it names (generation
        # and digest), and the versions its requirements resolved to
        "code": (
            {"trainer": trainer}
            | ({"objects": [c.to_dict() for c in run.code]} if run.code else {})
            | ({"packages": packages} if (packages := (run.metrics or {}).get("packages")) else {})
        )
        if trainer
        else {"trainer": "built-in", "model": request.get("model")},
        "job": None if run.vertex is None else run.vertex.job_name,
    }


def model_message(run: RunRecord, target: Target, promotion: Promotion) -> dict[str, Any]:
    """The Model message (as a dict) UploadModel gets for the run."""
    dataset = run.request.get("dataset") or {}
    digest = run.data_read.objects_digest if run.data_read else str(dataset.get("objects_digest", ""))
    final = (run.metrics or {}).get("final") or {}
    labels = {
        RUN_LABEL: label_value(run.run_id),
        ROUTE_LABEL: label_value(target.route),
        DATASET_VERSION_LABEL: label_value(str(run.request.get("idempotency_key", ""))),
        DECISION_LABEL: promotion.decision,
    }
    if digest:
        labels[CONTENT_DIGEST_LABEL] = label_value(digest)
    return {
        "display_name": target.display_name,
        "artifact_uri": run.artifacts.model_dir if run.artifacts else "",
        "container_spec": builtin_container_spec(target.serving_image)
        if target.builtin_serving
        else {"image_uri": target.serving_image},
        "labels": labels,
        "version_description": f"run {run.run_id}: {promotion.decision}: {promotion.reason}"[:2000],
        "metadata": {
            "run_id": run.run_id,
            "final": {k: v for k, v in final.items() if _number(v) is not None},
            "promotion": promotion.to_dict(),
            "lineage": lineage(run),
        },
    }


def _promotion_of(version: VersionView) -> Promotion | None:
    raw = version.metadata.get("promotion")
    try:
        return parse_promotion(Reader(raw, "metadata.promotion")) if isinstance(raw, dict) else None
    except SchemaError:
        return None


def register_model(
    run_id: str,
    store: RunsRules,
    registry: Registry,
    target: Callable[[dict[str, Any]], Target],
    *,
    now: Callable[[], datetime],
    promotions: PromotionLock,
    holds_model: Callable[[str], bool],
    limiter: SlotLimiter | None = None,
    region: str = "",
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Register the SUCCEEDED run's model once and decide its promotion; says what happened. A run whose model folder
    holds no model (holds_model) is not registered: the run says why (NO_MODEL). With a limiter, the upload first takes
    a slot in region (the registry's): see the module's step 3. The decision, upload and alias move are made holding
    the model's promotion lease (step 4)."""
    outcome, run = store.apply(run_id, claimed_registration(now=now()))
    if run is None:
        return outcome
    try:
        where = target(run.request)
        version = registry.find_by_run(where.model_id, run.run_id)
        adopted = version is not None
        if version is None:
            missing = _no_model(run, holds_model)
            if missing:
                store.apply(run_id, without_model(missing, now=now()))
                return NO_MODEL
            slot = _slot(run, limiter, region, now())
            if slot is not None and slot - now() > SLOT_WAIT:
                lease = run.submission.model_lease_until or ""
                kept = store.apply(run_id, deferred_registration(slot, holder=lease))
                return QUEUED if kept else "registering-elsewhere"
            if slot is not None and slot > now():
                sleep((slot - now()).total_seconds())
        if not _held(promotions, where.model_id, run_id, now, sleep):
            store.apply(run_id, released_registration(now=now()))
            return QUEUED
        try:
            ref, said = _decided(run, where, version, store, registry, now)
            store.apply(run_id, recorded_model(ref))
        finally:
            promotions.release(where.model_id, run_id, now=now())
    except BaseException:
        store.apply(run_id, released_registration(now=now()))
        raise
    return f"{'adopted' if adopted else 'registered'}:{said}"


def _decided(
    run: RunRecord,
    where: Target,
    version: VersionView | None,
    store: RunsRules,
    registry: Registry,
    now: Callable[[], datetime],
) -> tuple[ModelVersionRef, str]:
    """Holding the model's promotion lease: decide against the version holding production now, upload (unless the
    run's version was found), move `production` when the decision says so and it still sits where the decision found
    it, and mark a rival of the same round that it took production from as superseded."""
    champion = registry.get(f"{registry.model_name(where.model_id)}@{PRODUCTION_ALIAS}")
    promotion = (_promotion_of(version) if version is not None else None) or decide(
        run, where.rule, champion if champion is None or champion.version_id != _id(version) else None, now=now()
    )
    if version is None:
        version = registry.upload(where.model_id, model_message(run, where, promotion))
    holder = champion.version_id if champion is not None else ""
    if (
        promotion.decision in PROMOTING
        and PRODUCTION_ALIAS not in version.aliases
        and holder == promotion.champion_version
    ):
        version = registry.set_alias(version.version_name, PRODUCTION_ALIAS)
        if champion is not None and promotion.scored_version:
            rival = str(champion.metadata.get("run_id", ""))
            if rival:
                store.apply(rival, superseded_by(version, run.run_id, now=now()))
    ref = ModelVersionRef(version.model, version.version_id, format_timestamp(now()), promotion)
    return ref, f"{version.version_name}:{promotion.decision}"


def _held(
    promotions: PromotionLock,
    model_id: str,
    run_id: str,
    now: Callable[[], datetime],
    sleep: Callable[[float], None],
) -> bool:
    """Take the model's promotion lease, waiting up to PROMOTION_WAIT while another registration holds it."""
    deadline = now() + PROMOTION_WAIT
    while not promotions.hold(model_id, run_id, now=now(), until=now() + REGISTRATION_LEASE):
        if now() >= deadline:
            return False
        sleep(PROMOTION_POLL.total_seconds())
    return True


def _no_model(run: RunRecord, holds_model: Callable[[str], bool]) -> str:
    """Why the run's job left no model to register ("" when its model folder holds one)."""
    folder = run.artifacts.model_dir if run.artifacts else ""
    if not folder:
        return "the run records no model folder"
    if not holds_model(folder):
        return f"the job wrote no model: {folder} holds no file but metrics"
    return ""


def holds_a_model(objects: Iterable[tuple[str, int]]) -> bool:
    """Whether a model folder's objects (name, size) hold a model: a file that is not empty and not one of
    MODEL_METRICS_FILES (a job that wrote only figures, or nothing, left no model)."""
    return any(size > 0 and name.rsplit("/", 1)[-1] not in MODEL_METRICS_FILES for name, size in objects)


def without_model(why: str, *, now: datetime) -> Step[bool]:
    """Say on the run that its model is not registered, and why, and give the lease back; result: whether said."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, bool]:
        if cur is None or cur.model is not None:
            return None, False
        submission = replace(cur.submission, model_lease_until=format_timestamp(now), model_slot_at=None)
        return replace(cur, submission=submission).warned([f"model not registered: {why}"]), True

    return step


def superseded_by(version: VersionView, run_id: str, *, now: datetime) -> Step[bool]:
    """The rival run whose version held production until `version` (run run_id's) took it in the same round: its
    recorded promotion says superseded, and by what; result: whether it changed."""

    def step(cur: RunRecord | None) -> tuple[RunRecord | None, bool]:
        if cur is None or cur.model is None or cur.model.promotion is None:
            return None, False
        if cur.model.promotion.decision != "promoted":
            return None, False
        was = cur.model.promotion
        reason = (
            f"{was.reason}; then version {version.version_id} (run {run_id}), which scored the same champion, "
            f"improved on it by more and took production at {format_timestamp(now)}"
        )
        promotion = replace(was, decision="superseded", reason=reason[:2000])
        return replace(cur, model=replace(cur.model, promotion=promotion)), True

    return step


def _id(version: VersionView | None) -> str:
    return "" if version is None else version.version_id


def _slot(run: RunRecord, limiter: SlotLimiter | None, region: str, now: datetime) -> datetime | None:
    """The moment the run's UploadModel may be made: the slot it holds, else a new one from the limiter (None: no
    limiter, at once)."""
    held = run.submission.model_slot_at
    if held is not None:
        return parse_timestamp(held, field="submission.model_slot_at")
    return None if limiter is None else limiter.take(region, now)


__all__ = [
    "CHAMPION_DIR_ENV",
    "CHAMPION_VERSION_ENV",
    "DECISION_LABEL",
    "MODEL_METRICS_FILES",
    "NO_MODEL",
    "PROMOTION_WAIT",
    "QUEUED",
    "REGISTRATION_LEASE",
    "SLOT_WAIT",
    "PromotionLock",
    "Registry",
    "SlotLimiter",
    "Target",
    "champion_env",
    "claimed_registration",
    "decide",
    "deferred_registration",
    "held_out_data",
    "holds_a_model",
    "lineage",
    "model_message",
    "owning_route",
    "recorded_model",
    "register_model",
    "released_registration",
    "scores",
    "superseded_by",
    "target_for",
    "without_model",
]
