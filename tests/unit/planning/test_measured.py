"""Plans that learn: measured figures over the model (functions/planning/measured.py, calibration.py)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from functions.planning import MeasuredFigures, PlanInput, PlanInputError, plan_input_from_request, plan_request
from functions.planning.calibration import measured_variant
from functions.planning.space import DATA_VARIANTS, VARIANT_PIPELINE, VARIANT_SERVER, VARIANT_STRATEGY, VARIANT_TENSOR
from schemas.plan import Plan
from schemas.vocabulary import STRATEGIES
from tests.unit.planning.outcomes import chosen
from tests.unit.planning.test_layouts import CASES as LAYOUT_CASES

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
LM = PlanInput(task="causal-lm", preset="gpt-124m", dataset_bytes=10**9, epochs=1, batch_size=64, prefer="cheapest")


def _on(plan: Plan, **figures: Any) -> MeasuredFigures:
    base = MeasuredFigures(
        workload="wl-test",
        machine_type=plan.machine_type,
        accelerator_type=plan.accelerator_type or "",
        accelerator_count=plan.accelerator_count,
        nodes=plan.replica_count,
        step_seconds=1.0,
        run_id="run-1",
    )
    return dataclasses.replace(base, **figures)


def test_no_measurements_plan_exactly_as_the_model_does():
    assert chosen(plan_request(LM, now=NOW, measured=())).to_dict() == chosen(plan_request(LM, now=NOW)).to_dict()


def test_a_measured_step_and_startup_replace_the_models_on_the_shape_they_were_measured_on():
    model = chosen(plan_request(LM, now=NOW))
    step = model.estimated_step_time_seconds * 3.0
    learned = plan_request(LM, now=NOW, measured=[_on(model, step_seconds=step, startup_seconds=42.0)])
    ev = learned.evaluation
    c = next(
        i
        for i, cfg in enumerate(ev.space.configs)
        if (cfg.shape.machine_type, cfg.shape.accelerator_count, cfg.nodes)
        == (model.machine_type, model.accelerator_count, model.replica_count)
    )
    assert ev.step[c, 0] == pytest.approx(step)
    assert ev.hours[c, 0, 0] == pytest.approx((42.0 + ev.workload.steps * step) / 3600.0)
    plan = chosen(learned)
    notes = "\n".join(plan.assumptions)
    if plan.machine_type == model.machine_type:
        assert "measured: step time" in notes and "measured: startup 42 s" in notes
    assert "modelled: memory" in notes
    assert not any(a.startswith("startup 300") for a in plan.assumptions)


def test_other_machines_keep_the_models_ratios_to_the_measured_one():
    model = plan_request(LM, now=NOW)
    plan = chosen(model)
    learned = plan_request(LM, now=NOW, measured=[_on(plan, step_seconds=plan.estimated_step_time_seconds * 2.0)])
    before, after = model.evaluation.step, learned.evaluation.step
    ok = np.isfinite(before) & (before > 0)
    np.testing.assert_allclose(after[ok], 2.0 * before[ok], rtol=1e-9)


def test_a_slower_measured_step_can_move_the_plan_to_another_machine_and_the_plan_says_so():
    model = chosen(plan_request(LM, now=NOW))
    learned = chosen(plan_request(LM, now=NOW, measured=[_on(model, step_seconds=model.estimated_step_time_seconds)]))
    assert learned.estimated_step_time_seconds == pytest.approx(model.estimated_step_time_seconds)
    slow = plan_request(LM, now=NOW, measured=[_on(model, step_seconds=model.estimated_step_time_seconds * 50)])
    assert chosen(slow).estimated_hours > model.estimated_hours
    assert any(a.startswith("measured") for a in chosen(slow).assumptions)


def test_figures_on_a_shape_the_planner_does_not_know_change_nothing():
    model = chosen(plan_request(LM, now=NOW))
    unknown = dataclasses.replace(_on(model), machine_type="z9-nothing-1")
    assert chosen(plan_request(LM, now=NOW, measured=[unknown])).to_dict() == model.to_dict()


def test_the_newest_figure_on_a_shape_wins():
    model = chosen(plan_request(LM, now=NOW))
    old = _on(model, step_seconds=9.0, measured_at="2026-11-01T00:00:00Z", run_id="old")
    new = _on(model, step_seconds=0.5, measured_at="2026-11-02T00:00:00Z", run_id="new")
    for order in ([old, new], [new, old]):
        ev = plan_request(LM, now=NOW, measured=order).evaluation
        figures = ev.workload.calibration.figures if ev.workload.calibration else ()
        assert [f.run_id for _, f, _ in figures] == ["new"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"workload": ""}, "no workload key"),
        ({"machine_type": ""}, "no machine type"),
        ({"source": "guess"}, "not one of canary, run"),
        ({"step_seconds": -1.0}, "step_seconds must be a finite number"),
        ({"step_seconds": float("nan")}, "step_seconds must be a finite number"),
        ({"nodes": 0}, "nodes must be >= 1"),
        ({"tensor_parallel": 0}, "tensor_parallel must be >= 1"),
        ({"pipeline_parallel": 0}, "pipeline_parallel must be >= 1"),
        ({"accelerator_type": "NVIDIA_L4", "accelerator_count": 0}, "CPU-only machines give neither"),
    ],
)
def test_bad_figures_are_refused_with_what_was_expected(change, words):
    base = {"workload": "wl", "machine_type": "n2-standard-8"}
    with pytest.raises(PlanInputError, match=words):
        MeasuredFigures(**{**base, **change})


def _tabular(extra: dict[str, str] | None = None, task: str = "tabular-classification") -> dict[str, Any]:
    return {
        "task": task,
        "model": {"preset": "mlp-small"},
        "dataset": {"total_bytes": 48_213, "object_count": 4},
        "hyperparameters": {"epochs": 10, "batch_size": 64, "extra": extra or {}},
    }


def test_the_built_in_trainers_min_steps_floor_is_planned_in_whole_epochs():
    """The trainer adds epochs until a tabular run takes min_steps (trainer/sizing.py): the planner counts them, or
    a measured step time would be multiplied by too few steps."""
    assert plan_input_from_request(_tabular()).min_steps == 300  # the trainer's default (schemas/trainer_flags.py)
    assert plan_input_from_request(_tabular({"min_steps": "0"})).min_steps == 0
    assert plan_input_from_request(_tabular(task="causal-lm")).min_steps == 0
    floor = plan_request(plan_input_from_request(_tabular()), now=NOW).evaluation.workload
    plain = plan_request(plan_input_from_request(_tabular({"min_steps": "0"})), now=NOW).evaluation.workload
    per_epoch = plain.steps // 10
    assert plain.steps == 10 * per_epoch and floor.steps == per_epoch * -(-300 // per_epoch) >= 300


def test_past_runs_step_counts_correct_the_models_count_for_the_workloads_data():
    model = plan_request(LM, now=NOW)
    plan = chosen(model)
    counted = _on(plan, step_seconds=0.0, startup_seconds=0.0, steps=300, modelled_steps=200)
    learned = plan_request(LM, now=NOW, measured=[counted])
    work = learned.evaluation.workload
    assert work.modelled_steps == model.evaluation.workload.steps
    assert work.steps == round(model.evaluation.workload.steps * 1.5)
    notes = "\n".join(chosen(learned).assumptions)
    assert f"measured: steps {work.steps:,} = the model's {work.modelled_steps:,} x1.5" in notes
    assert "modelled: step time" in notes


LAYOUT_70B = LAYOUT_CASES["70b_four_h100_machines"]  # planned tensor parallel 8 x 4 pipeline stages


def test_a_step_measured_under_a_layout_is_compared_with_that_layouts_modelled_step():
    model = plan_request(LAYOUT_70B, now=NOW)
    plan = chosen(model)
    assert (plan.strategy, plan.tensor_parallel, plan.pipeline_parallel) == ("fsdp", 8, 4)
    (c,) = range(len(model.evaluation.space.configs))
    # the comparison this guards against: FSDP alone on the same machines is modelled at another step
    fsdp_alone = float(model.evaluation.step[c, measured_variant("fsdp")])
    assert fsdp_alone != pytest.approx(plan.estimated_step_time_seconds, rel=0.01)
    step = plan.estimated_step_time_seconds * 1.5
    laid = _on(plan, step_seconds=step, strategy="fsdp", tensor_parallel=8, pipeline_parallel=4, global_batch=64)
    learned = plan_request(LAYOUT_70B, now=NOW, measured=[laid])
    cal = learned.evaluation.workload.calibration
    assert cal is not None and cal.measured_configs == {c}
    assert cal.step_scale[c] == pytest.approx(1.5, rel=1e-6)
    again = chosen(learned)
    assert (again.tensor_parallel, again.pipeline_parallel) == (8, 4)
    assert again.estimated_step_time_seconds == pytest.approx(step, rel=1e-6)
    assert any("under tensor parallel 8 x 4 pipeline stages" in a for a in again.assumptions)
    # the same step read as measured without a layout is a ratio against FSDP alone
    unlaid = plan_request(
        LAYOUT_70B, now=NOW, measured=[dataclasses.replace(laid, tensor_parallel=1, pipeline_parallel=1)]
    )
    assert unlaid.evaluation.workload.calibration is not None
    assert unlaid.evaluation.workload.calibration.step_scale[c] == pytest.approx(step / fsdp_alone, rel=1e-6)


def test_the_measured_variant_is_the_strategys_under_its_layout_else_its_data_parallel_one():
    assert measured_variant("") == measured_variant("ddp") == 0
    v = measured_variant("fsdp", 8, 4)
    assert v >= DATA_VARIANTS and (VARIANT_TENSOR[v], VARIANT_PIPELINE[v], VARIANT_SERVER[v]) == (8, 4, 0)
    assert STRATEGIES[VARIANT_STRATEGY[v]] == "fsdp"
    fsdp = measured_variant("fsdp")
    assert fsdp < DATA_VARIANTS and (VARIANT_TENSOR[fsdp], VARIANT_PIPELINE[fsdp]) == (1, 1)
    # an evaluation searched over the data-parallel variants alone, or a layout the planner does not weigh: no
    # variant to compare with (-1); a strategy no layout runs under: its data-parallel variant
    assert measured_variant("fsdp", 8, 4, variants=DATA_VARIANTS) == -1
    assert measured_variant("fsdp", 3, 1) == -1
    assert measured_variant("ddp", 8, 4) == 0


def test_a_layout_measured_for_work_searched_without_layouts_says_nothing_of_its_step():
    tabular = plan_input_from_request(_tabular())
    pinned = dataclasses.replace(tabular, machine_type="a3-highgpu-8g", replica_count=1)
    model = plan_request(pinned, now=NOW)
    ev = model.evaluation
    assert ev.variants == DATA_VARIANTS
    (c,) = range(len(ev.space.configs))
    plan = chosen(model)
    modelled = float(ev.step[c, measured_variant("fsdp")])
    laid = _on(plan, step_seconds=modelled * 2.0, strategy="fsdp", tensor_parallel=8, global_batch=64)
    cal = plan_request(pinned, now=NOW, measured=[laid]).evaluation.workload.calibration
    # no variant of this evaluation ran that layout: its step is not compared with another's (its start-up is used)
    assert cal is not None and cal.step_scale[c] == 1.0


def test_a_layout_s_step_does_not_calibrate_a_plan_pinned_without_that_layout():
    plan = chosen(plan_request(LAYOUT_70B, now=NOW))
    laid = _on(
        plan,
        step_seconds=plan.estimated_step_time_seconds,
        strategy="fsdp",
        tensor_parallel=8,
        pipeline_parallel=4,
        global_batch=64,
    )
    unpinned = dataclasses.replace(LAYOUT_70B, tensor_parallel=1, pipeline_parallel=1)
    alone = chosen(plan_request(unpinned, now=NOW))
    measured = chosen(plan_request(unpinned, now=NOW, measured=[laid]))
    # the layout's 20.6 s is no measure of FSDP alone's 29.8 s on the same machines: the step stays the model's
    assert (measured.tensor_parallel, measured.pipeline_parallel) == (1, 1)
    assert measured.estimated_step_time_seconds == pytest.approx(alone.estimated_step_time_seconds, rel=1e-9)
