"""The PlannerConfig the dispatcher plans with, from its settings: the default region (ties on price go to it), the
project's quota overrides over the packaged quotas.json, and the memory and timeout margins. `landfall plan` builds
the same one, so the CLI plans what the dispatcher would; the reservations jobs may consume (LANDFALL_RESERVATIONS);
and the job regions, the only ones plans may use (where an artifacts bucket and an image repository are deployed)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from functions.settings import Settings, SettingsError

if TYPE_CHECKING:
    from functions.planning import PlannerConfig


def planner_config(
    settings: Settings, *, memory_margin: float | None = None, timeout_margin: float | None = None
) -> PlannerConfig:
    """A functions.planning.PlannerConfig; explicit margins win over the settings' (the CLI's flags)."""
    # Imported here: the planner (numpy) loads only where a request is planned.
    from functions.planning import PlanInputError, PlannerConfig
    from functions.planning.quotas import load_quotas
    from functions.planning.reservations import parse_reservations

    try:
        reservations = parse_reservations(settings.reservations)
    except PlanInputError as exc:  # the deployment's setting, not the request, is wrong
        raise SettingsError(str(exc)) from exc
    quotas = load_quotas()
    if settings.quota_overrides:
        quotas = quotas.with_overrides(json.loads(settings.quota_overrides))
    return PlannerConfig(
        default_region=settings.default_region,
        quotas=quotas,
        memory_margin=settings.memory_margin if memory_margin is None else memory_margin,
        timeout_margin=settings.timeout_margin if timeout_margin is None else timeout_margin,
        reservations=reservations,
        project=settings.project,
        job_regions=settings.job_regions,
    )
