"""The planner's choices and explanations on hand-picked requests."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from functions.planning import PlanInput, PlanInputError, PlannerConfig, plan_input_from_request, plan_request
from functions.planning.catalog import load_catalog
from functions.planning.quotas import load_quotas
from schemas.training_request import parse_training_request
from tests.unit.planning.outcomes import chosen, cost, hours, rejection

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
EXAMPLE = Path(__file__).parents[3] / "schemas/examples/training_request.json"
LM = PlanInput(task="causal-lm", preset="gpt-124m", dataset_bytes=10**9, epochs=1, batch_size=64, prefer="cheapest")
"""Ranked by cost alone, so the tests below can check orders by cost (the default objective: test_objective.py)."""


def test_demo_request_gets_a_cheap_cpu_machine_in_the_default_region():
    outcome = plan_request(plan_input_from_request(parse_training_request(EXAMPLE.read_text())), now=NOW)
    plan = chosen(outcome)
    assert plan.accelerator_type is None and plan.accelerator_count == 0 and plan.replica_count == 1
    assert plan.region == "us-central1"
    assert plan.machine_type in {s.machine_type for s in load_catalog().shapes if s.is_cpu_only}
    assert plan.estimated_cost_usd < 0.05
    gpu_rows = [c for c in outcome.candidates if c.accelerator_type and c.feasible]
    assert gpu_rows and all(cost(c) > plan.estimated_cost_usd for c in gpu_rows)


def test_every_candidate_is_listed_once_with_the_chosen_one_marked():
    outcome = plan_request(LM, now=NOW)
    rows = outcome.candidates
    assert len(rows) == len(outcome.evaluation.space.configs)
    assert len({(r.machine_type, r.accelerator_type, r.accelerator_count, r.replica_count) for r in rows}) == len(rows)
    picked = [r for r in rows if r.chosen]
    assert len(picked) == 1 and rows[0] is picked[0] and picked[0].reason == "chosen"
    plan = chosen(outcome)
    assert (picked[0].machine_type, picked[0].region, picked[0].strategy) == (
        plan.machine_type,
        plan.region,
        plan.strategy,
    )
    feasible = [r for r in rows if r.feasible]
    assert list(rows[: len(feasible)]) == feasible, "feasible candidates rank first"
    costs = [cost(r) for r in feasible]
    assert costs == sorted(costs)
    assert all(r.reason.startswith(("costlier by", "same cost")) for r in feasible[1:])
    reasons = " | ".join(r.reason for r in rows if not r.feasible)
    assert "P100 reached end of support on 2026-09-15" in reasons
    # 16 x 8 GPUs cannot share a global batch of 64 as data-parallel processes: micro-batch x processes x
    # accumulation must equal it (a model-parallel layout can: 64 processes of 2 tensor-parallel GPUs)
    data_only = plan_request(dataclasses.replace(LM, parallelism=()), now=NOW)
    reasons = " | ".join(r.reason for r in data_only.candidates if not r.feasible)
    assert "global batch 64 does not split evenly over 128 processes" in reasons and "; 128 would" in reasons


def test_plan_lists_ranked_alternatives_with_reasons():
    plan = chosen(plan_request(LM, PlannerConfig(max_alternatives=10), now=NOW))
    assert [a.rank for a in plan.alternatives] == list(range(1, 11))
    assert plan.alternatives_considered == len(load_catalog().shapes) + sum(
        len(load_catalog().assumptions.scale_out_nodes)
        for s in load_catalog().shapes
        if s.scale_out and not s.is_cpu_only
    )
    assert all(a.reason for a in plan.alternatives)
    assert cost(plan.alternatives[0]) >= plan.estimated_cost_usd


def test_deadline_buys_speed_and_prefer_fastest_buys_the_fastest_within_the_budget():
    cheapest = chosen(plan_request(LM, now=NOW))
    rushed = chosen(
        plan_request(dataclasses.replace(LM, deadline=NOW + timedelta(hours=cheapest.estimated_hours / 3)), now=NOW)
    )
    assert rushed.estimated_hours <= cheapest.estimated_hours / 3
    assert rushed.estimated_cost_usd >= cheapest.estimated_cost_usd
    budget = cheapest.estimated_cost_usd * 4
    fastest = plan_request(dataclasses.replace(LM, budget_usd=budget, prefer="fastest"), now=NOW)
    assert chosen(fastest).estimated_cost_usd <= budget
    assert chosen(fastest).estimated_hours < cheapest.estimated_hours
    assert fastest.objective == f"fastest plan (prefer: fastest) within the ${budget:,.2f} budget"
    others = [c for c in fastest.candidates if c.feasible and not c.chosen]
    assert all(hours(c) >= chosen(fastest).estimated_hours - 1e-9 for c in others)


def test_fallbacks_are_feasible_ranked_and_varied():
    outcome = plan_request(LM, now=NOW)
    fallbacks = outcome.fallbacks
    assert len(fallbacks) == 5
    plan = chosen(outcome)
    costs = [f.estimated_cost_usd for f in fallbacks]
    assert costs == sorted(costs) and costs[0] >= plan.estimated_cost_usd
    keys = [(f.machine_type, f.region, f.spot) for f in fallbacks]
    assert len(set(keys)) == len(keys)
    assert (plan.machine_type, plan.region, plan.spot) not in keys
    for machine in {f.machine_type for f in fallbacks}:
        assert sum(f.machine_type == machine for f in fallbacks) + (plan.machine_type == machine) <= 3


def test_quota_override_moves_the_plan_elsewhere():
    inp = dataclasses.replace(LM, gpu_allowlist=("NVIDIA_H100_80GB",), spot="never")
    first = chosen(plan_request(inp, now=NOW))
    assert first.region == "us-central1"
    quotas = load_quotas().with_overrides({"us-central1": {"gpus": {"NVIDIA_H100_80GB": {"on_demand": 0}}}})
    moved = chosen(plan_request(inp, PlannerConfig(quotas=quotas), now=NOW))
    assert moved.accelerator_type == "NVIDIA_H100_80GB" and moved.region != "us-central1"
    nowhere = load_quotas().with_overrides(
        {r: {"gpus": {"NVIDIA_H100_80GB": {"on_demand": 0}}} for r in load_catalog().regions}
    )
    outcome = plan_request(inp, PlannerConfig(quotas=nowhere), now=NOW)
    assert outcome.plan is None and "over quota" in rejection(outcome) and "more quota:" in rejection(outcome)


def test_over_memory_rejection_names_the_need_and_the_sharded_fix():
    outcome = plan_request(
        PlanInput(
            task="causal-lm",
            preset="gpt-7b",
            dataset_bytes=10**9,
            batch_size=8,
            max_gpus=1,
            gpu_allowlist=("NVIDIA_H100_80GB",),
        ),
        now=NOW,
    )
    assert outcome.plan is None and outcome.fallbacks == ()
    text = rejection(outcome)
    # 16P = 103.4 GB of model states alone, whatever the micro-batch: accumulation and checkpointing cannot help
    assert "needs 106.2 GB per GPU under DDP on 1x H100 80GB even at micro-batch 1" in text
    assert "(72.0 GB usable of 80.0 GB each)" in text
    assert "ZeRO-1 over 2+ H100 80GB fits" in text
    assert "max_gpus of at least 2" in text


def test_impossible_deadline_and_budget_say_what_would_do():
    slow = dataclasses.replace(LM, preset="gpt-1.3b", dataset_bytes=10**10, deadline=NOW + timedelta(minutes=10))
    text = rejection(plan_request(slow, now=NOW))
    assert "miss the deadline" in text and "a deadline at least" in text
    poor = dataclasses.replace(LM, budget_usd=0.01)
    text = rejection(plan_request(poor, now=NOW))
    assert "over budget" in text and "a budget of at least $" in text
    late = dataclasses.replace(LM, deadline=NOW - timedelta(hours=1))
    assert "has already passed" in rejection(plan_request(late, now=NOW))


def test_regions_allowlist_and_spot_policy_are_obeyed_or_explained():
    inp = dataclasses.replace(LM, regions=("us-east1",), gpu_allowlist=("NVIDIA_H100_80GB",))
    text = rejection(plan_request(inp, now=NOW))
    assert "not offered in the allowed regions" in text and "allowing region us-central1" in text
    strict = plan_request(dataclasses.replace(LM, spot="required", checkpointing=False), now=NOW)
    assert strict.plan is None and "spot: allowed" in rejection(strict)
    assert chosen(plan_request(dataclasses.replace(LM, spot="required"), now=NOW)).spot
    assert not chosen(plan_request(dataclasses.replace(LM, spot="never"), now=NOW)).spot


def test_p100_is_planned_only_before_its_end_of_support():
    inp = dataclasses.replace(LM, gpu_allowlist=("NVIDIA_TESLA_P100",))
    assert plan_request(inp, now=NOW).plan is None
    assert chosen(plan_request(inp, now=datetime(2026, 6, 1, tzinfo=UTC))).accelerator_type == "NVIDIA_TESLA_P100"


def test_no_bf16_on_t4_and_v100():
    for kind in ("NVIDIA_TESLA_T4", "NVIDIA_TESLA_V100"):
        plan = chosen(plan_request(dataclasses.replace(LM, gpu_allowlist=(kind,)), now=NOW))
        assert plan.precision == "fp16"
    plan = chosen(plan_request(dataclasses.replace(LM, gpu_allowlist=("NVIDIA_L4",)), now=NOW))
    assert plan.precision == "bf16"
    assert (
        chosen(plan_request(dataclasses.replace(LM, precision="fp32", gpu_allowlist=("NVIDIA_L4",)), now=NOW)).precision
        == "fp32"
    )


def test_large_models_shard_and_the_plan_is_deterministic():
    inp = PlanInput(task="causal-lm", preset="gpt-70b", dataset_bytes=10**9, batch_size=64)
    first, second = plan_request(inp, now=NOW), plan_request(inp, now=NOW)
    # 70B does not fit one GPU: sharded over 8 B200 (one machine), where machines past one talk over the 200 Gbps
    # primary NIC a custom job gets (machines.json gpudirect)
    assert chosen(first).strategy in {"zero2", "fsdp"} and chosen(first).gpu_count >= 8
    assert json.dumps(chosen(first).to_dict()) == json.dumps(chosen(second).to_dict())


def test_bad_requests_raise_plan_input_errors():
    with pytest.raises(PlanInputError, match="unknown model preset 'gpt-9'"):
        plan_request(dataclasses.replace(LM, preset="gpt-9"), now=NOW)
    with pytest.raises(PlanInputError, match="causal-lm needs a GPT preset"):
        plan_request(dataclasses.replace(LM, preset="mlp-small"), now=NOW)
    with pytest.raises(PlanInputError, match="spot policy 'sometimes'"):
        dataclasses.replace(LM, spot="sometimes")
    with pytest.raises(PlanInputError, match="batch_size must be >= 1"):
        dataclasses.replace(LM, batch_size=0)


def test_unknown_region_and_gpu_names_are_called_out():
    text = rejection(
        plan_request(dataclasses.replace(LM, regions=("us-south9",), gpu_allowlist=("NVIDIA_H100",)), now=NOW)
    )
    assert "regions not in the catalog: us-south9 (known: us-central1," in text
    assert "gpu_allowlist names unknown accelerator types: NVIDIA_H100 (known: " in text


@pytest.mark.parametrize("batch", [1, 2, 3, 7, 12, 48, 64, 100, 1024, 4096, 65536, 10**6])
def test_the_micro_batch_lookup_is_the_largest_divisor_that_fits(batch: int) -> None:
    """split_batch (a lookup table per batch, or the divisor loop past LOOKUP_LIMIT) against the definition."""
    import math

    import numpy as np

    from functions.planning.search import batch_split, split_batch
    from functions.planning.space import space_for

    space = space_for(load_catalog(), load_quotas(), "us-central1")
    world = space.world
    rng = np.random.default_rng(batch)
    room = np.floor(rng.uniform(-5, 2 * batch + 5, size=(5, len(world))))
    room[:, ::9] = 1e15
    micro = split_batch(batch, world, room)
    shares = batch_split(batch, world)
    for c in rng.choice(len(world), 40, replace=False).tolist():
        share = batch // int(world[c]) if batch % int(world[c]) == 0 else 0
        small = [d for d in range(1, math.isqrt(share) + 1) if share % d == 0]
        divisors = {*small, *(share // d for d in small)}
        for v in range(room.shape[0]):
            fitting = [d for d in divisors if d <= room[v, c]]
            assert micro[v, c] == max(fitting, default=0), (c, v, share, room[v, c])
    assert (shares.largest is None) == (batch >= 65536)
