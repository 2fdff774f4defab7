"""The time model's figures for one candidate, as a plan shows them: samples per second per GPU, the MFU the estimate
implies, and where the step time came from.

The MFU is model FLOPs utilisation as commonly defined: the training FLOPs of the samples a GPU processes per second
over its peak in the precision used (recomputation not counted), so an estimate from a measured run shows the MFU that
run reached, and one from the model the MFU its curve gives at that work per micro-step.
"""

from __future__ import annotations

from dataclasses import dataclass

from functions.planning.search import Evaluation
from functions.planning.space import VARIANT_PIPELINE, VARIANT_TENSOR


@dataclass(frozen=True)
class ModelFigures:
    samples_per_second_per_gpu: float | None
    """Samples each GPU trains per second at the planned step time; None on a CPU-only machine."""
    mfu: float | None
    """The MFU the estimate implies; None where the step time is not known (an infinite step)."""
    figures_from: str
    """Where the step time came from: the team's declaration, a measured run or canary on the shape, the model scaled by
    measurements on other shapes, a GPU kind's measured points or its prior, or the CPU assumption."""


def figures_from(ev: Evaluation, c: int) -> str:
    """Where configuration c's step time came from (see ModelFigures.figures_from)."""
    work, shape = ev.workload, ev.space.configs[c].shape
    calibration = work.calibration
    if work.measured_step_seconds > 0:
        return "declared: workload.step_seconds"
    if calibration is not None and c in calibration.measured_configs:
        newest = max((f for i, f, _ in calibration.figures if i == c), key=lambda f: (f.measured_at, f.source == "run"))
        return f"measured: {newest.source} {newest.run_id} on this shape"
    if calibration is not None and c in dict(calibration.similar):
        return f"model, scaled by similar work measured on {ev.space.catalog.gpus[shape.gpu_kind].display}"
    if calibration is not None and calibration.figures:
        return "model, scaled by this workload's measurements on other shapes"
    if shape.is_cpu_only:
        return "model: the CPU assumption"
    curve = ev.space.catalog.throughput.curves[shape.gpu_kind]
    gpu = ev.space.catalog.gpus[shape.gpu_kind].display
    return f"model: measured points on {gpu}" if curve.measured else f"model: a prior for {gpu}"


def model_figures(ev: Evaluation, c: int, v: int) -> ModelFigures:
    """The figures of configuration c, variant v."""
    step = float(ev.step[c, v])
    shape = ev.space.configs[c].shape
    # samples per second per GPU: a data-parallel process's share over the t x p GPUs that train it together
    per_process = float(ev.per_process[c, v]) / float(VARIANT_TENSOR[v] * VARIANT_PIPELINE[v])
    if not 0 < step < float("inf"):
        return ModelFigures(None, None, figures_from(ev, c))
    mode = ev.space.modes["fp32" if ev.limits.fp32_only else "auto"]
    rate = per_process / step
    mfu = ev.workload.flops_per_sample * rate / float(mode.peak_flops[c])
    return ModelFigures(
        None if shape.is_cpu_only else round(rate, 6),
        round(mfu, 6),
        figures_from(ev, c),
    )


__all__ = ["ModelFigures", "figures_from", "model_figures"]
