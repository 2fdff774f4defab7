"""plan_request: the configuration that fits, meets the deadline and budget, and is best by the request's objective
(constraints.prefer: the least cost + a value of time x hours by default, the cheapest or the fastest), the
next-best ones to fall back on, and every candidate with the reason it lost.

Pure: apart from the cached catalog and quota loads, it reads nothing and writes nothing. `now` is a parameter so
deadlines are testable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property

import numpy as np

from functions.planning.calibration import calibrate, calibrated, carried, measured_elsewhere
from functions.planning.catalog import Catalog, load_catalog
from functions.planning.errors import PlanInputError
from functions.planning.explain import Candidate, alternatives, candidates, representatives, top_configs
from functions.planning.feasibility import rejection_text
from functions.planning.inputs import PlanInput
from functions.planning.job_choices import JobPolicy
from functions.planning.job_regions import undeployed_rejection
from functions.planning.limits import build_limits
from functions.planning.measured import MeasuredFigures
from functions.planning.pins import layout_pin_problems, pin_of, pin_problems
from functions.planning.plan_record import build_plan, objective_text
from functions.planning.quotas import QuotaTable, load_quotas
from functions.planning.reservations import Reservation, reservation_problems
from functions.planning.risk import NO_HISTORY, CapacityHistory
from functions.planning.search import Evaluation, evaluate
from functions.planning.space import VARIANT_SERVER, space_for
from functions.planning.workload import build_workload
from schemas.plan import Plan
from schemas.vertex_jobs import load_vertex_jobs


@dataclass(frozen=True)
class PlannerConfig:
    """How the planner runs; the defaults suit the dispatcher."""

    default_region: str = "us-central1"
    """Wins ties on price, so equal-priced regions resolve to it."""
    quotas: QuotaTable | None = None
    """Quota limits; None = data/quotas.json (QuotaTable.with_overrides adjusts it)."""
    catalog: Catalog | None = None
    """None = the packaged catalog."""
    max_alternatives: int = 25
    """How many losing candidates the Plan record lists (all are in PlanOutcome.candidates)."""
    max_fallbacks: int = 5
    max_job_hours: float | None = None
    """Longest run a plan may take; None = assumptions.json (Vertex's 7-day default timeout); 0 = no limit."""
    memory_margin: float | None = None
    """Share of each GPU's memory kept free, in [0, 1); None = assumptions.json (10 %)."""
    timeout_margin: float | None = None
    """scheduling.timeout = (the p90 duration + one start-up) x this (>= 1); None = assumptions.json."""
    reservations: tuple[Reservation, ...] = ()
    """Compute Engine reservations plans may run on (LANDFALL_RESERVATIONS); a request may name one."""
    project: str = ""
    """The project jobs run in: a reservation's resource name is projects/PROJECT/zones/ZONE/reservations/NAME."""
    job_regions: tuple[str, ...] = ()
    """Regions with a deployed artifacts bucket and image repository (Settings.job_regions): plans and fallbacks
    run only there (functions/planning/job_regions.py); () = every region of the catalog."""
    capacity: CapacityHistory = NO_HISTORY
    """What Landfall's recent jobs met per GPU kind, region and sale mode (preemptions, refusals): the planner prices
    Spot's preemptions and each shape's refusals from it (functions/planning/risk.py); empty = the priors."""

    def __post_init__(self) -> None:
        if self.memory_margin is not None and not 0 <= self.memory_margin < 1:
            raise PlanInputError(
                f"memory margin must be in [0, 1) (a share of GPU memory kept free), got {self.memory_margin}"
            )
        unnamed = [r.name for r in self.reservations if not r.project]
        if unnamed and not self.project:
            raise PlanInputError(
                f"reservations {', '.join(unnamed)} name no project and the planner has none: set the reservation's "
                "project or GOOGLE_CLOUD_PROJECT"
            )
        if self.timeout_margin is not None and self.timeout_margin < 1:
            raise PlanInputError(
                f"timeout margin must be >= 1 (a timeout below the p90 estimate may stop the job before "
                f"it can finish), got {self.timeout_margin}"
            )


@dataclass(frozen=True)
class PlanOutcome:
    """The chosen plan (or why there is none), fallbacks in rank order and every candidate considered."""

    plan: Plan | None
    fallbacks: tuple[Plan, ...]
    rejection: str | None
    objective: str
    evaluation: Evaluation = field(repr=False, compare=False)

    @cached_property
    def candidates(self) -> tuple[Candidate, ...]:
        """Every hardware configuration considered, best-ranked first, each with its best variant and reason."""
        ev = self.evaluation
        best = ev.best()
        order, v, s = representatives(ev)
        picks = [best if best is not None and best[0] == c else (c, int(v[c]), int(s[c])) for c in order.tolist()]
        return tuple(candidates(ev, picks, best))


def _fallbacks(
    ev: Evaluation, best: tuple[int, int, int], ranked: list[tuple[int, int, int]], limit: int
) -> list[tuple[int, int, int, int]]:
    """Next-best (config, variant, spot, region) in rank order: the chosen machine in its other allowed regions and
    on the other pricing, and the next-ranked machines; at most two per machine type, since a stockout or a quota
    error often hits a whole machine type in a region."""
    if limit <= 0:
        return []
    space, limits = ev.space, ev.limits
    bc, bv, bs = best
    options: list[tuple[float, float, int, int, int, int]] = []
    for c, v, s in [*ranked, (bc, int(np.argmin(ev.primary[bc, :, 1 - bs])), 1 - bs)]:
        if ev.reason[c, v, s] == 0:
            options.append((float(ev.primary[c, v, s]), float(ev.secondary[c, v, s]), c, v, s, int(ev.region[c, v, s])))
    server = int(VARIANT_SERVER[bv])
    usable = limits.region_mask & space.buyable(limits.flex_allowed)[bc, :, bs, server]
    for j in np.flatnonzero(usable).tolist():
        if j == ev.region[best]:
            continue
        hours, wait = ev.in_region(bc, bv, bs, j)
        cost = hours * float(space.price[bc, j, bs, server])
        if limits.budget_usd > 0 and cost > limits.budget_usd:
            continue
        if limits.deadline_hours is not None and hours + wait > limits.deadline_hours:
            continue  # its region's Spot overhead or refusals take it past what the chosen region meets
        if limits.max_hours > 0 and hours > limits.max_hours:
            continue
        options.append((*limits.score(hours + wait if limits.capacity.shapes else hours, cost), bc, bv, bs, j))
    options.sort(key=lambda o: (o[0], o[1]))
    picked: list[tuple[int, int, int, int]] = []
    per_shape: dict[str, int] = {}
    for _, _, c, v, s, r in options:
        name = space.configs[c].shape.machine_type
        if per_shape.get(name, 0) < 2:
            per_shape[name] = per_shape.get(name, 0) + 1
            picked.append((c, v, s, r))
        if len(picked) == limit:
            break
    return picked


def reservation_input_problems(
    request: PlanInput, catalog: Catalog, reservations: tuple[Reservation, ...]
) -> list[str]:
    """Why the reservation the request names cannot be planned on at all (unknown, or a machine Google does not
    sell that way); [] when it names none or it can be."""
    if not request.reservation:
        return []
    named = next((r for r in reservations if r.name == request.reservation), None)
    if named is None:
        known = ", ".join(r.name for r in reservations) or "none configured"
        return [
            f"constraints.reservation {request.reservation!r} is not a reservation Landfall knows (known: {known}); "
            "declare it in LANDFALL_RESERVATIONS (name -> machine_type, zone, count) or leave the field empty"
        ]
    return reservation_problems(named, catalog)


def plan_request(
    request: PlanInput,
    config: PlannerConfig | None = None,
    *,
    now: datetime | None = None,
    measured: Sequence[MeasuredFigures] = (),
) -> PlanOutcome:
    """Plan one request. Raises PlanInputError when the request itself cannot be planned (unknown preset...).

    `measured`: what past runs and canaries of the same workload measured (functions/planning/measured.py); where
    they apply, the plan's step times and start-up are the measured ones, scaled to other machines by the model's
    ratios, and the plan says which figures are measured and which modelled. Empty: the model alone."""
    config = config or PlannerConfig()
    now = now or datetime.now(UTC)
    catalog = config.catalog or load_catalog()
    problems = pin_problems(request, catalog) + reservation_input_problems(request, catalog, config.reservations)
    if problems:
        raise PlanInputError("; ".join(problems))
    space = space_for(catalog, config.quotas or load_quotas(), config.default_region, pin_of(request))
    work = build_workload(request, catalog.assumptions)
    problems = layout_pin_problems(request, work)
    if problems:
        raise PlanInputError("; ".join(problems))
    limits = build_limits(
        space,
        request,
        now,
        config.max_job_hours,
        config.memory_margin,
        config.reservations,
        config.job_regions,
        config.capacity,
    )
    ev = evaluate(space, work, limits)
    calibration = calibrate(ev, measured) if measured else None
    if measured and measured_elsewhere(space, measured):
        # a pinned request measured on another shape: the model's ratio there, worked out where that shape is
        reference = space_for(catalog, config.quotas or load_quotas(), config.default_region)
        ref_limits = build_limits(
            reference, request, now, config.max_job_hours, config.memory_margin, capacity=config.capacity
        )
        across = calibrate(evaluate(reference, work, ref_limits), measured)
        if across is not None:
            calibration = carried(space, reference, across)
    if calibration is not None:
        ev = evaluate(space, calibrated(work, calibration), limits)
    objective = objective_text(request, limits)
    best = ev.best()
    if best is None:
        undeployed = undeployed_rejection(
            request.regions,
            config.job_regions,
            catalog_regions=space.regions,
            default_region=config.default_region,
            project=config.project,
        )
        return PlanOutcome(
            plan=None,
            fallbacks=(),
            rejection=undeployed or rejection_text(ev, request, now, config.max_job_hours),
            objective=objective,
            evaluation=ev,
        )
    a = catalog.assumptions.job
    policy = JobPolicy(
        rules=load_vertex_jobs(),
        timeout_margin=config.timeout_margin or a.timeout_margin,
        min_timeout_seconds=a.min_timeout_seconds,
        flex_allowed=request.flex_start == "allowed",
        project=config.project,
    )
    head = max(config.max_alternatives, 3 * config.max_fallbacks) + 1
    ranked = [pick for pick in top_configs(ev, head) if pick[0] != best[0]]
    rows = alternatives(ev, ranked[: config.max_alternatives], best)
    plan = build_plan(ev, best, int(ev.region[best]), objective, rows, len(space.configs), policy)
    fallbacks = tuple(
        build_plan(ev, (c, fv, fs), region, f"fallback {i + 1} after the chosen plan; {objective}", (), 0, policy)
        for i, (c, fv, fs, region) in enumerate(_fallbacks(ev, best, ranked, config.max_fallbacks))
    )
    return PlanOutcome(plan=plan, fallbacks=fallbacks, rejection=None, objective=objective, evaluation=ev)
