"""Typed access to a PlanOutcome in tests: the plan that must be there, or the rejection that must be."""

from __future__ import annotations

import dataclasses

from functions.planning import PlanInput, PlanOutcome
from functions.planning.catalog import load_catalog
from functions.planning.explain import Candidate
from schemas.plan import Plan, PlanAlternative


def chosen(outcome: PlanOutcome) -> Plan:
    """The outcome's plan; fails the test with the planner's rejection when it found none."""
    assert outcome.plan is not None, f"expected a plan, the planner rejected the request: {outcome.rejection}"
    return outcome.plan


def rejection(outcome: PlanOutcome) -> str:
    """The outcome's rejection text; fails the test with the chosen plan when the planner found one."""
    assert outcome.rejection is not None, f"expected a rejection, the planner chose {outcome.plan}"
    return outcome.rejection


def cost(row: Candidate | PlanAlternative) -> float:
    """A feasible row's estimated cost; fails the test when the row has none (an infeasible row)."""
    assert row.estimated_cost_usd is not None, f"expected an estimated cost, got none for {row}"
    return row.estimated_cost_usd


def hours(row: Candidate | PlanAlternative) -> float:
    """A feasible row's estimated hours; fails the test when the row has none (an infeasible row)."""
    assert row.estimated_hours is not None, f"expected estimated hours, got none for {row}"
    return row.estimated_hours


def pinned(machine_type: str, **changes: object) -> PlanInput:
    """gpt-124m on one machine of this type, its every GPU (16 samples per GPU)."""
    shape = next(s for s in load_catalog().shapes if s.machine_type == machine_type)
    base = PlanInput(
        task="causal-lm",
        preset="gpt-124m",
        dataset_bytes=10**9,
        epochs=1,
        batch_size=16 * max(shape.accelerator_count, 1),
        machine_type=machine_type,
        accelerator_count=shape.accelerator_count,
        replica_count=1,
        flex_start="allowed",
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]
