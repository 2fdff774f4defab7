"""An estimate is a range (functions/planning/bands.py): narrow on a GPU kind with measured points, narrower still
on a shape the workload was measured on, wide on a prior; a deadline or budget met only at p50 is said; the timeout
derives from the p90."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from functions.planning import MeasuredFigures, plan_request
from functions.planning.catalog import load_catalog
from schemas.errors import SchemaError
from schemas.plan import Plan, parse_plan
from tests.unit.planning.outcomes import chosen, pinned

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
BAND = load_catalog().assumptions.band
STARTUP = load_catalog().assumptions.job.startup_seconds


def _width(plan: Plan) -> float:
    return plan.p90_hours / plan.estimated_hours - 1.0


@pytest.mark.parametrize("machine_type", ["a3-highgpu-1g", "a3-highgpu-8g"])
def test_the_band_is_the_fit_s_error_on_a_measured_kind(machine_type: str) -> None:
    plan = chosen(plan_request(pinned(machine_type), now=NOW))
    curve = load_catalog().throughput.curves["NVIDIA_H100_80GB"]
    assert curve.measured and curve.error is not None
    assert _width(plan) == pytest.approx(max(curve.error, BAND.floor), rel=1e-4)
    assert BAND.floor <= _width(plan) < 0.3
    assert "measured H100" in plan.band_basis
    assert plan.p90_cost_usd == pytest.approx(plan.p90_hours * plan.hourly_cost_usd, rel=1e-6)


@pytest.mark.parametrize("machine_type", ["a2-highgpu-1g", "n1-standard-8"])
def test_the_band_is_wide_on_a_prior_kind_and_on_cpu(machine_type: str) -> None:
    plan = chosen(plan_request(pinned(machine_type, precision="auto"), now=NOW))
    assert _width(plan) == pytest.approx(BAND.prior, rel=1e-4)
    assert "+100%" in plan.band_basis


def test_a_measured_run_on_the_shape_narrows_the_band_to_the_floor() -> None:
    request = pinned("a2-highgpu-1g")
    model = chosen(plan_request(request, now=NOW))
    figure = MeasuredFigures(
        workload="wl-test",
        machine_type=model.machine_type,
        accelerator_type=model.accelerator_type or "",
        accelerator_count=model.accelerator_count,
        step_seconds=model.estimated_step_time_seconds * 1.3,
        run_id="run-1",
    )
    learned = chosen(plan_request(request, now=NOW, measured=[figure]))
    assert _width(model) == pytest.approx(BAND.prior, rel=1e-4)
    assert _width(learned) == pytest.approx(BAND.floor, rel=1e-4)
    assert "measured on this machine shape" in learned.band_basis


def _limits_between_p50_and_p90(plan: Plan) -> tuple[datetime, float]:
    hours = (plan.estimated_hours + plan.p90_hours) / 2
    return NOW + timedelta(hours=hours), hours * plan.hourly_cost_usd


def test_a_deadline_met_only_at_p50_is_said_and_one_missed_at_p50_is_no_plan() -> None:
    free = chosen(plan_request(pinned("a2-highgpu-1g"), now=NOW))
    deadline, _ = _limits_between_p50_and_p90(free)
    plan = chosen(plan_request(pinned("a2-highgpu-1g", deadline=deadline), now=NOW))
    said = [r for r in plan.reasons if r.startswith("deadline met at p50 only")]
    assert said and "at p90" in said[0]
    safe = NOW + timedelta(hours=free.p90_hours * 1.01)
    assert not any(
        "met at p50 only" in r for r in chosen(plan_request(pinned("a2-highgpu-1g", deadline=safe), now=NOW)).reasons
    )
    early = NOW + timedelta(hours=free.estimated_hours * 0.9)
    assert plan_request(pinned("a2-highgpu-1g", deadline=early), now=NOW).plan is None


def test_a_budget_met_only_at_p50_is_said() -> None:
    free = chosen(plan_request(pinned("a2-highgpu-1g"), now=NOW))
    _, budget = _limits_between_p50_and_p90(free)
    plan = chosen(plan_request(pinned("a2-highgpu-1g", budget_usd=budget), now=NOW))
    assert any(r.startswith("budget met at p50 only") for r in plan.reasons)


@pytest.mark.parametrize(
    ("machine_type", "epochs"), [("a3-highgpu-8g", 20), ("a2-highgpu-1g", 2), ("a2-highgpu-1g", 20)]
)
def test_the_timeout_is_the_p90_plus_one_start_up_at_least_30_minutes_at_most_7_days(
    machine_type: str, epochs: int
) -> None:
    plan = chosen(plan_request(pinned(machine_type, epochs=epochs), now=NOW))
    job = load_catalog().assumptions.job
    expected = min(max(plan.p90_hours * 3600 + STARTUP, job.min_timeout_seconds), 7 * 24 * 3600)
    assert plan.timeout_seconds == pytest.approx(expected, abs=2)
    assert any("p90 + 5 min for one restart's start-up" in r for r in plan.reasons)
    beyond = plan.p90_hours > load_catalog().assumptions.job.max_job_hours
    assert beyond == any(r.startswith("job time limit met at p50 only") for r in plan.reasons)


def test_a_plan_stored_before_estimates_were_ranges_reads_back_with_its_estimate_as_the_band() -> None:
    plan = chosen(plan_request(pinned("a3-highgpu-1g"), now=NOW))
    stored = plan.to_dict()
    assert {"p90_hours", "p90_cost_usd", "band_basis"} <= set(stored)
    assert parse_plan(stored) == plan
    old = {k: v for k, v in stored.items() if k not in {"p90_hours", "p90_cost_usd", "band_basis"}}
    read = parse_plan(old)
    assert read.p90_hours == 0 and read.p90_hours_or_estimate == read.estimated_hours
    assert read.p90_cost_or_estimate == read.estimated_cost_usd and read.to_dict() == old


def test_a_p90_below_the_p50_is_refused_naming_the_field() -> None:
    stored = chosen(plan_request(pinned("a3-highgpu-1g"), now=NOW)).to_dict()
    stored["p90_hours"] = stored["estimated_hours"] / 2
    with pytest.raises(SchemaError, match=r"p90_hours .* is below the p50") as refused:
        parse_plan(stored)
    assert refused.value.field == "plan.p90_hours"


def test_an_own_model_nobody_described_is_wide_and_a_declared_one_is_not() -> None:
    own = pinned("a3-highgpu-1g", preset="", parameters=124_000_000, basis="workload.parameters")
    undescribed = chosen(plan_request(own, now=NOW))
    assert _width(undescribed) == pytest.approx(BAND.prior, rel=1e-4)
    assert "workload.flops_per_sample" in undescribed.band_basis
    declared = chosen(plan_request(dataclasses.replace(own, flops_per_sample=1e12), now=NOW))
    assert BAND.floor <= _width(declared) < BAND.prior
