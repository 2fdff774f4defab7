"""How often a planned run checkpoints: from its step time, the Spot risk and what writing a checkpoint costs.

A job that dies without its SIGTERM checkpoint (a crash, a host failure, a preemption whose 30-second notice is too
short for the write) loses the steps since its last checkpoint. The interval keeps that loss under a target
(assumptions.json checkpoints: 30 minutes on demand, 10 on Spot, which Google preempts), but checkpoints no more
often than writing them takes a set share of the run (large models: a checkpoint holds weights and Adam's moments).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from functions.planning.assumptions import CheckpointAssumptions
from functions.planning.explain import duration


@dataclass(frozen=True)
class CheckpointInterval:
    every_steps: int
    """Optimizer steps between checkpoints (>= 1; more than the run's steps when it is shorter than the target): the
    same interval counted in planned steps, for code that counts steps."""
    every_seconds: int
    """Seconds of training between checkpoints, which the trainer keeps on the wall clock (a step time the plan got
    wrong does not stretch the work a failure loses)."""
    reason: str
    """Why, for the Plan's reasons."""


_CACHE: dict[tuple[float, int, int, bool], tuple[CheckpointAssumptions, CheckpointInterval]] = {}


def checkpoint_interval(
    step_seconds: float, steps: int, parameters: int, spot: bool, rules: CheckpointAssumptions
) -> CheckpointInterval:
    """The interval for a run of `steps` optimizer steps of `step_seconds` each (cached: a plan's fallbacks often
    repeat its machine in other regions)."""
    key = (step_seconds, steps, parameters, spot)
    found = _CACHE.get(key)
    if found is None or found[0] is not rules:
        if len(_CACHE) > 4096:
            _CACHE.clear()
        found = _CACHE[key] = (rules, _interval(step_seconds, steps, parameters, spot, rules))
    return found[1]


def _interval(
    step_seconds: float, steps: int, parameters: int, spot: bool, rules: CheckpointAssumptions
) -> CheckpointInterval:
    target_minutes = rules.spot_max_lost_minutes if spot else rules.max_lost_minutes
    write_bytes = parameters * rules.bytes_per_parameter
    write_seconds = write_bytes / (rules.write_gbytes_per_second * 1e9)
    least_seconds = write_seconds / rules.max_write_overhead_fraction
    stretched = least_seconds > target_minutes * 60.0
    seconds = least_seconds if stretched else target_minutes * 60.0
    step = max(step_seconds, 1e-9)
    every = max(1, math.floor(seconds / step))  # about time, not the run's length: estimates of steps can be off
    risk = "a Spot preemption" if spot else "a failure"
    text = (
        f"checkpoint every {duration(seconds / 3600)} of training, on the clock (~{every:,} steps at the planned "
        f"{step_seconds:.3g} s step): at most {target_minutes:g} min of work lost on {risk} without its SIGTERM "
        "checkpoint"
    )
    if stretched:
        text += (
            f", stretched because writing one ({write_bytes / 1e9:,.1f} GB at {rules.write_gbytes_per_second:g} "
            f"GB/s, ~{write_seconds:,.0f} s) may take at most {rules.max_write_overhead_fraction:.0%} of the run"
        )
    if spot and write_seconds > rules.spot_notice_seconds:
        text += (
            f"; writing one (~{write_seconds:,.0f} s) takes longer than the {rules.spot_notice_seconds:g} s a Spot "
            "preemption's notice gives, so none is saved on the notice: a preemption loses the work since the last one"
        )
    if every >= steps:
        text += f"; the planned run ({steps:,} steps) is shorter than that: it checkpoints only on SIGTERM"
    return CheckpointInterval(every_steps=every, every_seconds=math.ceil(seconds), reason=text)
