"""Learning across workloads (functions/planning/calibration.py, source "similar"): another workload's measured step
beside the model's step for that work corrects this workload's step on the same GPU kind, weighted by how alike the
works are; this workload's own measurements win where they exist."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime

import pytest

from functions.planning import MeasuredFigures, PlanInput, plan_request
from functions.planning.calibration import PRIOR_LIKENESS
from functions.planning.model_step import model_step
from tests.unit.planning.outcomes import chosen

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
H100 = "NVIDIA_H100_80GB"
B = PlanInput(
    task="causal-lm",
    preset="gpt-124m",
    dataset_bytes=10**9,
    epochs=1,
    batch_size=32,
    gpu_allowlist=(H100,),
    max_gpus=1,
    regions=("us-central1",),
    spot="never",
    flex_start="allowed",
)
"""A new workload (gpt-124m at batch 32) pinned to one H100 (Flex-start: it is not sold on demand, and carries no
preemption overhead): nobody measured it."""
A = dataclasses.replace(B, batch_size=16)
"""Work alike (the same model, another batch): measured on the same H100 shape."""


def _similar(inp: PlanInput, ratio: float, run_id: str = "run-a", **changes: object) -> MeasuredFigures:
    """What a run of `inp` measured on one H100: `ratio` x the model's step there."""
    modelled = model_step(inp, "a3-highgpu-1g", 1, 1, "ddp")
    assert modelled.step_seconds > 0
    figure = MeasuredFigures(
        workload=f"wl-{run_id}",
        machine_type="a3-highgpu-1g",
        accelerator_type=H100,
        accelerator_count=1,
        image="landfall-trainer",
        micro_batch=inp.batch_size,
        step_seconds=modelled.step_seconds * ratio,
        run_id=run_id,
        source="similar",
        global_batch=inp.batch_size,
        strategy="ddp",
        measured_at="2026-11-21T10:00:00Z",
        model_step_seconds=modelled.step_seconds,
        flops_per_sample=modelled.flops_per_sample,
        family=modelled.family,
    )
    return dataclasses.replace(figure, **changes)  # type: ignore[arg-type]


def _likeness(a: PlanInput, b_micro: int, a_micro: int) -> float:
    """FLOPs per sample alike (the same model), micro-batches a factor apart, the same family."""
    del a
    return math.exp(-abs(math.log(b_micro / a_micro)) / math.log(4))


def test_similar_work_measured_slower_on_a_gpu_kind_slows_this_work_there_by_likeness() -> None:
    model = chosen(plan_request(B, now=NOW))
    plan = chosen(plan_request(B, measured=[_similar(A, 2.0)], now=NOW))
    # micro-batch 32 against 16: likeness e^(-ln 2 / ln 4) = 1/sqrt(e); the model counts as one alike run
    w = _likeness(A, 32, 16)
    scale = math.exp(w * math.log(2.0) / (PRIOR_LIKENESS + w))
    steps_time = (model.estimated_hours * 3600 - 300.0) * scale + 300.0
    assert plan.estimated_hours * 3600 == pytest.approx(steps_time, rel=1e-6)
    note = next(n for n in plan.assumptions if n.startswith("measured on similar work"))
    assert note.startswith(f"measured on similar work: step time = the model's x{scale:.3g}, from 1 run(s)")
    assert "run-a" in note and f"by likeness {w:.2g}" in note
    assert plan.figures_from == "model, scaled by similar work measured on H100 80GB"


def test_many_alike_runs_settle_the_ratio_and_unalike_work_moves_it_less() -> None:
    alike = [_similar(B, 2.0, run_id=f"run-{i}") for i in range(20)]
    settled = chosen(plan_request(B, measured=alike, now=NOW))
    model = chosen(plan_request(B, now=NOW))
    scale = math.exp(20 * math.log(2.0) / (PRIOR_LIKENESS + 20))
    assert (settled.estimated_hours * 3600 - 300) == pytest.approx((model.estimated_hours * 3600 - 300) * scale)
    # a work 100 x the FLOPs per sample, of another family: likeness e^-2 x 1/2
    far = _similar(B, 2.0, flops_per_sample=_similar(B, 1.0).flops_per_sample * 100, family="mlp")
    moved = chosen(plan_request(B, measured=[far], now=NOW))
    w = math.exp(-2) * 0.5
    assert (moved.estimated_hours * 3600 - 300) == pytest.approx(
        (model.estimated_hours * 3600 - 300) * math.exp(w * math.log(2.0) / (1 + w))
    )


def test_this_workloads_own_measurement_wins_and_other_kinds_are_left_to_the_model() -> None:
    own = dataclasses.replace(_similar(B, 1.5, run_id="run-own"), source="run", workload="wl-b")
    plan = chosen(plan_request(B, measured=[own, _similar(A, 3.0)], now=NOW))
    assert any(n.startswith("measured: step time") and "run-own" in n for n in plan.assumptions)
    assert not any(n.startswith("measured on similar work") for n in plan.assumptions)
    # measured on one kind only, it is planned on every kind from its own ratio, not from other work's
    anywhere = dataclasses.replace(B, gpu_allowlist=(), max_gpus=8)
    outcome = plan_request(anywhere, measured=[own, _similar(A, 3.0)], now=NOW)
    assert not any("similar work" in n for p in (chosen(outcome), *outcome.fallbacks) for n in p.assumptions)
    # a step a team declared for its own code is not corrected by other work, nor evidence of the model's error
    declared = dataclasses.replace(B, preset="", parameters=124_000_000, basis="workload.parameters", step_seconds=0.5)
    assert (
        chosen(plan_request(declared, measured=[_similar(A, 3.0)], now=NOW)).estimated_hours
        == chosen(plan_request(declared, now=NOW)).estimated_hours
    )
    assert model_step(declared, "a3-highgpu-1g", 1, 1, "ddp").step_seconds == 0
    # similar work on an H100 says nothing of an L4
    l4 = dataclasses.replace(B, gpu_allowlist=("NVIDIA_L4",))
    on_l4 = chosen(plan_request(l4, measured=[_similar(A, 3.0)], now=NOW))
    assert on_l4.estimated_hours == chosen(plan_request(l4, now=NOW)).estimated_hours
    assert on_l4.figures_from.startswith("model: ")


def test_a_similar_figure_without_the_models_step_is_not_used() -> None:
    blind = _similar(A, 2.0, model_step_seconds=0.0)
    assert chosen(plan_request(B, measured=[blind], now=NOW)) == chosen(plan_request(B, now=NOW))
    assert chosen(plan_request(B, measured=[blind], now=NOW)).figures_from == "model: measured points on H100 80GB"
