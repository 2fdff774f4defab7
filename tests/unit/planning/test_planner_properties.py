"""Properties of the planner over generated requests, checked against an exhaustive reference search.

- every plan (and fallback) is a machine shape Vertex accepts, within the request's constraints;
- no plan is over its GPU's memory;
- no plan ends past the deadline when the reference finds one that meets it;
- the plan is always the best feasible candidate: same objective as the exhaustive search over the same space.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions.planning import PlanInput, plan_request
from functions.planning.catalog import load_catalog
from functions.planning.quotas import load_quotas
from functions.planning.space import space_for
from schemas.plan import Plan
from tests.unit.planning.exhaustive import exhaustive_best, objective_key

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
REGIONS = ("us-central1", "us-east1", "us-east4", "us-west1", "europe-west4", "asia-southeast1")
GPUS = (
    "NVIDIA_TESLA_T4",
    "NVIDIA_TESLA_V100",
    "NVIDIA_L4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_H100_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
    "NVIDIA_TESLA_P100",
)
MODELS = (
    ("tabular-classification", "mlp-small"),
    ("tabular-regression", "mlp-large"),
    ("causal-lm", "gpt-tiny"),
    ("causal-lm", "gpt-124m"),
    ("causal-lm", "gpt-350m"),
    ("causal-lm", "gpt-1.3b"),
    ("causal-lm", "gpt-7b"),
    ("causal-lm", "gpt-70b"),
)


@cache
def raw_machines() -> dict:
    data: dict = json.loads(resources.files("functions.planning").joinpath("data/machines.json").read_text())
    return data


def vertex_accepts(machine_type: str, accelerator_type: str | None, count: int) -> bool:
    """Straight from machines.json, without the loader: fixed shapes, N1 limits per GPU count, CPU-only shapes."""
    raw = raw_machines()
    if accelerator_type is None:
        return count == 0 and any(s["machine_type"] == machine_type for s in raw["cpu_shapes"])
    for shape in raw["fixed_shapes"]:
        if shape["machine_type"] == machine_type:
            return bool(shape["accelerator_type"] == accelerator_type and shape["accelerator_count"] == count)
    limits = raw["n1_gpus"].get(accelerator_type, {}).get("counts", {}).get(str(count))
    host = next((h for h in raw["n1_hosts"] if h["machine_type"] == machine_type), None)
    return bool(
        limits and host and host["vcpus"] <= limits["max_vcpus"] and host["memory_gb"] <= limits["max_memory_gb"]
    )


@st.composite
def requests(draw) -> PlanInput:
    task, preset = draw(st.sampled_from(MODELS))
    deadline = draw(st.one_of(st.none(), st.floats(0.05, 400).map(lambda h: NOW + timedelta(hours=h))))
    return PlanInput(
        task=task,
        preset=preset,
        dataset_bytes=int(10 ** draw(st.floats(3, 11))),
        epochs=draw(st.integers(1, 4)),
        batch_size=draw(st.sampled_from([1, 4, 16, 64, 256, 1024])),
        max_steps=draw(st.sampled_from([0, 0, 100, 5000])),
        deadline=deadline,
        budget_usd=draw(st.sampled_from([0.0, 0.0, 5.0, 100.0, 5000.0])),
        regions=tuple(draw(st.lists(st.sampled_from(REGIONS), max_size=3, unique=True))),
        gpu_allowlist=tuple(draw(st.lists(st.sampled_from(GPUS), max_size=3, unique=True))),
        max_gpus=draw(st.sampled_from([0, 0, 1, 2, 4, 8, 16, 64])),
        spot=draw(st.sampled_from(["never", "allowed", "required"])),
        checkpointing=draw(st.booleans()),
        precision=draw(st.sampled_from(["auto", "auto", "fp32"])),
        flex_start=draw(st.sampled_from(["never", "allowed"])),
        prefer=draw(st.sampled_from(["", "", "cheapest", "fastest", "0.5", "25", "1000"])),
    )


def check_constraints(plan: Plan, inp: PlanInput) -> None:
    catalog = load_catalog()
    assert vertex_accepts(plan.machine_type, plan.accelerator_type, plan.accelerator_count), plan.machine_type
    assert plan.replica_count >= 1
    if plan.reduction_server_replicas:
        assert plan.replica_count > 1 and plan.accelerator_type and plan.strategy == "ddp"
    assert not inp.regions or plan.region in inp.regions
    shape = next(
        s
        for s in catalog.shapes
        if (s.machine_type, s.accelerator_type, s.accelerator_count)
        == (plan.machine_type, plan.accelerator_type, plan.accelerator_count)
    )
    assert plan.region in shape.regions
    mode = "spot" if plan.spot else "flex_start" if plan.flex_start else "on_demand"
    assert catalog.consumption.rule(plan.machine_type).sold(mode, plan.region), (plan.machine_type, mode)
    assert not plan.flex_start or inp.flex_start == "allowed"
    assert not inp.gpu_allowlist or plan.accelerator_type in inp.gpu_allowlist
    assert not inp.max_gpus or plan.gpu_count <= inp.max_gpus
    assert plan.spot is not (inp.spot == "never" or not inp.checkpointing) or not plan.spot
    assert not (inp.spot == "required" and not plan.spot)
    capacity = catalog.gpus[plan.accelerator_type].memory_bytes if plan.accelerator_type else shape.memory_bytes
    assert plan.memory.gpu_memory_bytes == capacity
    assert plan.memory.total_bytes <= plan.memory.usable_bytes == round(capacity * 0.9)
    processes = plan.gpu_count if plan.accelerator_type else 1
    # a model-parallel layout's tensor_parallel x pipeline_parallel GPUs train one data-parallel process's samples
    assert processes % (plan.tensor_parallel * plan.pipeline_parallel) == 0
    assert plan.data_parallel == processes // (plan.tensor_parallel * plan.pipeline_parallel)
    assert plan.micro_batch_size * plan.data_parallel * plan.gradient_accumulation_steps == inp.batch_size
    if plan.precision == "bf16":
        assert plan.accelerator_type is not None, "bf16 planned without a GPU"
        assert catalog.gpus[plan.accelerator_type].supports_bf16
    if inp.deadline is not None:
        assert plan.estimated_hours <= (inp.deadline - NOW).total_seconds() / 3600 + 1e-6
    if inp.budget_usd:
        assert plan.estimated_cost_usd <= inp.budget_usd + 1e-6


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_plan_is_valid_within_constraints_and_the_best_feasible(inp: PlanInput):
    outcome = plan_request(inp, now=NOW)
    space = space_for(load_catalog(), load_quotas(), "us-central1")
    reference = exhaustive_best(space, inp, NOW, load_quotas())
    if reference is None:
        assert outcome.plan is None, "planner found a plan the exhaustive search calls infeasible"
        assert outcome.rejection and outcome.fallbacks == ()
        return
    assert outcome.plan is not None, f"exhaustive search found {reference}; planner said {outcome.rejection}"
    check_constraints(outcome.plan, inp)
    ev = outcome.evaluation
    best = ev.best()
    default = load_catalog().assumptions.objective.value_of_time_usd_per_hour
    got = objective_key(inp, float(ev.hours[best]), float(ev.cost[best]), default)[0]
    assert got <= reference[0] * (1 + 1e-9) + 1e-12
    assert got >= reference[0] * (1 - 1e-9) - 1e-12
    chosen = objective_key(inp, outcome.plan.estimated_hours, outcome.plan.estimated_cost_usd, default)[0]
    for fallback in outcome.fallbacks:
        check_constraints(fallback, inp)
        assert objective_key(inp, fallback.estimated_hours, fallback.estimated_cost_usd, default)[0] >= chosen - 1e-6
