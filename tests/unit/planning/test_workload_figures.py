"""Every kind of model can be described: a request's declared FLOPs and activations per sample, its trainable
parameters and a measured memory figure alone are what the planner sizes with, and the plan says so."""

from __future__ import annotations

import copy
import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from functions.planning import plan_input_from_request, plan_request
from functions.planning.planner import PlanOutcome
from schemas.errors import SchemaError
from schemas.plan import Plan, parse_plan
from schemas.training_request import parse_training_request
from tests.unit.planning import lora_golden

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
IMAGENET_IMAGES = 1_281_167
RESNET50 = {
    "parameters": 25_600_000,
    "samples_per_epoch": IMAGENET_IMAGES,
    "flops_per_sample": 12.3e9,
    "activation_gib_per_sample": 0.1,
}
"""ResNet-50 at 224 x 224: 4.1 GFLOPs forward (He et al. 2016), about 3 x that to train; about 100 MiB of 16-bit
activations per image (docs/trainer-contract.md)."""
ONE_A100 = {"machine_type": "a2-highgpu-1g", "accelerator_count": 1, "replica_count": 1, "spot": "never"}


def own_request(workload: dict[str, Any], constraints: dict[str, Any], batch: int = 256, epochs: int = 90) -> Any:
    return parse_training_request(
        {
            "dataset": {"uri": "gs://landfall-landing/imagenet/"},
            "trainer": {"script": "gs://landfall-code/team/train.py"},
            "workload": workload,
            "hyperparameters": {"batch_size": batch, "epochs": epochs},
            "constraints": constraints,
        }
    )


def outcome(workload: dict[str, Any], constraints: dict[str, Any], batch: int = 256, epochs: int = 90) -> PlanOutcome:
    return plan_request(plan_input_from_request(own_request(workload, constraints, batch, epochs)), now=NOW)


def planned(workload: dict[str, Any], constraints: dict[str, Any], batch: int = 256, epochs: int = 90) -> Plan:
    plan = outcome(workload, constraints, batch, epochs).plan
    assert plan is not None
    return plan


def sizing(plan: Plan) -> list[str]:
    return [line for line in plan.assumptions if line.startswith("sizing:")]


@pytest.mark.parametrize(
    ("workload", "field", "says"),
    [
        ({"flops_per_sample": -1}, "workload.flops_per_sample", ">= 0.0"),
        ({"flops_per_sample": 1e22}, "workload.flops_per_sample", "at most 1e+21 FLOPs per sample"),
        ({"flops_per_sample": "12 GFLOP"}, "workload.flops_per_sample", "expected a number"),
        ({"activation_gib_per_sample": -0.5}, "workload.activation_gib_per_sample", ">= 0.0"),
        ({"activation_gib_per_sample": 5000}, "workload.activation_gib_per_sample", "not a batch or a whole run"),
        ({"trainable_parameters": -3}, "workload.trainable_parameters", ">= 0"),
        ({"trainable_parameters": 1.5}, "workload.trainable_parameters", "expected an integer"),
        (
            {"parameters": 1_000_000, "trainable_parameters": 2_000_000},
            "workload.trainable_parameters",
            "more than workload.parameters (1,000,000)",
        ),
    ],
)
def test_a_figure_out_of_range_is_refused_naming_the_field(workload: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(SchemaError) as caught:
        own_request(workload, {})
    assert caught.value.field == field and says in str(caught.value), str(caught.value)


def test_the_figures_survive_the_canonical_json_form() -> None:
    request = own_request({**RESNET50, "trainable_parameters": 1_000}, {})
    again = parse_training_request(request.to_json())
    assert again.workload == request.workload and again.workload.flops_per_sample == 12.3e9


def test_resnet50_on_imagenet_is_planned_near_its_measured_ten_hours_at_a_micro_batch_that_fits() -> None:
    plan = planned(RESNET50, ONE_A100)
    assert plan.accelerator_type == "NVIDIA_TESLA_A100" and plan.accelerator_count == 1
    assert 10 / 1.5 <= plan.estimated_hours <= 10 * 1.5, plan.estimated_hours
    # The declared 0.1 GiB per image decides the micro-batch: it and the weights fit the usable memory.
    declared_activations = plan.micro_batch_size * 0.1 * 2**30
    assert plan.memory.activations_bytes == pytest.approx(declared_activations)
    assert plan.memory.total_bytes <= plan.memory.usable_bytes
    assert plan.micro_batch_size * plan.gradient_accumulation_steps == 256
    assert sizing(plan) == [
        "sizing: from the declared workload.flops_per_sample (12.3 GFLOP per sample) and "
        "workload.activation_gib_per_sample (0.1 GiB)"
    ]


def test_the_declared_activations_shrink_the_micro_batch_to_what_fits() -> None:
    heavy = planned({**RESNET50, "activation_gib_per_sample": 1.0}, ONE_A100)
    assert heavy.micro_batch_size < 256 and heavy.gradient_accumulation_steps > 1
    assert heavy.memory.total_bytes <= heavy.memory.usable_bytes


def test_the_same_request_without_the_figures_says_how_it_was_sized() -> None:
    bare = {k: v for k, v in RESNET50.items() if k in ("parameters", "samples_per_epoch")}
    plan = planned(bare, ONE_A100)
    (line,) = sizing(plan)
    assert "sized as an MLP from parameters" in line
    assert "because flops_per_sample and activation_gib_per_sample were not given" in line
    assert plan.estimated_hours < planned(RESNET50, ONE_A100).estimated_hours / 5  # what the MLP model misses


def test_one_declared_figure_replaces_its_part_of_the_model_only() -> None:
    plan = planned({**{k: v for k, v in RESNET50.items() if k != "activation_gib_per_sample"}}, ONE_A100)
    (line,) = sizing(plan)
    assert line.startswith("sizing: from the declared workload.flops_per_sample (12.3 GFLOP per sample); ")
    assert "activations sized as an MLP from parameters because activation_gib_per_sample was not given" in line


def test_a_lora_is_planned_on_frozen_weights_plus_the_adapters_training_state() -> None:
    golden = json.loads(lora_golden.GOLDEN.read_text())
    assert lora_golden.document() == golden, "regenerate: python -m tests.unit.planning.lora_golden"
    sums, plan = golden["arithmetic"], golden["plan"]
    assert sums["frozen_weight_bytes_per_gpu"] + sums["trainable_state_bytes_per_gpu"] == sums["model_states_bytes"]
    assert plan["memory"]["model_states_bytes"] == sums["model_states_bytes"]
    assert plan["memory"]["total_bytes"] <= plan["memory"]["usable_bytes"]
    # The same model trained in full needs 140 GB of states per GPU on that machine: no plan.
    assert sums["full_fine_tune_states_bytes"] > plan["memory"]["usable_bytes"]
    full = copy.deepcopy(lora_golden.REQUEST)
    del full["workload"]["trainable_parameters"]
    assert lora_golden.lora_plan(full) is None


def test_a_declared_memory_alone_is_the_memory_figure_with_the_modelled_time() -> None:
    lora = {**lora_golden.REQUEST["workload"], "memory_gib_per_gpu": 70}
    plan = planned(lora, {}, batch=32, epochs=1)
    assert plan.memory.total_bytes == 70 * 2**30 and plan.memory.overhead_bytes >= 0
    assert parse_plan(plan.to_dict()) == plan  # the run record keeps it
    assert plan.estimated_step_time_seconds > 0 and plan.accelerator_type
    assert any("memory per GPU is the declared workload.memory_gib_per_gpu (70 GiB)" in line for line in sizing(plan))
    assert any("measured 70 GiB/GPU" in line for line in plan.assumptions)


def test_a_declared_memory_below_the_frozen_weights_is_rejected_naming_the_fields() -> None:
    lora = {**lora_golden.REQUEST["workload"], "memory_gib_per_gpu": 10}
    found = outcome(lora, lora_golden.REQUEST["constraints"], batch=32, epochs=1)
    assert found.plan is None and found.rejection is not None
    for name in ("workload.memory_gib_per_gpu", "workload.parameters", "workload.trainable_parameters"):
        assert name in found.rejection
    assert "contradict" in found.rejection and "16.3 GiB per GPU" in found.rejection


def test_a_declared_memory_no_gpu_holds_says_so() -> None:
    found = outcome({**RESNET50, "memory_gib_per_gpu": 500}, {})
    assert found.plan is None and found.rejection is not None
    assert "workload.memory_gib_per_gpu (500 GiB) is more than any GPU holds" in found.rejection


def test_trainable_parameters_above_the_preset_s_count_are_refused_by_the_dispatcher() -> None:
    from functions.dispatch.request_rules import trainable_problems

    request = parse_training_request(
        {
            "dataset": {"uri": "gs://landfall-landing/text/"},
            "trainer": {"script": "gs://landfall-code/team/train.py"},
            "model": {"preset": "gpt-124m"},
            "workload": {"trainable_parameters": 10**12},
        }
    )
    (problem,) = trainable_problems(request)
    assert problem.startswith("workload.trainable_parameters: 1,000,000,000,000 is more than the")
    assert trainable_problems(parse_training_request({**json.loads(request.to_json()), "workload": {}})) == []


def test_a_what_if_plan_of_a_preset_uses_the_declared_figures_too() -> None:
    from functions.planning import PlanInput

    base = PlanInput(task="causal-lm", preset="gpt-7b", dataset_bytes=10**8, batch_size=32)
    full = plan_request(base, now=NOW).plan
    lora = plan_request(dataclasses.replace(base, trainable_parameters=10_000_000), now=NOW).plan
    assert full is not None and lora is not None
    assert not sizing(full) and any("10,000,000 trainable parameters" in line for line in sizing(lora))
    assert lora.memory.model_states_bytes < full.memory.model_states_bytes


def test_measured_memory_and_step_time_are_what_the_plan_says_it_sized_with() -> None:
    plan = planned({"parameters": 1_000_000, "memory_gib_per_gpu": 2, "step_seconds": 0.1}, {}, batch=32, epochs=1)
    assert sizing(plan) == [
        "sizing: memory and step time measured (workload.memory_gib_per_gpu, workload.step_seconds): they replace "
        "the memory and time models"
    ]
