"""Planning a run again from its canary's figures (docs/canary.md): the one place where a canary's measurements
become the planner's input, so that the planner's own input for measured figures (issue 24 item 2) replaces this
with one edit.

Until then the planner's existing measured inputs carry them (docs/trainer-contract.md, "Planning"): the step time
as `step_seconds`, one optimizer step of the global batch on one GPU (the canary's step time x its processes: each
did its share), and a GPU peak as `memory_gib_per_gpu`. A CPU canary's resident set is not a GPU figure and is not
passed on.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from schemas.canary import CanaryFigures
from schemas.plan import Plan

if TYPE_CHECKING:
    from functions.planning import PlanInput

CANARY_BASIS = "the canary's measurements"


def measured_input(inp: PlanInput, plan: Plan, figures: CanaryFigures) -> PlanInput:
    """The run's plan input with the canary's figures as measured ones (those it measured; the rest as before)."""
    step = figures.step_seconds * plan.processes if figures.step_seconds else inp.step_seconds
    memory = figures.peak_memory_bytes / 2**30 if figures.peak_memory_bytes and figures.memory_kind == "gpu" else 0.0
    return replace(
        inp,
        step_seconds=step,
        memory_gib_per_gpu=memory or inp.memory_gib_per_gpu,
        basis=inp.basis or CANARY_BASIS,
    )


def replan_note(old: Plan, figures: CanaryFigures, verdict: str) -> str:
    """The line the new plan's `reasons` start with."""
    return (
        f"planned again from the canary's measured figures (it ran {figures.steps} steps on "
        f"{old.replica_count} x {old.machine_type}): {verdict}"
    )


__all__ = ["CANARY_BASIS", "measured_input", "replan_note"]
