"""A plan shows its time model (functions/planning/model_figures.py): samples per second per GPU, the MFU its
estimate implies, and where its step time came from, for the chosen plan and each alternative; `landfall plan`
prints them."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from functions.planning import MeasuredFigures, plan_request
from landfall.cli import main as landfall
from schemas.plan import parse_plan
from tests.unit.planning.outcomes import chosen, pinned

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "custom_jobs"


def test_the_mfu_is_the_plan_s_own_throughput_over_the_gpu_s_peak() -> None:
    plan = chosen(plan_request(pinned("a3-highgpu-8g"), now=NOW))
    gpus = plan.accelerator_count * plan.replica_count
    rate = plan.global_batch_size / plan.estimated_step_time_seconds / gpus
    assert plan.samples_per_second_per_gpu == pytest.approx(rate, rel=1e-4)
    assert plan.mfu is not None and 0.05 < plan.mfu < 0.6
    assert plan.figures_from == "model: measured points on H100 80GB"
    assert parse_plan(json.loads(json.dumps(plan.to_dict()))) == plan
    unpinned = dataclasses.replace(pinned("a3-highgpu-8g"), machine_type="", accelerator_count=0, replica_count=0)
    free = chosen(plan_request(unpinned, now=NOW))
    shown = [a for a in free.alternatives if a.estimated_hours]
    assert len(shown) >= 3 and all(a.figures_from.startswith("model: ") and a.mfu for a in shown)
    assert all(a.p90_hours is not None and a.p90_hours >= a.estimated_hours for a in shown)  # type: ignore[operator]
    assert parse_plan(json.loads(json.dumps(free.to_dict()))) == free


def test_a_measured_run_on_the_shape_is_named_and_its_mfu_follows_the_measured_step() -> None:
    request = pinned("a2-highgpu-1g")
    model = chosen(plan_request(request, now=NOW))
    figure = MeasuredFigures(
        workload="wl-test",
        machine_type=model.machine_type,
        accelerator_type=model.accelerator_type or "",
        accelerator_count=model.accelerator_count,
        step_seconds=model.estimated_step_time_seconds * 2.0,
        run_id="run-1",
    )
    learned = chosen(plan_request(request, now=NOW, measured=[figure]))
    assert model.figures_from.startswith("model: a prior for A100")
    assert learned.figures_from == "measured: run run-1 on this shape"
    assert model.mfu is not None and learned.mfu == pytest.approx(model.mfu / 2.0, rel=1e-3)
    assert learned.samples_per_second_per_gpu == pytest.approx(model.samples_per_second_per_gpu / 2.0, rel=1e-3)  # type: ignore[operator]


def test_a_cpu_plan_has_no_rate_per_gpu() -> None:
    plan = chosen(plan_request(pinned("n2-standard-8", precision="auto", dataset_bytes=10**6), now=NOW))
    assert plan.samples_per_second_per_gpu is None
    assert plan.mfu is not None and plan.figures_from == "model: the CPU assumption"


def test_landfall_plan_prints_the_model_for_the_plan_and_each_candidate(capsys: pytest.CaptureFixture[str]) -> None:
    assert landfall(["plan", "--measured", "off", str(GOLDEN / "two_nodes_fsdp_a3_ultra.request.json")]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "MACHINE" in line)
    assert all(column in header for column in ("P90 H", "SAMPLES/S/GPU", "MFU", "FIGURES FROM"))
    assert "the time model: " in out and "samples/s per GPU, MFU " in out
    assert "step time from model: measured points on H200" in out


def test_a_pinned_request_measured_on_another_shape_of_its_gpu_kind_is_planned_from_that_ratio() -> None:
    one, two = pinned("g2-standard-12"), pinned("g2-standard-24")
    model_one, model_two = chosen(plan_request(one, now=NOW)), chosen(plan_request(two, now=NOW))
    figure = MeasuredFigures(
        workload="wl-test",
        machine_type="g2-standard-12",
        accelerator_type="NVIDIA_L4",
        accelerator_count=1,
        step_seconds=model_one.estimated_step_time_seconds * 3.0,
        startup_seconds=42.0,
        global_batch=one.batch_size,
        run_id="run-1",
    )
    learned = chosen(plan_request(two, now=NOW, measured=[figure]))
    # the L4's measured ratio (x3) carried to the 2-L4 machine the request pins, with the workload's start-up
    ratio = figure.step_seconds / model_one.estimated_step_time_seconds
    assert learned.estimated_step_time_seconds == pytest.approx(model_two.estimated_step_time_seconds * ratio, rel=1e-3)
    assert learned.figures_from == "model, scaled by this workload's measurements on other shapes"
    assert any("startup 42 s" in a for a in learned.assumptions), learned.assumptions
