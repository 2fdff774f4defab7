"""Semantic rules a structurally valid TrainingRequest must also meet. Each broken rule yields one readable reason."""

from __future__ import annotations

from datetime import datetime

from functions.settings import Settings
from schemas.errors import SchemaError
from schemas.model_presets import get_preset
from schemas.times import parse_timestamp
from schemas.trainer_flags import extra_problems
from schemas.training_request import TrainingRequest
from schemas.vocabulary import TASK_MODEL_FAMILY


def request_problems(request: TrainingRequest, settings: Settings, now: datetime) -> list[str]:
    """Every reason the request cannot be run as asked (empty when it can)."""
    problems: list[str] = []
    try:
        preset = get_preset(request.model.preset)
    except SchemaError as exc:
        problems.append(str(exc))
    else:
        family = TASK_MODEL_FAMILY[request.task]
        if preset.family != family:
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
    # Each extra becomes `--hparam KEY=VALUE` (job_spec.trainer_args): refused here, not after a machine starts.
    problems += extra_problems(request.hyperparameters.extra)
    problems += pinned_shape_problems(request)
    return problems


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
