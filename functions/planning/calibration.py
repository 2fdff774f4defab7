"""Measured figures over the model: calibrate a workload's step time and start-up from what runs measured.

For each hardware configuration a measurement was taken on, the model's step time there (for the measured strategy and
model-parallel layout, `measured_variant`) is compared with the measured one: their ratio calibrates that configuration,
so its planned step is the measured step. Configurations nobody measured take the model's own step scaled by the ratio
measured on the same GPU kind (the geometric mean of those ratios), else by the ratio of every measurement: other GPU
kinds and shapes keep the model's ratios to the measured one. Start-up is the measured start-up on the configuration,
else the start-up another workload's run measured on that shape with the same image (source "startup": it is the
machine's, not the work's), else the mean of the workload's measured ones, else the mean of those other work measured
(so that the shapes measured once are not favoured over the rest by the assumption alone). Memory stays modelled (a
measured peak only says what one micro-batch took, and the plan checks it against the model in its notes).

A workload with no step measured (nor declared) of its own: other workloads' runs (source "similar": their measured step
beside the model's step for their work) scale the model's step on their GPU kind, each weighted by how alike its work
is (`_alike`).

Pure: reads the first evaluation, returns the calibrated workload and the notes that say what was measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from functions.planning.measured import SIMILAR_SOURCE, STARTUP_SOURCE, Calibration, MeasuredFigures
from functions.planning.search import Evaluation
from functions.planning.space import (
    VARIANT_PIPELINE,
    VARIANT_SERVER,
    VARIANT_STRATEGY,
    VARIANT_TENSOR,
    HardwareConfig,
    Space,
)
from functions.planning.workload import Workload
from schemas.vocabulary import STRATEGY_INDEX


def measured_variant(strategy: str, tensor_parallel: int = 1, pipeline_parallel: int = 1, variants: int = 0) -> int:
    """The variant a figure was measured under: its strategy ("" read as DDP) without a Reduction Server, under its
    layout (tensor_parallel x pipeline_parallel); -1 where the evaluation has no such variant (a layout the planner
    does not weigh, or one this evaluation did not search: Evaluation.variants, 0 = all of space.VARIANTS), so the
    figure says nothing of its step (a layout's step compared with another variant's would scale every
    configuration by the wrong ratio). A strategy no layout runs under is read as its data-parallel variant."""
    s = STRATEGY_INDEX.get(strategy or "ddp", STRATEGY_INDEX["ddp"])
    plain = (s == VARIANT_STRATEGY) & (VARIANT_SERVER == 0)
    data = int(np.flatnonzero(plain & (VARIANT_TENSOR == 1) & (VARIANT_PIPELINE == 1))[0])
    layout = (tensor_parallel == VARIANT_TENSOR) & (pipeline_parallel == VARIANT_PIPELINE)
    if tensor_parallel * pipeline_parallel == 1:
        return data
    found = np.flatnonzero(plain & layout)
    if not (plain & (VARIANT_TENSOR * VARIANT_PIPELINE > 1)).any():
        return data  # no layout runs under this strategy: the run's figures are its data-parallel ones
    if not len(found) or (variants and int(found[0]) >= variants):
        return -1
    return int(found[0])


def _newest(figures: Sequence[MeasuredFigures]) -> list[MeasuredFigures]:
    """One figure per shape: the newest (a finished run over a canary at the same time)."""
    best: dict[tuple[str, int, int], MeasuredFigures] = {}
    for f in figures:
        held = best.get(f.shape)
        if held is None or (f.measured_at, f.source == "run") > (held.measured_at, held.source == "run"):
            best[f.shape] = f
    return list(best.values())


def calibrate(ev: Evaluation, figures: Sequence[MeasuredFigures]) -> Calibration | None:
    """The calibration the figures give for this evaluation's space; None when none of them applies (no step time
    measured, or measured on a shape the space does not have)."""
    space, work = ev.space, ev.workload
    index = {config_key(cfg): c for c, cfg in enumerate(space.configs)}
    learned = {
        index[f.shape]: f
        for f in _newest([f for f in figures if f.source == STARTUP_SOURCE and f.startup_seconds > 0])
        if f.shape in index
    }
    similar = [
        f
        for f in figures
        if f.source == SIMILAR_SOURCE and f.step_seconds > 0 and f.model_step_seconds > 0 and f.accelerator_type
    ]
    figures = [f for f in figures if f.source not in (STARTUP_SOURCE, SIMILAR_SOURCE)]
    used: list[tuple[int, MeasuredFigures, float]] = []
    counted = [f.steps / f.modelled_steps for f in figures if f.steps > 0 and f.modelled_steps > 0]
    for f in _newest([f for f in figures if f.step_seconds > 0 or f.startup_seconds > 0]):
        c = index.get(f.shape)
        if c is None:
            continue
        v = measured_variant(f.strategy, f.tensor_parallel, f.pipeline_parallel, ev.variants)
        modelled = float(ev.step[c, v]) if v >= 0 else 0.0  # no such variant: its start-up still counts
        measured = f.step_seconds * (work.global_batch / f.global_batch if f.global_batch else 1.0)
        ratio = measured / modelled if f.step_seconds > 0 and modelled > 0 else 0.0
        used.append((c, f, ratio))
    if not used and not counted and not learned and not similar:
        return None
    n = len(space.configs)
    kinds = [cfg.shape.accelerator_type or "" for cfg in space.configs]

    def geomean(values: list[float]) -> float:
        return math.exp(sum(math.log(x) for x in values) / len(values)) if values else 1.0

    everywhere = geomean([r for _, _, r in used if r > 0])
    per_kind = {
        kind: geomean([r for c, _, r in used if r > 0 and kinds[c] == kind]) for kind in {kinds[c] for c, _, _ in used}
    }
    scale = [per_kind.get(kinds[c], everywhere) if per_kind.get(kinds[c]) else everywhere for c in range(n)]
    # a workload never measured: the model's step on each GPU kind, corrected by what similar work measured there
    # (its own measurements, and a step its team declared, win outright)
    own = any(r > 0 for _, _, r in used) or work.measured_step_seconds > 0
    alike = {} if own else _alike(ev, similar, skip=set())
    for c, (ratio, _) in alike.items():
        scale[c] = ratio
    # machines nobody measured start like the measured ones on average: the workload's own, else other work's
    startups = [f.startup_seconds for _, f, _ in used if f.startup_seconds > 0] or [
        f.startup_seconds for f in learned.values()
    ]
    default_startup = sum(startups) / len(startups) if startups else space.catalog.assumptions.job.startup_seconds
    startup = [default_startup] * n
    for c, f in learned.items():  # the shape's start-up, whatever work measured it
        startup[c] = f.startup_seconds
    for c, f, r in used:
        if r > 0:
            scale[c] = r
        if f.startup_seconds > 0:
            startup[c] = f.startup_seconds
    return Calibration(
        step_scale=tuple(scale),
        startup_seconds=tuple(startup),
        measured_configs=frozenset(c for c, _, _ in used),
        figures=tuple(used),
        steps_scale=geomean(counted),
        startups_learned=tuple((c, f) for c, f in learned.items()),
        similar=tuple((c, w) for c, (_, w) in alike.items()),
        similar_figures=tuple(similar),
    )


PRIOR_LIKENESS = 1.0
"""The model counts as this many perfectly alike measured runs: one alike run moves a step halfway (in log) to what
it measured, many settle it."""
FLOPS_DECADE = math.log(10.0)
"""Likeness falls by e for each factor of 10 between two works' FLOPs per sample..."""
MICRO_FACTOR = math.log(4.0)
"""...and for each factor of 4 between their micro-batches."""
OTHER_FAMILY = 0.5
"""A run of another family (a transformer beside an MLP) counts half."""


def _alike(ev: Evaluation, similar: Sequence[MeasuredFigures], skip: set[str]) -> dict[int, tuple[float, float]]:
    """[config] -> (step scale, summed likeness) for each configuration of a GPU kind other workloads measured on
    (and this one did not: `skip`): exp(sum w ln r / (PRIOR_LIKENESS + sum w)), r a run's measured over modelled
    step, w its likeness to this work (FLOPs per sample, micro-batch, family)."""
    work, space = ev.workload, ev.space
    out: dict[int, tuple[float, float]] = {}
    kinds = {f.accelerator_type for f in similar} - skip
    for kind in sorted(kinds):
        cs = np.array([c for c, cfg in enumerate(space.configs) if cfg.shape.accelerator_type == kind], dtype=int)
        if not len(cs):
            continue
        fs = [f for f in similar if f.accelerator_type == kind]
        ln_r = np.log([f.step_seconds / f.model_step_seconds for f in fs])
        ln_flops = np.array([math.log(f.flops_per_sample) if f.flops_per_sample > 0 else np.nan for f in fs])
        ln_micro = np.array([math.log(f.micro_batch) if f.micro_batch > 0 else np.nan for f in fs])
        family = np.array([1.0 if f.family == work.family else OTHER_FAMILY for f in fs])
        d_flops = np.abs(math.log(max(work.flops_per_sample, 1e-30)) - ln_flops) / FLOPS_DECADE
        micro = np.log(np.maximum(np.asarray(ev.micro_batch)[cs, 0], 1))  # this work's micro-batch per config
        d_micro = np.abs(micro[:, None] - ln_micro[None, :]) / MICRO_FACTOR
        # a figure that does not say its FLOPs or micro-batch is as far as a decade (or a factor 4) away
        w = np.exp(-np.nan_to_num(d_flops, nan=1.0))[None, :] * np.exp(-np.nan_to_num(d_micro, nan=1.0)) * family
        total = w.sum(axis=1)
        ratio = np.exp((w * ln_r).sum(axis=1) / (PRIOR_LIKENESS + total))
        for c, r, t in zip(cs.tolist(), ratio.tolist(), total.tolist(), strict=True):
            out[c] = (r, t)
    return out


def config_key(cfg: HardwareConfig) -> tuple[str, int, int]:
    """A configuration's hardware as MeasuredFigures.shape names it."""
    return (cfg.shape.machine_type, cfg.shape.accelerator_count, cfg.nodes)


def measured_elsewhere(space: Space, figures: Sequence[MeasuredFigures]) -> bool:
    """Whether a step time was measured on a shape this space (a pinned request's) does not have."""
    keys = {config_key(cfg) for cfg in space.configs}
    return any(f.step_seconds > 0 and f.shape not in keys for f in figures if f.source != STARTUP_SOURCE)


def carried(space: Space, reference: Space, calibration: Calibration) -> Calibration:
    """A calibration worked out on `reference` (a space holding the measured shapes: every shape) carried to `space`
    (a pinned request's, without them): each configuration takes the scale and start-up its shape has there, so a
    shape of a measured GPU kind is planned from that kind's measured ratio and the workload's measured start-up."""
    index = {config_key(cfg): c for c, cfg in enumerate(reference.configs)}
    found = [index.get(config_key(cfg)) for cfg in space.configs]
    default = space.catalog.assumptions.job.startup_seconds
    back = {r: c for c, r in enumerate(found) if r is not None}
    return replace(
        calibration,
        step_scale=tuple(1.0 if r is None else calibration.step_scale[r] for r in found),
        startup_seconds=tuple(default if r is None else calibration.startup_seconds[r] for r in found),
        measured_configs=frozenset(back[r] for r in calibration.measured_configs if r in back),
        figures=tuple((back.get(r, -1), f, ratio) for r, f, ratio in calibration.figures),
        startups_learned=tuple((back[r], f) for r, f in calibration.startups_learned if r in back),
        similar=tuple((back[r], w) for r, w in calibration.similar if r in back),
    )


def calibrated(work: Workload, calibration: Calibration) -> Workload:
    """The workload planned with the measured step times and start-ups, and the step count past runs of it took
    (measured / modelled steps, times the model's count for this request's data)."""
    steps = max(1, round(work.steps * calibration.steps_scale))
    return replace(work, steps=steps, modelled_steps=work.steps, calibration=calibration)


def measured_notes(ev: Evaluation, c: int) -> list[str]:
    """What the plan for configuration c took from measurements and what it modelled; [] without measurements."""
    cal = ev.workload.calibration
    if cal is None:
        return []
    space = ev.space
    a = space.catalog.assumptions.job
    lines: list[str] = []
    own = [(f, r) for cc, f, r in cal.figures if cc == c]
    scale = cal.step_scale[c]
    if own and own[0][1] > 0:
        f, r = own[0]
        lines.append(
            f"measured: step time {f.step_seconds:.4g} s from {f.describe()} (the model said {f.step_seconds / r:.4g} "
            f"s: x{r:.3g})"
        )
    elif c in dict(cal.similar):
        kind = space.configs[c].shape.accelerator_type
        runs = [f for f in cal.similar_figures if f.accelerator_type == kind]
        lines.append(
            f"measured on similar work: step time = the model's x{scale:.3g}, from {len(runs)} run(s) of other "
            f"workloads on {kind} ({', '.join(sorted({f.run_id for f in runs})[:3])}), by likeness "
            f"{dict(cal.similar)[c]:.2g} (FLOPs per sample, micro-batch, family; the model counts as "
            f"{PRIOR_LIKENESS:g})"
        )
    elif abs(scale - 1.0) > 1e-12:
        from_runs = ", ".join(f.describe() for _, f, r in cal.figures if r > 0)
        lines.append(
            f"measured (scaled): step time = the model's x{scale:.3g}, the ratio measured by {from_runs}; "
            "other machines keep the model's ratios to the measured one"
        )
    else:
        lines.append("modelled: step time (no measured step time applies)")
    startup = cal.startup_seconds[c]
    learned = dict(cal.startups_learned)
    if own and own[0][0].startup_seconds > 0:
        lines.append(f"measured: startup {startup:.4g} s from {own[0][0].describe()}")
    elif c in learned:
        lines.append(
            f"measured on this machine by other work: startup {startup:.4g} s from {learned[c].describe()} "
            "(start-up is the machine's and the image's, not the work's)"
        )
    elif startup != a.startup_seconds:
        lines.append(f"measured (mean of other machines): startup {startup:.4g} s")
    else:
        lines.append(f"modelled: startup {a.startup_seconds:g} s")
    if abs(cal.steps_scale - 1.0) > 1e-9:
        lines.append(
            f"measured: steps {ev.workload.steps:,} = the model's {ev.workload.modelled_steps:,} x"
            f"{cal.steps_scale:.3g}, the ratio past runs of this workload took"
        )
    else:
        lines.append(f"modelled: steps ({ev.workload.steps:,})")
    peaks = [f for f, _ in own if f.peak_memory_gib > 0]
    if peaks:
        modelled = float(ev.memory_total[c].max()) / 2**30
        lines.append(
            f"modelled: memory (measured peak {peaks[0].peak_memory_gib:.3g} GiB per process at micro-batch "
            f"{peaks[0].micro_batch or '?'}; the model says up to {modelled:.3g} GiB)"
        )
    else:
        lines.append("modelled: memory")
    return lines
