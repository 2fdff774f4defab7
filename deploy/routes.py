"""Routes from deploy/routes.toml: which datasets Landfall accepts where, how each declares itself complete, and the
training template it gets. Data apart from logic: this module only loads and checks the file, beside the data it
reads; ingest (functions/ingest/routes.py, which picks the file from its settings) and the deployer
(deploy/gcp/plan.py, the shipped file) both read routes through it.

The shipped file is package data of deploy/; the settings' routes_file (LANDFALL_ROUTES_FILE) replaces it in ingest.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from schemas.errors import SchemaError
from schemas.fields import Reader
from schemas.model_presets import get_preset
from schemas.model_version import PromotionRule, parse_promotion_rule
from schemas.trainer_spec import TrainerSpec, WorkloadSpec, parse_trainer, parse_workload
from schemas.training_request import Constraints, Hyperparameters
from schemas.vocabulary import TASK_FIGURES, TASKS

ROUTES_FILE = resources.files("deploy").joinpath("routes.toml")
READINESS = ("marker", "manifest", "quiet-period")

# Request fields a route may let a dataset's landfall.json override (dotted paths; "hyperparameters.*" = all of
# that section). The rest (idempotency_key, dataset, source, created_at, schema_version) are ingest's to set.
OVERRIDABLE_FIELDS = (
    "task",
    "model.preset",
    "model.label_column",
    "hyperparameters.epochs",
    "hyperparameters.batch_size",
    "hyperparameters.learning_rate",
    "hyperparameters.seed",
    "hyperparameters.max_steps",
    "hyperparameters.checkpoint_every_steps",
    "hyperparameters.extra",
    "constraints.deadline",
    "constraints.budget_usd",
    "constraints.regions",
    "constraints.gpu_allowlist",
    "constraints.max_gpus",
    "constraints.spot",
    "labels",
    "trainer.script",
    "trainer.requirements",
    "trainer.package_uris",
    "trainer.python_module",
    "trainer.image_uri",
    "trainer.command",
    "trainer.args",
    "trainer.env",
    "trainer.launch",
    "trainer.gpu_capabilities",
    "workload.parameters",
    "workload.layers",
    "workload.hidden_size",
    "workload.seq_len",
    "workload.samples_per_epoch",
    "workload.tokens_per_epoch",
    "workload.memory_gib_per_gpu",
    "workload.step_seconds",
    "workload.flops_per_sample",
    "workload.activation_gib_per_sample",
    "workload.trainable_parameters",
)


class RouteError(ValueError):
    """deploy/routes.toml is malformed."""


@dataclass(frozen=True)
class Route:
    name: str
    bucket: str
    """Glob on the bucket name ("*" = any allowed bucket)."""
    prefix: str
    """Object-name prefix, ending in '/'. A dataset is a folder below it."""
    task: str
    model_preset: str
    label_column: str = "label"
    readiness: tuple[str, ...] = ("marker", "manifest")
    """How a dataset here declares itself complete: "marker" (_SUCCESS), "manifest" (_MANIFEST.json), and/or
    "quiet-period" (no new object for quiet_period_seconds, closed by the periodic sweep)."""
    quiet_period_seconds: int = 0
    dataset_depth: int = 1
    """Quiet-period datasets: how many folder levels below `prefix` name one dataset (1: prefix/NAME/)."""
    min_objects: int = 1
    min_bytes: int = 1
    formats: tuple[str, ...] = ()
    """Allowed data formats (file extensions, lower case); empty = any."""
    overridable: tuple[str, ...] = ()
    """Request fields (from OVERRIDABLE_FIELDS, globs allowed) a landfall.json in the dataset may set."""
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    constraints: dict[str, Any] = field(default_factory=dict)
    trainer: dict[str, Any] = field(default_factory=dict)
    """[routes.trainer]: the team's own training code for datasets landing here (TrainingRequest `trainer`);
    empty = the built-in trainer. With a trainer, `task` and `model_preset` may be ""."""
    workload: dict[str, Any] = field(default_factory=dict)
    """[routes.workload]: the size of that code's work, for the planner (TrainingRequest `workload`)."""
    promotion: dict[str, Any] = field(default_factory=dict)
    """[routes.promotion]: when a new model replaces the route's production model (metric, direction,
    min_improvement; docs/models.md); empty = every model is registered, none promoted past the first."""
    serving_image: str = ""
    """The serving container registered with the route's models (Model.containerSpec.imageUri); "" = the image the
    run trained with (docs/models.md says which)."""

    @property
    def promotion_rule(self) -> PromotionRule | None:
        return parse_promotion_rule(self.promotion, "promotion") if self.promotion else None

    @property
    def trainer_spec(self) -> TrainerSpec:
        return parse_trainer(Reader(self.trainer, "trainer"))

    @property
    def workload_spec(self) -> WorkloadSpec:
        return parse_workload(Reader(self.workload, "workload"))

    def matches(self, bucket: str, name: str) -> bool:
        """Whether an object name (or dataset prefix) in bucket falls under this route."""
        return fnmatch.fnmatchcase(bucket, self.bucket) and name.startswith(self.prefix)

    def allows_override(self, dotted: str) -> bool:
        return any(fnmatch.fnmatchcase(dotted, pattern) for pattern in self.overridable)


def _route(entry: dict[str, Any], where: str) -> Route:
    entry = {
        k: tuple(v) if k in ("readiness", "formats", "overridable") and isinstance(v, list) else v
        for k, v in entry.items()
    }
    try:
        route = Route(**entry)
    except TypeError as exc:
        raise RouteError(f"{where} is malformed: {exc}") from exc
    name = f"route {route.name!r}"
    try:
        own_trainer = not route.trainer_spec.builtin
        _ = route.workload_spec  # read for its SchemaError
    except SchemaError as exc:
        raise RouteError(f"{name}: [routes.trainer] or [routes.workload]: {exc}") from exc
    try:
        rule = route.promotion_rule
    except SchemaError as exc:
        raise RouteError(
            f'{name}: [routes.promotion]: {exc}; e.g. metric = "accuracy", direction = "higher", min_improvement = 0.01'
        ) from exc
    figures = dict(TASK_FIGURES.get(route.task, ())) | {"loss": "loss"}
    if rule is not None and not own_trainer and rule.metric not in figures:
        raise RouteError(
            f"{name}: [routes.promotion] metric {rule.metric!r} is not a figure the built-in trainer reports for "
            f"task {route.task!r}; choose one of {', '.join(sorted(figures))}"
        )
    # With its own trainer a route may leave task out: the team's code decides what it learns.
    if route.task not in TASKS and not (own_trainer and not route.task):
        raise RouteError(f"{name}: task {route.task!r} is not one of {', '.join(TASKS)}")
    if not route.prefix.endswith("/"):
        raise RouteError(f"{name}: prefix {route.prefix!r} must end in '/' (a folder)")
    unknown = [r for r in route.readiness if r not in READINESS]
    if unknown or not route.readiness:
        raise RouteError(f"{name}: readiness {list(route.readiness)} must be a non-empty list of {READINESS}")
    if "quiet-period" in route.readiness and route.quiet_period_seconds <= 0:
        raise RouteError(f"{name}: readiness quiet-period needs quiet_period_seconds > 0")
    if route.dataset_depth < 1 or route.min_objects < 0 or route.min_bytes < 0:
        raise RouteError(f"{name}: dataset_depth must be >= 1 and min_objects, min_bytes >= 0")
    if any(f != f.lower() or f.startswith(".") for f in route.formats):
        raise RouteError(f'{name}: formats are lower-case extensions without a dot, e.g. ["csv", "parquet"]')
    for pattern in route.overridable:
        if not any(fnmatch.fnmatchcase(f, pattern) for f in OVERRIDABLE_FIELDS):
            raise RouteError(
                f"{name}: overridable {pattern!r} matches no field a dataset may override; "
                f"choose from {', '.join(OVERRIDABLE_FIELDS)}"
            )
    try:
        if route.model_preset or not own_trainer:
            get_preset(route.model_preset)
    except SchemaError as exc:
        raise RouteError(f"{name}: {exc}") from exc
    try:
        Hyperparameters(**route.hyperparameters)
        Constraints(**route.constraints)
    except TypeError as exc:
        raise RouteError(
            f"{name}: [routes.hyperparameters] or [routes.constraints] holds an unknown key ({exc}); "
            "see schemas/training_request.py for the fields"
        ) from exc
    return route


def read_routes(path: Traversable = ROUTES_FILE) -> tuple[Route, ...]:
    """The routes in path (default: the shipped routes.toml), checked."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RouteError(f"cannot read routes from {path}: {exc}") from exc
    routes = tuple(_route(entry, f"{path.name}: routes[{i}]") for i, entry in enumerate(raw.get("routes", [])))
    if not routes:
        raise RouteError(f"{path.name}: no [[routes]] defined; add at least one")
    names = [r.name for r in routes]
    if len(set(names)) != len(names):
        raise RouteError(f"{path.name}: route names must be unique, got {names}")
    return routes
