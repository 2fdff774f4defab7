"""A request's constraints turned into masks over one candidate space."""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache

import numpy as np

from functions.planning.images import ImageSupport, image_support, kinds_supported
from functions.planning.inputs import PlanInput
from functions.planning.reservations import Reservation, reservation_problems
from functions.planning.risk import NO_HISTORY, CapacityHistory
from functions.planning.search import Limits
from functions.planning.space import Space
from schemas.vocabulary import parse_prefer


@lru_cache(maxsize=256)
def image_mask(space: Space, image: ImageSupport) -> np.ndarray:
    """[config]: the image runs the machine's GPU (CPU-only always); cached per space and image."""
    capabilities = tuple(space.catalog.gpus[k].compute_capability for k in space.kinds)
    mask: np.ndarray = kinds_supported(image, capabilities)[space.kind]
    mask.setflags(write=False)
    return mask


def region_allowed(region: str, allowed: tuple[str, ...], job_regions: tuple[str, ...]) -> bool:
    """A plan may run in region: the request allows it (none named = any) and the deployment has it (none = any)."""
    return (not allowed or region in allowed) and (not job_regions or region in job_regions)


def pick_reservation(
    space: Space, inp: PlanInput, reservations: tuple[Reservation, ...], job_regions: tuple[str, ...] = ()
) -> tuple[Reservation | None, bool]:
    """(the reservation the request may run on, whether the request names it). A named one is the one (plan_request
    checked it is configured); otherwise the first configured one whose machine, GPU kind and region the request
    allows (one reservation per plan)."""
    if inp.reservation:
        named = next((r for r in reservations if r.name == inp.reservation), None)
        return named, named is not None
    for reservation in reservations:
        shapes = [cfg.shape for cfg in space.configs if reservation.matches(cfg.shape)]
        if not shapes or not region_allowed(reservation.region, inp.regions, job_regions):
            continue
        if reservation_problems(reservation, space.catalog):  # a machine or region no plan can use it on
            continue
        if inp.gpu_allowlist and shapes[0].accelerator_type not in inp.gpu_allowlist:
            continue
        return reservation, False
    return None, False


def build_limits(
    space: Space,
    inp: PlanInput,
    now: datetime,
    max_job_hours: float | None,
    memory_margin: float | None = None,
    reservations: tuple[Reservation, ...] = (),
    job_regions: tuple[str, ...] = (),
    capacity: CapacityHistory = NO_HISTORY,
) -> Limits:
    """Masks for regions, machine kinds and Spot, plus the deadline in hours from `now`, the objective
    (constraints.prefer), the share of GPU memory kept free (None = assumptions.json), Flex-start and the
    reservation. job_regions: the deployment's (PlannerConfig.job_regions); () = any region."""
    region_mask = np.array([region_allowed(r, inp.regions, job_regions) for r in space.regions])
    allow = set(inp.gpu_allowlist)
    # kinds in space order, then CPU-only last (space.kind is -1 there); CPU-only only when no allowlist is given
    kind_ok = np.array([not allow or k in allow for k in space.kinds] + [not allow])
    spot_allowed = np.array([inp.spot != "required", inp.spot != "never" and inp.checkpointing])
    a = space.catalog.assumptions
    image = image_support(inp.image_uri, inp.gpu_capabilities)
    job_hours = a.job.max_job_hours if max_job_hours is None else max_job_hours
    reservation, required = pick_reservation(space, inp, reservations, job_regions)
    goal = parse_prefer(inp.prefer)  # checked by PlanInput already
    default = float(a.objective.value_of_time_usd_per_hour)
    value = goal if isinstance(goal, float) else default if goal == "" else 0.0
    return Limits(
        region_mask=region_mask,
        config_allowed=kind_ok[space.kind],
        max_gpus=inp.max_gpus,
        today=now.date().toordinal(),
        spot_allowed=spot_allowed,
        deadline_hours=None if inp.deadline is None else (inp.deadline - now).total_seconds() / 3600.0,
        budget_usd=inp.budget_usd,
        max_hours=job_hours,
        fastest=goal == "fastest",
        value_of_time=value,
        value_is_default=goal == "",
        value_text=f"${value:,.2f}".removesuffix(".00"),
        fp32_only=inp.precision == "fp32",
        memory_margin=a.memory.safety_margin_fraction if memory_margin is None else memory_margin,
        image=image,
        image_ok=image_mask(space, image),
        flex_allowed=inp.flex_start == "allowed",
        reservation=reservation,
        reservation_required=required,
        job_regions=job_regions,
        capacity=capacity,
        tensor_parallel=inp.tensor_parallel,
        pipeline_parallel=inp.pipeline_parallel,
    )
