"""The model's own step time for a request's work on one machine shape, strategy and model-parallel layout, before
any measurement: what a finished run's measured step is compared with, so that other workloads on the same GPU kind
learn how far the model is off there (calibration.py, source "similar")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from functions.planning.calibration import config_key, measured_variant
from functions.planning.catalog import load_catalog
from functions.planning.inputs import PlanInput
from functions.planning.limits import build_limits
from functions.planning.quotas import load_quotas
from functions.planning.search import evaluate
from functions.planning.space import ShapePin, space_for
from functions.planning.workload import build_workload


@dataclass(frozen=True)
class ModelStep:
    step_seconds: float
    """The model's seconds per optimizer step of the request's global batch there; 0 where the shape cannot run it,
    or the step is not the model's (declared by the team, or sized from FLOPs nobody described)."""
    flops_per_sample: float
    family: str


def model_step(
    inp: PlanInput,
    machine_type: str,
    accelerator_count: int,
    nodes: int,
    strategy: str,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
) -> ModelStep:
    """The model's step for `inp`'s work on (machine_type, accelerator_count, nodes) under `strategy` and the
    layout tensor_parallel x pipeline_parallel (calibration.measured_variant). Raises PlanInputError when the request
    cannot be planned at all."""
    catalog = load_catalog()
    work = build_workload(inp, catalog.assumptions)
    if work.measured_step_seconds > 0 or work.flops_guessed:
        # a declared step, or FLOPs nobody described: a step beside it says nothing of the model's error
        return ModelStep(0.0, work.flops_per_sample, work.family)
    space = space_for(catalog, load_quotas(), "us-central1", ShapePin(machine_type, accelerator_count, nodes))
    key = (machine_type, accelerator_count, nodes)
    found = [c for c, cfg in enumerate(space.configs) if config_key(cfg) == key]
    if not found:
        return ModelStep(0.0, work.flops_per_sample, work.family)
    ev = evaluate(space, work, build_limits(space, inp, datetime.now(UTC), None))
    v = measured_variant(strategy, tensor_parallel, pipeline_parallel, ev.variants)
    step = float(ev.step[found[0], v]) if v >= 0 else 0.0
    return ModelStep(step if 0 < step < float("inf") else 0.0, work.flops_per_sample, work.family)
