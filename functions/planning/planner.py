"""plan_request: the cheapest configuration that fits and meets the deadline (or the fastest within a budget), the
next-best ones to fall back on, and every candidate with the reason it lost.

Pure: apart from the cached catalog and quota loads, it reads nothing and writes nothing. `now` is a parameter so
deadlines are testable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property

import numpy as np

from functions.planning.catalog import Catalog, load_catalog
from functions.planning.explain import Candidate, candidate, representatives
from functions.planning.feasibility import rejection_text
from functions.planning.inputs import PlanInput
from functions.planning.limits import build_limits
from functions.planning.plan_record import build_plan, objective_text
from functions.planning.quotas import QuotaTable, load_quotas
from functions.planning.search import Evaluation, evaluate
from functions.planning.space import VARIANT_SERVER, space_for
from functions.planning.workload import build_workload
from schemas.plan import Plan


@dataclass(frozen=True)
class PlannerConfig:
    """How the planner runs; the defaults suit the dispatcher."""

    default_region: str = "us-central1"
    """Wins ties on price, so equal-priced regions resolve to it."""
    quotas: QuotaTable | None = None
    """Quota limits; None = data/quotas.json (QuotaTable.with_overrides adjusts it)."""
    catalog: Catalog | None = None
    """None = the packaged catalog."""
    max_alternatives: int = 40
    """How many losing candidates the Plan record lists (all are in PlanOutcome.candidates)."""
    max_fallbacks: int = 5
    max_job_hours: float | None = None
    """Longest run a plan may take; None = assumptions.json (Vertex's 7-day default timeout); 0 = no limit."""


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
        rows = []
        for c in order:
            c = int(c)
            cv, cs = (best[1], best[2]) if best is not None and best[0] == c else (int(v[c]), int(s[c]))
            rows.append(candidate(ev, c, cv, cs, best))
        return tuple(rows)


def _fallbacks(ev: Evaluation, best: tuple[int, int, int], limit: int) -> list[tuple[int, int, int, int]]:
    """Next-best (config, variant, spot, region): the chosen machine in its other regions and on the other pricing,
    then other machines, one entry per (machine, spot), best first."""
    if limit <= 0:
        return []
    bc, bv, bs = best
    options: list[tuple[float, float, int, int, int, int]] = []
    primary = ev.primary.min(axis=1)  # [config, spot]
    variant = ev.primary.argmin(axis=1)
    flat = primary.ravel()
    take = min(limit + 1, flat.size)
    for i in np.argpartition(flat, take - 1)[:take]:
        c, s = divmod(int(i), primary.shape[1])
        if not np.isfinite(flat[i]) or (c, s) == (bc, bs):
            continue
        v = int(variant[c, s])
        options.append((float(ev.primary[c, v, s]), float(ev.secondary[c, v, s]), c, v, s, int(ev.region[c, v, s])))
    space, server = ev.space, int(VARIANT_SERVER[bv])
    hours = float(ev.hours[bc, bv, bs])
    for j in range(len(space.regions)):
        if j == ev.region[bc, bv, bs] or not (ev.limits.region_mask[j] and space.offered[bc, j]):
            continue
        if not space.quota_ok[bc, j, bs, server]:
            continue
        cost = hours * float(space.price[bc, j, bs, server])
        if ev.limits.budget_usd > 0 and cost > ev.limits.budget_usd:
            continue
        key = (hours, cost) if ev.limits.fastest else (cost, hours)
        options.append((*key, bc, bv, bs, j))
    options.sort(key=lambda o: (o[0], o[1]))
    return [(c, v, s, r) for _, _, c, v, s, r in options[:limit]]


def plan_request(request: PlanInput, config: PlannerConfig | None = None, *, now: datetime | None = None
                 ) -> PlanOutcome:
    """Plan one request. Raises PlanInputError when the request itself cannot be planned (unknown preset...)."""
    config = config or PlannerConfig()
    now = now or datetime.now(UTC)
    catalog = config.catalog or load_catalog()
    space = space_for(catalog, config.quotas or load_quotas(), config.default_region)
    work = build_workload(request, catalog.assumptions)
    limits = build_limits(space, request, now, config.max_job_hours)
    ev = evaluate(space, work, limits)
    objective = objective_text(request, limits)
    best = ev.best()
    if best is None:
        return PlanOutcome(plan=None, fallbacks=(), rejection=rejection_text(ev, request, now, config.max_job_hours),
                           objective=objective, evaluation=ev)
    order, v, s = representatives(ev)
    alternatives = []
    for c in order[: config.max_alternatives + 1]:
        c = int(c)
        if c != best[0]:
            alternatives.append(candidate(ev, c, int(v[c]), int(s[c]), best))
    alternatives = alternatives[: config.max_alternatives]
    plan = build_plan(ev, best, int(ev.region[best]), objective, alternatives, considered=len(space.configs))
    fallbacks = tuple(
        build_plan(ev, (c, fv, fs), region, f"fallback {i + 1} after the chosen plan; {objective}", (), 0)
        for i, (c, fv, fs, region) in enumerate(_fallbacks(ev, best, config.max_fallbacks))
    )
    return PlanOutcome(plan=plan, fallbacks=fallbacks, rejection=None, objective=objective, evaluation=ev)
