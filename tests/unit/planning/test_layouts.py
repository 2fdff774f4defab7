"""Model-parallel layouts in the planner: tensor parallelism inside a machine and pipeline stages across machines are
chosen where they beat sharding alone (a 70B model on four 8-GPU H100 machines at 200 Gbps), not where they do not
pay (a 1.3B model on one machine), never for code that does not say it runs them, and each plan says why with its
arithmetic. The golden (tests/unit/golden/planner/layouts.json) holds the figures; regenerate after a deliberate
change with `python -m tests.unit.planning.test_layouts`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from functions.planning import PlanInputError, plan_request
from functions.planning.catalog import load_catalog
from functions.planning.inputs import PlanInput, plan_input_from_request
from functions.planning.layouts import activation_shares, supported
from functions.planning.model_parallel import pipeline_bubble
from functions.planning.planner import PlanOutcome
from functions.planning.space import DATA_VARIANTS, VARIANT_PIPELINE, VARIANT_TENSOR
from functions.planning.workload import build_workload
from schemas.errors import SchemaError
from schemas.plan import parse_plan
from schemas.training_request import parse_training_request
from tests.unit.planning.decisions import NOW

GOLDEN = Path(__file__).parents[1] / "golden" / "planner" / "layouts.json"
CASES: dict[str, PlanInput] = {
    # 70B on four a3-highgpu-8g: 8 H100 on NVLink each, 200 Gbps between machines for a custom job
    "70b_four_h100_machines": PlanInput(
        task="causal-lm",
        preset="gpt-70b",
        dataset_bytes=2 * 10**9,
        batch_size=64,
        machine_type="a3-highgpu-8g",
        replica_count=4,
        prefer="fastest",
    ),
    "1.3b_one_h100_machine": PlanInput(
        task="causal-lm",
        preset="gpt-1.3b",
        dataset_bytes=2 * 10**9,
        batch_size=64,
        machine_type="a3-highgpu-8g",
        replica_count=1,
        prefer="fastest",
    ),
}


def _outcome(name: str) -> PlanOutcome:
    return plan_request(CASES[name], now=NOW)


def _summary(outcome: PlanOutcome) -> dict[str, Any]:
    plan = outcome.plan
    assert plan is not None, outcome.rejection
    return {
        "strategy": plan.strategy,
        "tensor_parallel": plan.tensor_parallel,
        "pipeline_parallel": plan.pipeline_parallel,
        "data_parallel": plan.data_parallel,
        "micro_batch_size": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.gradient_accumulation_steps,
        "activation_checkpointing": plan.activation_checkpointing,
        "estimated_step_time_seconds": round(plan.estimated_step_time_seconds, 4),
        "estimated_hours": round(plan.estimated_hours, 4),
        "memory_total_gb": round(plan.memory.total_bytes / 1e9, 2),
        "layout": next(r for r in plan.reasons if r.startswith("layout: ")),
        "batch": next(r for r in plan.reasons if r.startswith("batch: ")),
    }


def _variant(tensor: int, pipeline: int) -> int:
    return int(np.flatnonzero((tensor == VARIANT_TENSOR) & (pipeline == VARIANT_PIPELINE))[-1])


def test_the_golden_layouts_are_the_planner_s() -> None:
    golden = json.loads(GOLDEN.read_text())
    assert {name: _summary(_outcome(name)) for name in CASES} == golden, (
        "planner output changed: run `python -m tests.unit.planning.test_layouts` if deliberate"
    )


def test_70b_on_four_machines_takes_tensor_parallel_inside_and_pipeline_stages_across() -> None:
    outcome = _outcome("70b_four_h100_machines")
    plan = outcome.plan
    assert plan is not None
    assert plan.tensor_parallel == 8 and plan.pipeline_parallel == 4 and plan.data_parallel == 1
    ev, (c, v, s) = outcome.evaluation, outcome.evaluation.best() or (0, 0, 0)
    fsdp = 4  # vocabulary order: ddp, ddp + server, zero1, zero2, fsdp (data parallel over all 32 GPUs)
    assert ev.reason[c, fsdp, s] == 0, "FSDP across the machines must be a real alternative"
    assert ev.step[c, v] < ev.step[c, fsdp] and ev.hours[c, v, s] < ev.hours[c, fsdp, s]
    layout = next(r for r in plan.reasons if r.startswith("layout: "))
    # the arithmetic, both sides: compute with the bubble, the layout's traffic, against FSDP's step and gradients
    assert "tensor parallel 8 inside each machine x 4 pipeline stages across machines" in layout
    assert "1F1B bubble" in layout and "tensor all-reduces and stage sends" in layout
    assert "against FSDP (FULL_SHARD) over all 32 GPUs: step" in layout and "gradient traffic" in layout
    assert f"{pipeline_bubble(4, plan.gradient_accumulation_steps):.0%}" in layout
    # the plan's dict records the layout beside the strategy, and reads back
    stored = plan.to_dict()
    assert (stored["strategy"], stored["tensor_parallel"], stored["pipeline_parallel"]) == ("fsdp", 8, 4)
    assert parse_plan(stored) == plan


def test_1_3b_on_one_machine_stays_data_parallel_and_says_why() -> None:
    plan = _outcome("1.3b_one_h100_machine").plan
    assert plan is not None
    assert plan.strategy in {"ddp", "zero1", "zero2"} and (plan.tensor_parallel, plan.pipeline_parallel) == (1, 1)
    layout = next(r for r in plan.reasons if r.startswith("layout: "))
    assert "no model parallelism" in layout and "the best layout on these GPUs, tensor parallel" in layout


def test_a_team_s_code_gets_only_the_layouts_its_workload_lists() -> None:
    request = dataclasses.replace(CASES["70b_four_h100_machines"], parallelism=())
    plan = plan_request(request, now=NOW).plan
    assert plan is not None and (plan.tensor_parallel, plan.pipeline_parallel) == (1, 1)
    said = "layout: data parallel only: the trainer does not declare tensor or pipeline parallelism"
    assert any(r.startswith(said) for r in plan.reasons), plan.reasons
    tensor_only = plan_request(dataclasses.replace(request, parallelism=("tensor",)), now=NOW).plan
    assert tensor_only is not None and tensor_only.pipeline_parallel == 1 and tensor_only.tensor_parallel > 1


def test_workload_parallelism_is_read_from_a_request_and_checked() -> None:
    raw = json.loads(
        (Path(__file__).parents[1] / "golden/custom_jobs/own_script_tensor_pipeline.request.json").read_text()
    )
    request = parse_training_request(json.dumps(raw))
    assert request.workload.parallelism == ("tensor", "pipeline")
    assert plan_input_from_request(request).parallelism == ("tensor", "pipeline")
    raw["workload"]["parallelism"] = ["tensor", "expert"]
    with pytest.raises(SchemaError, match="expected one of 'tensor', 'pipeline'") as error:
        parse_training_request(json.dumps(raw))
    assert error.value.field == "workload.parallelism[1]"
    raw["workload"]["parallelism"] = ["tensor", "tensor"]
    with pytest.raises(SchemaError, match="lists a layout twice"):
        parse_training_request(json.dumps(raw))
    with pytest.raises(PlanInputError, match="parallelism 'sequence' is not one of tensor, pipeline"):
        PlanInput(task="causal-lm", preset="gpt-tiny", dataset_bytes=1, parallelism=("sequence",))


def test_layouts_a_workload_can_run() -> None:
    a = load_catalog().assumptions
    gpt = build_workload(CASES["70b_four_h100_machines"], a)
    runs = supported(gpt)
    assert runs[:DATA_VARIANTS].all() and runs[DATA_VARIANTS:].all()  # 64 heads, 80 blocks: every layout
    tiny = build_workload(dataclasses.replace(CASES["70b_four_h100_machines"], preset="gpt-tiny"), a)
    runs = supported(tiny)  # 4 heads, 2 blocks
    assert not runs[_variant(8, 1)] and runs[_variant(4, 1)] and runs[_variant(1, 2)] and not runs[_variant(1, 4)]
    mlp = build_workload(PlanInput(task="tabular-classification", preset="mlp-small", dataset_bytes=10**6), a)
    assert not supported(mlp)[DATA_VARIANTS:].any()


def test_tensor_parallelism_keeps_korthikanti_s_share_of_each_block_s_activations() -> None:
    a = load_catalog().assumptions
    work = build_workload(CASES["70b_four_h100_machines"], a)
    share, _ = activation_shares(work, len(VARIANT_TENSOR), a.memory.checkpoint_kept_bytes_per_token_per_hidden)
    blocks = work.seq_len * work.d_model * work.n_layer * 34.0
    rest = work.activation_bytes_per_sample - blocks
    for t in (2, 4, 8):
        # Table 2, tensor parallel without sequence parallelism: 10 + 24/t of each block's 34 s*b*h
        expected = (blocks * (10 + 24 / t) / 34 + rest) / work.activation_bytes_per_sample
        assert share[_variant(t, 1)] == pytest.approx(expected)
    assert share[_variant(1, 4)] == pytest.approx(1.0)  # stages keep p micro-batches of L/p blocks: one of all


def main() -> None:
    GOLDEN.write_text(json.dumps({name: _summary(_outcome(name)) for name in CASES}, indent=2) + "\n")
    print(f"wrote {GOLDEN}")


if __name__ == "__main__":
    main()


def test_a_request_may_pin_its_layout() -> None:
    tiny = PlanInput(
        task="causal-lm",
        preset="gpt-tiny",
        dataset_bytes=10**6,
        batch_size=8,
        spot="never",
        machine_type="g2-standard-24",
    )
    plan = plan_request(dataclasses.replace(tiny, replica_count=1, tensor_parallel=2), now=NOW).plan
    assert plan is not None and (plan.tensor_parallel, plan.pipeline_parallel, plan.data_parallel) == (2, 1, 1)
    plan = plan_request(dataclasses.replace(tiny, replica_count=2, pipeline_parallel=2), now=NOW).plan
    assert plan is not None and (plan.tensor_parallel, plan.pipeline_parallel, plan.data_parallel) == (1, 2, 2)
    # micro-batch x data-parallel processes x micro-batches per pipeline step = the global batch
    assert plan.micro_batch_size * 2 * plan.gradient_accumulation_steps == 8
    pinned_off = plan_request(dataclasses.replace(tiny, replica_count=2, tensor_parallel=1, pipeline_parallel=1))
    assert pinned_off.plan is not None and pinned_off.plan.tensor_parallel == pinned_off.plan.pipeline_parallel == 1
    with pytest.raises(
        PlanInputError, match=r"constraints.tensor_parallel: 3 is not a degree Landfall plans; valid: 1, 2"
    ):
        plan_request(dataclasses.replace(tiny, tensor_parallel=3), now=NOW)
    with pytest.raises(PlanInputError, match=r"constraints.tensor_parallel: tensor parallel 8 needs the heads \(4\)"):
        plan_request(dataclasses.replace(tiny, tensor_parallel=8), now=NOW)
    team = dataclasses.replace(tiny, parallelism=("tensor",))
    with pytest.raises(PlanInputError, match=r"constraints\.pipeline_parallel: the trainer does not declare pipeline"):
        plan_request(dataclasses.replace(team, replica_count=2, pipeline_parallel=2), now=NOW)
    seven = dataclasses.replace(tiny, preset="gpt-7b", replica_count=1, tensor_parallel=8)
    rejection = plan_request(seven, now=NOW).rejection or ""
    assert "tensor parallel 8 does not fit 2 GPUs a machine: it must divide them" in rejection


def test_constraints_layout_pins_are_read_from_a_request() -> None:
    raw = json.loads(
        (Path(__file__).parents[1] / "golden/custom_jobs/tensor_parallel_one_node.request.json").read_text()
    )
    raw["constraints"].update(tensor_parallel=4, pipeline_parallel=1)
    request = parse_training_request(json.dumps(raw))
    inp = plan_input_from_request(request)
    assert (inp.tensor_parallel, inp.pipeline_parallel) == (4, 1)
    raw["constraints"]["pipeline_parallel"] = -1
    with pytest.raises(SchemaError) as error:
        parse_training_request(json.dumps(raw))
    assert error.value.field == "constraints.pipeline_parallel"


def test_no_layout_on_a_gpu_that_would_train_it_in_fp16() -> None:
    v100 = PlanInput(
        task="causal-lm",
        preset="gpt-7b",
        dataset_bytes=2 * 10**8,
        batch_size=64,
        gpu_allowlist=("NVIDIA_TESLA_V100",),
        prefer="fastest",
    )
    plan = plan_request(v100, now=NOW).plan
    assert plan is not None and plan.precision == "fp16" and (plan.tensor_parallel, plan.pipeline_parallel) == (1, 1)
    layout = next(r for r in plan.reasons if r.startswith("layout: "))
    assert "V100 has no bf16, and the trainer's model-parallel layouts take no fp16 loss scaling" in layout
    in_fp32 = plan_request(dataclasses.replace(v100, precision="fp32"), now=NOW).plan
    assert in_fp32 is not None and in_fp32.precision == "fp32" and in_fp32.tensor_parallel > 1


def test_a_declared_step_time_keeps_the_work_data_parallel() -> None:
    own = PlanInput(
        task="causal-lm",
        preset="",
        parameters=7 * 10**9,
        layers=32,
        hidden_size=4096,
        seq_len=2048,
        dataset_bytes=2 * 10**8,
        batch_size=64,
        machine_type="a3-highgpu-8g",
        replica_count=1,
        memory_gib_per_gpu=60.0,
        step_seconds=80.0,
        parallelism=("tensor", "pipeline"),
        basis="workload.parameters",
    )
    plan = plan_request(own, now=NOW).plan
    assert plan is not None and (plan.tensor_parallel, plan.pipeline_parallel) == (1, 1)
    with pytest.raises(PlanInputError, match=r"the memory and step time given .* are a whole model's on one GPU"):
        plan_request(dataclasses.replace(own, tensor_parallel=8), now=NOW)
