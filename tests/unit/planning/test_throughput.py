"""The throughput model (functions/planning/throughput.py): it reproduces what was measured, it is monotone in the
work per step, it never rates a kind nobody measured above the best measured one, and a plan pinned to a measured
configuration promises what that configuration measured."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.estimates import NOW, TOLERANCE, estimates, pinned_shape, request_for
from functions.planning import plan_request
from functions.planning.catalog import load_catalog
from functions.planning.throughput import ThroughputError, hinge_terms, isotonic, mfu_at, point_mfu
from schemas.throughput_points import load_throughput_points
from tests.unit.planning.outcomes import chosen

OVERHEAD = load_catalog().assumptions.compute.gpu_step_overhead_seconds


def _measured_kinds() -> set[str]:
    return {p.accelerator_type for p in load_throughput_points().points}


@pytest.mark.parametrize("point", load_throughput_points().points, ids=lambda p: f"{p.accelerator_type}-{p.describe()}")
def test_the_fit_reproduces_each_measured_point_within_25_percent(point) -> None:
    catalog = load_catalog()
    measured = point_mfu(point, catalog.gpus[point.accelerator_type], OVERHEAD)
    fitted = catalog.throughput.mfu(point.accelerator_type, point.work_per_step)
    assert fitted == pytest.approx(measured, rel=TOLERANCE)


def test_a_point_s_mfu_is_its_flops_over_the_peak_during_its_step_less_the_overhead() -> None:
    point = next(p for p in load_throughput_points().points if p.model == "gpt-124m" and p.micro_batch == 16)
    step = 16 / 152.77 - OVERHEAD
    assert point_mfu(point, load_catalog().gpus["NVIDIA_H100_80GB"], OVERHEAD) == pytest.approx(
        16 * 875_681_021_952 / (989e12 * step), rel=1e-12
    )
    with pytest.raises(ThroughputError, match="is not above the planner's 1 s overhead per step"):
        point_mfu(point, load_catalog().gpus["NVIDIA_H100_80GB"], 1.0)


def test_every_curve_is_monotone_and_flat_beyond_the_measured_works() -> None:
    model = load_catalog().throughput
    low, high = math.exp(model.log_work[0]), math.exp(model.log_work[-1])
    for kind, curve in model.curves.items():
        assert all(b >= a for a, b in zip(curve.mfu, curve.mfu[1:], strict=False)), kind
        assert model.mfu(kind, low / 100) == curve.mfu[0] and model.mfu(kind, high * 100) == curve.mfu[-1]


def test_an_unmeasured_kind_is_never_rated_above_the_best_measured_kind() -> None:
    catalog = load_catalog()
    model = catalog.throughput
    measured = _measured_kinds()
    assert measured and set(model.curves) == set(catalog.gpus)
    works = np.exp(np.linspace(model.log_work[0] - 2, model.log_work[-1] + 2, 50))
    for kind, curve in model.curves.items():
        if kind in measured:
            assert curve.measured and "measured points on" in curve.basis
            continue
        assert not curve.measured and curve.basis.startswith("prior: nothing measured on ")
        for work in works:
            best = max(model.mfu(m, work) for m in measured)
            assert 0 < model.mfu(kind, work) <= best + 1e-15, (kind, work)


def test_a_prior_keeps_the_assumed_standing_of_its_kind() -> None:
    """B200 (assumed 0.30) sits below the H100 (0.35) by that ratio where the measured curves allow it."""
    model = load_catalog().throughput
    work = math.exp(model.log_work[0])
    h100, h200 = model.mfu("NVIDIA_H100_80GB", work), model.mfu("NVIDIA_H200_141GB", work)
    expected = math.sqrt(h100 * 0.30 / 0.35 * h200 * 0.30 / 0.38)
    assert model.mfu("NVIDIA_B200", work) == pytest.approx(expected, rel=1e-12)


def test_isotonic_pools_violators_into_their_weighted_mean() -> None:
    assert isotonic([1.0, 3.0, 2.0, 4.0], [1, 1, 1, 1]) == [1.0, 2.5, 2.5, 4.0]
    assert isotonic([3.0, 1.0], [1, 3]) == [1.5, 1.5]
    assert isotonic([1.0, 2.0], [1, 1]) == [1.0, 2.0]


def test_the_vectorised_interpolation_is_np_interp_per_row() -> None:
    grid = np.log(np.array([1.0, 10.0, 100.0]))
    rows = np.array([[0.1, 0.2, 0.4], [0.05, 0.05, 0.3]])
    log_work = np.log(np.array([[0.5, 5.0], [50.0, 1000.0], [10.0, 1.0]]))
    got = mfu_at(grid, *hinge_terms(grid, rows), log_work)
    for v in range(3):
        for c in range(2):
            assert got[v, c] == pytest.approx(np.interp(log_work[v, c], grid, rows[c]))


@pytest.mark.parametrize("point", load_throughput_points().points, ids=lambda p: f"{p.accelerator_type}-{p.describe()}")
def test_a_plan_pinned_to_a_measured_configuration_promises_its_samples_per_second(point) -> None:
    """Done when: for every measured point the planned samples/s is within 25 % of the measured figure."""
    catalog = load_catalog()
    shape = pinned_shape(catalog, point)
    plan = chosen(plan_request(request_for(point, shape), now=NOW))
    assert plan.micro_batch_size == point.micro_batch
    per_gpu = plan.global_batch_size / plan.estimated_step_time_seconds / (plan.accelerator_count * plan.replica_count)
    assert per_gpu == pytest.approx(point.samples_per_second / point.gpus, rel=TOLERANCE)
    (note,) = [a for a in plan.assumptions if a.startswith(f"{catalog.gpus[point.accelerator_type].display}: ")]
    assert "measured points on" in note and "schemas/data/throughput_points.json" in note


def test_the_bench_table_agrees_with_the_tests() -> None:
    rows = estimates()
    assert len(rows) == len(load_throughput_points().points) and all(r.within for r in rows)


def test_an_unmeasured_kind_s_plan_says_it_rests_on_a_prior() -> None:
    point = load_throughput_points().points[0]
    catalog = load_catalog()
    shape = next(s for s in catalog.shapes if s.accelerator_type == "NVIDIA_TESLA_A100" and s.accelerator_count == 1)
    inp = request_for(point, shape)
    plan = chosen(plan_request(inp, now=NOW))
    (note,) = [a for a in plan.assumptions if a.startswith("A100 40GB: ")]
    assert "prior: nothing measured on A100 40GB" in note and "never above the best measured" in note
