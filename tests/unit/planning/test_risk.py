"""Capacity risk priced from what jobs met (functions/planning/risk.py): Spot's overhead grows with the machines, a
measured preemption rate replaces the prior, refused shapes wait before they run, and each region is priced on its
own history."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from functions.planning import PlanInput, PlannerConfig, plan_request
from functions.planning.catalog import load_catalog
from functions.planning.risk import (
    CapacityHistory,
    CapacityObservation,
    expected_wait_hours,
    preemption_overhead,
    preemption_rate,
    refusal_share,
)
from tests.unit.planning.outcomes import chosen

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
JOB = load_catalog().assumptions.job
B200 = "NVIDIA_B200"
GPT_1_3B = PlanInput(task="causal-lm", preset="gpt-1.3b", dataset_bytes=2 * 10**9, batch_size=64)
"""Planned on 8 B200 on Spot in us-central1 with no history (one machine: the prior's +9.1 %)."""
GPT_7B = PlanInput(
    task="causal-lm", preset="gpt-7b", dataset_bytes=3 * 10**8, batch_size=256, budget_usd=400.0, prefer="fastest"
)
"""The fastest plan within $400: 128 B200 on 16 Spot machines when Spot were not riskier with more machines."""


def _ran(region: str, hours: float, nodes: int, preempted: bool = False, kind: str = B200) -> CapacityObservation:
    return CapacityObservation(kind, region, "spot", nodes=nodes, running_hours=hours, preempted=preempted)


def _refused(region: str, lost: float, mode: str = "spot", kind: str = B200) -> CapacityObservation:
    return CapacityObservation(kind, region, mode, refused=True, lost_seconds=lost)


def test_the_posterior_rate_and_the_overhead_are_the_documented_arithmetic() -> None:
    history = CapacityHistory.of([_ran("us-central1", 10.0, 3, preempted=True), _ran("us-central1", 0.0, 1, True)])
    h = history.get(B200, "us-central1", "spot")
    assert h is not None and (h.tries, h.preemptions, h.node_hours) == (2, 2, 30.0)
    # (prior 0.5/h x 10 machine-hours + 2 preemptions) / (10 + 30 machine-hours)
    assert preemption_rate(h, JOB) == pytest.approx(7 / 40)
    assert preemption_rate(None, JOB) == 0.5
    # 4 machines, 10 min lost each: load 0.175 x 4 / 6, overhead load / (1 - load)
    load = 0.175 * 4 / 6
    assert float(preemption_overhead(7 / 40, 4, 1 / 6)) == pytest.approx(load / (1 - load))
    # held below 0.95: a job stopped faster than it recovers is planned at 19 x, not at infinity or below 0
    assert float(preemption_overhead(10.0, 64, 1.0)) == pytest.approx(0.95 / 0.05)


def test_refusals_are_a_share_of_tries_with_their_measured_cost() -> None:
    history = CapacityHistory.of(
        [_refused("us-east4", 0.0), _refused("us-east4", 1800.0), _refused("us-east4", 600.0), _ran("us-east4", 1, 1)]
    )
    h = history.get(B200, "us-east4", "spot")
    assert h is not None and (h.tries, h.refusals, h.timed_refusals) == (4, 3, 2)
    p = 3 / (4 + JOB.stockout_prior_tries)
    assert refusal_share(h, JOB) == pytest.approx(p)
    # the mean of the refusals that lost time: (1800 + 600) / 2 s
    assert expected_wait_hours(h, JOB) == pytest.approx(p / (1 - p) * 1200 / 3600)
    # nothing refused, nothing tried: no wait; refused only at the call: the assumed delay
    assert expected_wait_hours(None, JOB) == 0.0
    at_once = CapacityHistory.of([_refused("us-east4", 0.0)]).get(B200, "us-east4", "spot")
    assert expected_wait_hours(at_once, JOB) == pytest.approx(0.2 / 0.8 * JOB.stockout_delay_seconds / 3600)


def test_more_spot_machines_cost_more_risk_under_the_prior() -> None:
    plan = chosen(plan_request(GPT_7B, now=NOW))
    # 128 B200 would be 16 Spot machines: 16 x 0.5/h x 10 min is a load of 1.33, held at 0.95: never the fastest
    assert not (plan.accelerator_type == B200 and plan.gpu_count == 128 and plan.spot)
    assert (plan.gpu_count, plan.spot) == (64, False)


def test_a_measured_low_preemption_rate_buys_the_many_spot_machines_back() -> None:
    quiet = CapacityHistory.of([_ran(r, 100.0, 8) for r in ("us-central1", "us-east4", "europe-west4")] * 3)
    plan = chosen(plan_request(GPT_7B, PlannerConfig(capacity=quiet), now=NOW))
    assert (plan.accelerator_type, plan.gpu_count, plan.spot) == (B200, 128, True)
    rate = 5 / (10 + 2400)  # (0.5/h x 10 + 0 preemptions) / (10 + 3 x 100 h x 8 machines)
    note = next(n for n in plan.assumptions if n.startswith("preemption: "))
    assert note.startswith(f"preemption: {rate:.3g} per machine-hour (0 preemption(s) over 2.4e+03 machine-hours")
    assert "x 16 machine(s) x 10 min lost each" in note


def test_a_region_that_refuses_waits_before_it_runs_and_the_plan_moves() -> None:
    alone = chosen(plan_request(GPT_1_3B, now=NOW))
    assert (alone.accelerator_type, alone.spot, alone.region) == (B200, True, "us-central1")
    refusing = CapacityHistory.of([_refused("us-central1", 3600.0)] * 9 + [_ran("us-central1", 1.0, 1)])
    plan = chosen(plan_request(GPT_1_3B, PlannerConfig(capacity=refusing), now=NOW))
    # 9 of 10 tries refused, an hour lost each: p = 9 / 14, p / (1 - p) hours of waiting before it runs
    assert (plan.accelerator_type, plan.spot) == (B200, True) and plan.region != "us-central1"
    assert plan.estimated_hours == pytest.approx(alone.estimated_hours, rel=1e-6)  # the same job elsewhere
    # pinned to the refusing region, the plan leaves B200 Spot; B200 Spot stays a fallback, its wait said
    again = plan_request(
        dataclasses.replace(GPT_1_3B, regions=("us-central1",)), PlannerConfig(capacity=refusing), now=NOW
    )
    assert not (chosen(again).accelerator_type == B200 and chosen(again).spot)
    there = next(f for f in again.fallbacks if f.accelerator_type == B200 and f.spot and f.replica_count == 1)
    wait = (9 / 14) / (5 / 14)
    note = next(n for n in there.assumptions if n.startswith("refusals: "))
    assert note.startswith("refusals: 9 of 10 tries of NVIDIA_B200 Spot in us-central1 were refused for capacity")
    assert f"+{wait * 60:.3g} min expected before it runs" in note


def test_the_wait_counts_against_the_deadline() -> None:
    refusing = CapacityHistory.of([_refused("us-central1", 3600.0)] * 9 + [_ran("us-central1", 1.0, 1)])
    inp = dataclasses.replace(GPT_1_3B, regions=("us-central1",), deadline=NOW + timedelta(hours=2.5))
    without = chosen(plan_request(inp, now=NOW))
    assert (without.accelerator_type, without.spot) == (B200, True)  # 1.7 h: within 2.5 h
    plan = chosen(plan_request(inp, PlannerConfig(capacity=refusing), now=NOW))
    # with 1.8 h of expected refusals B200 Spot ends past the deadline: another shape meets it
    assert not (plan.accelerator_type == B200 and plan.spot)


def test_each_region_is_priced_on_its_own_history() -> None:
    quiet = CapacityHistory.of([_ran("us-east4", 100.0, 10)])
    outcome = plan_request(GPT_1_3B, PlannerConfig(capacity=quiet), now=NOW)
    plan = chosen(outcome)
    # (0.5 x 10 + 0) / (10 + 1000) preemptions per machine-hour in us-east4, the prior 0.5 elsewhere; 10 min lost each
    overhead = {r: (x / 6) / (1 - x / 6) for r, x in (("us-east4", 5 / 1010), ("us-central1", 0.5))}
    same = [p for p in (plan, *outcome.fallbacks) if p.machine_type == plan.machine_type and p.replica_count == 1]
    assert {p.region for p in same} >= {"us-east4", "us-central1"}
    base = {p.region: p.estimated_hours / (1 + overhead[p.region]) for p in same if p.region in overhead}
    assert base["us-east4"] == pytest.approx(base["us-central1"], rel=1e-6)
    assert plan.region == "us-east4"  # 9 % less time is worth its price there at $50/h
