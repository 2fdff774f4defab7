"""Achieved MFU per GPU kind as a function of the work per step, fitted to measured points.

A GPU reaches a larger share of its peak when each step gives it more to do: the measured runs
(schemas/data/throughput_points.json) go from 6 % of an H100's bf16 peak for gpt-124m at 8 sequences to 22 % of an
H200's for gpt-350m at 16. The work per step is the FLOPs one GPU runs per micro-step: training FLOPs per sample x
micro-batch per GPU.

The fit, per measured kind: each point's MFU in the planner's own terms (its FLOPs over the datasheet peak during
the step time it measured, less the per-micro-step overhead the planner adds separately), then an isotonic
(monotone non-decreasing) regression of log MFU on log work (pool adjacent violators, weighted by the points at each
work), then linear interpolation in log(work) between the fitted levels, held flat beyond the first and last. Why
this fit and not a saturating curve (MFU = m x w / (w + w_half)): the points are not monotone in work alone (gpt-350m
at 8 sequences, less work per step than gpt-124m at 32, reaches a higher MFU), so any monotone fit pools them, and a
parametric curve fitted to such steep points extrapolates a ceiling nobody measured; this one never promises more
than the best level measured, and each estimate is traceable to the points it interpolates.

A kind nobody measured gets a prior: each measured kind's curve scaled by the ratio of the two kinds' assumed MFU
in gpus.json (the literature's relative standing), their geometric mean, never above the curve of the best measured
kind (the highest on average). Every kind's curve is tabulated on one grid (the measured works of every kind), so
the search evaluates all candidates with one interpolation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from schemas.gpus import GpuSpec
from schemas.throughput_points import POINTS_FILE, ThroughputPoint, ThroughputPoints

POINTS_FILE_NOTE = "schemas/data/throughput_points.json"


class ThroughputError(ValueError):
    """A measured point the model cannot use (its step time is not above the planner's fixed overhead)."""


@dataclass(frozen=True)
class KindCurve:
    """One GPU kind's MFU at each of the model's grid works."""

    accelerator_type: str
    mfu: tuple[float, ...]
    """At ThroughputModel.log_work, in the same order."""
    measured: bool
    """Fitted to points of this kind; False: a prior scaled from measured kinds."""
    basis: str
    """What the curve rests on, as plans state it."""
    error: float | None = None
    """Measured kinds: the largest relative error of the fitted MFU over this kind's points (|fitted / measured - 1|,
    the worst a step time the model gives is off on a measured run); None for a prior (nothing to measure it on)."""


@dataclass(frozen=True)
class ThroughputModel:
    log_work: tuple[float, ...]
    """The grid: natural log of FLOPs per GPU per micro-step, ascending."""
    curves: Mapping[str, KindCurve]
    """accelerator_type -> its curve; every kind of gpus.json."""
    version: int
    """throughput_points.json's version."""

    def mfu(self, accelerator_type: str, work_per_step: float) -> float:
        """The MFU the model gives this kind at this many FLOPs per GPU per micro-step."""
        curve = self.curves[accelerator_type]
        return float(np.interp(math.log(work_per_step), self.log_work, curve.mfu))


def point_mfu(point: ThroughputPoint, gpu: GpuSpec, step_overhead_seconds: float) -> float:
    """The MFU at which the planner's step time (compute at peak x MFU, plus step_overhead_seconds) equals the
    point's measured one; the point's own GPUs each ran micro_batch samples per step."""
    step = point.micro_batch * point.gpus / point.samples_per_second
    compute = step - step_overhead_seconds
    if compute <= 0:
        raise ThroughputError(
            f"{POINTS_FILE}: {point.describe()} on {gpu.display}: a measured step of {step:.4g} s is not above the "
            f"planner's {step_overhead_seconds:g} s overhead per step; check its samples_per_second against the source"
        )
    return point.work_per_step / (gpu.peak_flops(point.precision) * compute)


def isotonic(levels: Sequence[float], weights: Sequence[float]) -> list[float]:
    """The non-decreasing sequence nearest `levels` in weighted least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [weighted mean, weight, count]
    for level, weight in zip(levels, weights, strict=True):
        blocks.append([level, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            value, w, n = blocks.pop()
            prev = blocks[-1]
            total = prev[1] + w
            blocks[-1] = [(prev[0] * prev[1] + value * w) / total, total, prev[2] + n]
    return [block[0] for block in blocks for _ in range(int(block[2]))]


def fit_error(
    points: Sequence[ThroughputPoint], gpu: GpuSpec, overhead: float, works: Sequence[float], fitted: Sequence[float]
) -> float:
    """The largest |fitted / measured - 1| of the kind's MFU over its points: the pooling of the isotonic fit and the
    spread of repeated points at one work both show in it."""
    return max(
        abs(float(np.interp(math.log(p.work_per_step), works, fitted)) / point_mfu(p, gpu, overhead) - 1.0)
        for p in points
    )


def fit_kind(points: Sequence[ThroughputPoint], gpu: GpuSpec, overhead: float) -> tuple[list[float], list[float]]:
    """(log works, fitted MFU) of one kind's points: one level per distinct work, non-decreasing."""
    by_work: dict[float, list[float]] = {}
    for point in points:
        by_work.setdefault(math.log(point.work_per_step), []).append(math.log(point_mfu(point, gpu, overhead)))
    works = sorted(by_work)
    fitted = isotonic([sum(by_work[w]) / len(by_work[w]) for w in works], [len(by_work[w]) for w in works])
    return works, [math.exp(level) for level in fitted]


def _runs(points: Sequence[ThroughputPoint]) -> str:
    """ "gpt-124m x8 (2), gpt-124m x16, gpt-350m x8 (2)": the measured configurations, in the file's order."""
    counts: dict[str, int] = {}
    for point in points:
        key = f"{point.model} x{point.micro_batch}"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(key if n == 1 else f"{key} ({n})" for key, n in counts.items())


def build_throughput_model(
    gpus: Mapping[str, GpuSpec], points: ThroughputPoints, step_overhead_seconds: float
) -> ThroughputModel:
    """Fit every measured kind, then give every other kind of `gpus` its prior (see the module docstring)."""
    by_kind: dict[str, list[ThroughputPoint]] = {}
    for point in points.points:
        by_kind.setdefault(point.accelerator_type, []).append(point)
    fits = {kind: fit_kind(pts, gpus[kind], step_overhead_seconds) for kind, pts in by_kind.items()}
    grid = np.array(sorted({w for works, _ in fits.values() for w in works}))
    measured = {kind: np.interp(grid, works, mfu) for kind, (works, mfu) in fits.items()}
    # The best measured kind: the highest curve on average over the grid. Capping a prior by one curve, knot by knot,
    # keeps it below that curve between the knots too (both are linear there); a cap by the pointwise best of several
    # curves would not.
    best_kind = max(measured, key=lambda kind: float(np.mean(np.log(measured[kind]))))
    best = measured[best_kind]
    curves: dict[str, KindCurve] = {}
    for kind, gpu in gpus.items():
        if kind in measured:
            pts = by_kind[kind]
            basis = f"fitted to {len(pts)} measured points on {gpu.display} ({_runs(pts)}; {POINTS_FILE_NOTE})"
            works, fitted = fits[kind]
            error = fit_error(pts, gpu, step_overhead_seconds, works, fitted)
            curves[kind] = KindCurve(kind, tuple(map(float, measured[kind])), True, basis, error)
            continue
        scaled = [np.log(curve * gpu.assumed_mfu / gpus[m].assumed_mfu) for m, curve in measured.items()]
        prior = np.minimum(np.exp(np.mean(scaled, axis=0)), best)
        names = " and ".join(gpus[m].display for m in measured)
        basis = (
            f"prior: nothing measured on {gpu.display}; the {names} curves scaled by the assumed MFU of gpus.json "
            f"({gpu.assumed_mfu:g} against {', '.join(f'{gpus[m].assumed_mfu:g}' for m in measured)}), never above "
            f"the best measured, {gpus[best_kind].display} ({POINTS_FILE_NOTE})"
        )
        curves[kind] = KindCurve(kind, tuple(map(float, prior)), False, basis)
    return ThroughputModel(tuple(map(float, grid)), MappingProxyType(curves), points.version)


def curve_rows(model: ThroughputModel, kinds: Sequence[str | None], cpu_mfu: float) -> np.ndarray:
    """[config, grid] MFU rows for configurations of these GPU kinds (None: CPU-only, a flat cpu_mfu)."""
    flat = (cpu_mfu,) * len(model.log_work)
    return np.array([model.curves[kind].mfu if kind else flat for kind in kinds], dtype=np.float64)


def hinge_terms(log_grid: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(base [config], slopes [segment, config]) of rows [config, grid] written as hinges: a row's value at x is
    base + the sum over segments j of slope_j x (x - grid_j) clipped to the segment's width; mfu_at evaluates it."""
    widths = np.diff(log_grid)
    slopes = np.diff(rows, axis=1) / np.where(widths > 0, widths, 1.0)
    return rows[:, 0].copy(), np.ascontiguousarray(slopes.T)


def mfu_at(log_grid: np.ndarray, base: np.ndarray, slopes: np.ndarray, log_work: np.ndarray) -> np.ndarray:
    """[variant, config] MFU: each configuration's row (hinge_terms) at its log work per micro-step, linear between
    grid points and flat beyond the ends, as np.interp gives it row by row. Hinges, not a search and two gathers:
    a few whole-array operations per segment are about 2.5 times faster over the full catalog."""
    out = np.empty(log_work.shape)
    out[...] = base
    step = np.empty(log_work.shape)
    for j in range(slopes.shape[0]):
        np.subtract(log_work, log_grid[j], out=step)
        np.maximum(step, 0.0, out=step)  # np.maximum/np.minimum: np.clip with scalars is several times slower
        np.minimum(step, log_grid[j + 1] - log_grid[j], out=step)
        step *= slopes[j]
        out += step
    return out
