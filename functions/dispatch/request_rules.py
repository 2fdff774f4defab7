"""Semantic rules a structurally valid TrainingRequest must also meet. Each broken rule yields one readable reason."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from pathlib import Path

from deploy.reloading import ReloadingFile
from deploy.routes import ROUTES_FILE, Route, RouteError, read_routes
from functions.settings import Settings
from schemas.errors import SchemaError
from schemas.model_presets import GptPreset, get_preset
from schemas.model_version import ROUTE_LABEL
from schemas.times import parse_timestamp
from schemas.trainer_flags import extra_problems
from schemas.training_request import TrainingRequest
from schemas.uris import ImagePlace, parse_gcs_uri, parse_image, parse_image_place
from schemas.vocabulary import TASK_MODEL_FAMILY


def request_problems(request: TrainingRequest, settings: Settings, now: datetime) -> list[str]:
    """Every reason the request cannot be run as asked (empty when it can)."""
    problems: list[str] = []
    try:
        preset = get_preset(request.model.preset) if request.model.preset or request.trainer.builtin else None
    except SchemaError as exc:
        problems.append(str(exc))
    else:
        family = TASK_MODEL_FAMILY.get(request.task, "")
        if preset is not None and family and preset.family != family:
            problems.append(
                f"model.preset: {request.model.preset!r} is a {preset.family} preset but task "
                f"{request.task!r} needs a {family} preset"
            )
    bucket = request.dataset.bucket
    if bucket not in settings.allowed_buckets:
        problems.append(
            f"dataset.uri: bucket {bucket!r} is not one Landfall reads from; allowed: "
            f"{', '.join(settings.allowed_buckets)} (set LANDFALL_ALLOWED_BUCKETS to add one)"
        )
    if not request.dataset.uri.endswith("/"):
        problems.append(f"dataset.uri: {request.dataset.uri!r} must name a prefix ending in '/'")
    if request.constraints.deadline:
        deadline = parse_timestamp(request.constraints.deadline, field="constraints.deadline")
        if deadline <= now:
            problems.append(
                f"constraints.deadline: {request.constraints.deadline} is already past "
                f"(now {now.isoformat(timespec='seconds')}); give a future time or none"
            )
    if request.trainer.builtin:
        # Each extra becomes `--hparam KEY=VALUE` (job_spec.trainer_args): refused here, not after a machine starts.
        problems += extra_problems(request.hyperparameters.extra)
    else:
        problems += trainer_problems(request, settings)
    problems += label_problems(request, settings)
    problems += pinned_shape_problems(request)
    problems += reservation_problems(request, settings)
    return problems


def reservation_problems(request: TrainingRequest, settings: Settings) -> list[str]:
    """A named reservation the deployment does not declare (LANDFALL_RESERVATIONS), or one on a machine Google does
    not sell through reservations: refused before anything is planned."""
    if not request.constraints.reservation:
        return []
    # Imported here: the planner (numpy) loads only when a request names a reservation or is planned.
    from functions.planning import PlanInputError
    from functions.planning.catalog import load_catalog
    from functions.planning.inputs import plan_input_from_request
    from functions.planning.planner import reservation_input_problems
    from functions.planning.reservations import parse_reservations

    try:
        reservations = parse_reservations(settings.reservations)
        planned = plan_input_from_request(request)
    except PlanInputError as exc:
        return [f"constraints.reservation: {request.constraints.reservation!r} cannot be checked ({exc})"]
    return reservation_input_problems(planned, load_catalog(), reservations)


def pinned_shape_problems(request: TrainingRequest) -> list[str]:
    """A pinned machine type, GPU count or replica count the catalog does not hold, each naming the valid values."""
    c = request.constraints
    if not (c.machine_type or c.accelerator_count or c.replica_count):
        return []
    # Imported here: the planner (numpy) loads only when a request pins a shape or is planned.
    from functions.planning import PlanInputError
    from functions.planning.catalog import load_catalog
    from functions.planning.inputs import plan_input_from_request
    from functions.planning.pins import pin_problems

    try:
        planned = plan_input_from_request(request)
    except PlanInputError as exc:  # e.g. no preset: request_problems names that field already
        return [
            f"constraints.machine_type: the pinned shape cannot be checked until the request can be planned ({exc})"
        ]
    return pin_problems(planned, load_catalog())


WORKLOAD_WAYS = (
    "model.preset (a preset's shape, e.g. gpt-1.3b)",
    "workload.parameters (with optional workload.layers, hidden_size, seq_len)",
    "workload.memory_gib_per_gpu with workload.step_seconds (measured)",
    "constraints.machine_type with accelerator_count and replica_count (a pinned machine)",
)
"""The four ways an own trainer says how big its work is, in the order the planner checks them."""


def workload_given(request: TrainingRequest) -> bool:
    """Whether the planner can size an own trainer's work (WORKLOAD_WAYS)."""
    w, c = request.workload, request.constraints
    pinned = bool(c.machine_type and c.replica_count and (c.accelerator_count or not c.machine_type.startswith("n1-")))
    return bool(request.model.preset or w.parameters or w.measured or pinned)


def trainer_problems(request: TrainingRequest, settings: Settings) -> list[str]:
    """Who may run what: scripts and packages from the code bucket, images from the allowed places (a command or
    arguments only on the deployment's own images or LANDFALL_COMMAND_IMAGE_PREFIXES); and a workload the planner can
    size. Every URI is compared by its parsed parts (schemas/uris.py), never as text."""
    t = request.trainer
    problems: list[str] = []
    for name, uris in (("trainer.script", (t.script,) if t.script else ()), ("trainer.package_uris", t.package_uris)):
        for uri in uris:
            try:
                bucket = parse_gcs_uri(uri, name).bucket
            except SchemaError as exc:
                problems.append(str(exc))
                continue
            if not settings.code_bucket:
                problems.append(f"{name}: {uri} cannot be run: no code bucket is configured (set LANDFALL_CODE_BUCKET)")
            elif bucket != settings.code_bucket:
                problems.append(
                    f"{name}: {uri} is outside the code bucket; scripts and packages run only from "
                    f"gs://{settings.code_bucket}/ (LANDFALL_CODE_BUCKET): copy it there (`landfall submit --script` "
                    "does) and name that URI"
                )
    if t.image_uri:
        problems += image_problems(request, settings)
    if not workload_given(request):
        problems.append(
            "workload: Landfall cannot size code it did not write; say how big the work is in one of four ways: "
            + "; ".join(WORKLOAD_WAYS)
        )
    problems += trainable_problems(request)
    return problems


def trainable_problems(request: TrainingRequest) -> list[str]:
    """workload.trainable_parameters more than the parameters of the preset it trains (the schema already checks it
    against workload.parameters)."""
    trainable, preset = request.workload.trainable_parameters, request.model.preset
    if not trainable or request.workload.parameters or not preset:
        return []
    try:
        shape = get_preset(preset)
    except SchemaError:
        return []  # request_problems names the unknown preset
    if not isinstance(shape, GptPreset) or trainable <= shape.parameter_count():
        return []  # an MLP preset's count depends on the data's columns: the planner checks it
    whole = shape.parameter_count()
    return [
        f"workload.trainable_parameters: {trainable:,} is more than the {whole:,} parameters of model.preset "
        f"{preset!r}: it counts the part of the model that trains (adapters, LoRA); give at most {whole:,}"
    ]


@cache
def own_repositories(settings: Settings) -> tuple[ImagePlace, ...]:
    """The deployment's own Artifact Registry repositories: the trainer image's (HOST/PROJECT/REPOSITORY/), in every
    job region. None when the trainer image is not named that deep (as for the default allowed prefixes)."""
    images = {settings.trainer_image, *(settings.trainer_image_for(region) for region in settings.job_regions)}
    places = []
    for uri in sorted(images):
        ref = parse_image(uri, "LANDFALL_TRAINER_IMAGE")
        if len(ref.path) >= 3:
            places.append(ImagePlace(host=ref.host, path=ref.path[:-1], folder=True))
    return tuple(dict.fromkeys(places))


def image_problems(request: TrainingRequest, settings: Settings) -> list[str]:
    """trainer.image_uri within an allowed place; trainer.command and trainer.args only where commands may run."""
    t = request.trainer
    try:
        image = parse_image(t.image_uri, "trainer.image_uri")
        own = own_repositories(settings)
    except SchemaError as exc:
        return [str(exc)]
    allowed = image_places(settings.allowed_image_prefixes, "LANDFALL_ALLOWED_IMAGE_PREFIXES")
    if not any(image.within(place) for place in allowed):
        return [
            f"trainer.image_uri: {t.image_uri} is not under an allowed image prefix; allowed: "
            f"{', '.join(map(str, allowed))} (LANDFALL_ALLOWED_IMAGE_PREFIXES)"
        ]
    commanding = (*own, *image_places(settings.command_image_prefixes, "LANDFALL_COMMAND_IMAGE_PREFIXES"))
    given = [name for name, value in (("trainer.command", t.command), ("trainer.args", t.args)) if value]
    if given and not any(image.within(place) for place in commanding):
        return [
            f"{given[0]}: {t.image_uri} may run only as built (its own ENTRYPOINT and CMD): a command or arguments "
            "choose what runs in it, so they are taken only with images from the deployment's own repository "
            f"({', '.join(map(str, own))}) or under LANDFALL_COMMAND_IMAGE_PREFIXES "
            f"({', '.join(map(str, image_places(settings.command_image_prefixes, ''))) or 'none set'}); build the "
            f"command into the image and leave {' and '.join(given)} out, or push the image to the deployment's "
            "repository"
        ]
    return []


@cache
def image_places(prefixes: tuple[str, ...], setting: str) -> tuple[ImagePlace, ...]:
    """The configured prefixes as places (functions/settings.py refuses one that does not parse)."""
    return tuple(parse_image_place(prefix, setting) for prefix in prefixes)


def label_problems(request: TrainingRequest, settings: Settings) -> list[str]:
    """The request's `landfall-route` label, which only ingest sets, must name the route that owns the dataset
    (parse_training_request refuses Landfall's other labels and too many of the team's own)."""
    if ROUTE_LABEL not in request.labels:
        return []
    given = request.labels[ROUTE_LABEL]
    routes = _routes(settings.routes_file)
    owner = next((r for r in routes if r.matches(request.dataset.bucket, request.dataset.prefix)), None)
    if owner is not None and owner.name == given:
        return []
    owned = f"route {owner.name!r}" if owner is not None else "no route (deploy/routes.toml)"
    return [
        f"labels: {ROUTE_LABEL!r} is Landfall's own label, set by ingest to the route that owns the dataset, which is "
        f"{owned}; this request says {given[:80]!r}. Leave the label out: the route is the data's, never the request's"
    ]


_ROUTES = ReloadingFile(read_routes, (RouteError, TypeError, KeyError))
"""The routes file as it is now: read again when it changes (deploy/reloading.py), as ingest reads it, so that a
route added while the functions run is the same route here as there."""


def _routes(routes_file: str) -> tuple[Route, ...]:
    return _ROUTES.read(Path(routes_file) if routes_file else ROUTES_FILE)
