"""An estimate is a range: the p50 and p90 of a candidate's duration and cost, from the measured error of the time
model behind it.

p50 is the model's estimate (the median of what the run takes, as the model is fitted through the middle of the
measured points). p90 = p50 x (1 + width), where the width says how far the model has been seen to be off:

- on a machine shape the same workload was measured on (a past run or canary, or the team's declared step time):
  the floor (assumptions.json estimate_band.floor, 10 %): only run-to-run noise is left;
- on a GPU kind with measured points (throughput.py fits its curve to them): the model's largest relative error
  over those points, at least the floor (H100 about 15 %, H200 about 20 % on the shipped points);
- on a GPU kind nobody measured (a prior scaled from measured kinds), on a CPU-only machine (a flat assumed MFU),
  or for a team's model whose FLOPs per sample nobody declared (sized on a nominal model): the prior's width
  (estimate_band.prior, x2 at p90).

Cost scales with time at the plan's hourly price, so its band is the same factor. The width multiplies the whole
duration, start-up included: simple to state and to check, and never narrower than the training time's own band.
"""

from __future__ import annotations

from dataclasses import dataclass

from functions.planning.search import Evaluation


@dataclass(frozen=True)
class Band:
    """The p50-p90 band of one candidate's duration (and cost, at its hourly price)."""

    width: float
    """p90 / p50 - 1."""
    basis: str
    """Why this width, as the plan states it."""

    def p90(self, p50: float) -> float:
        """The p90 of a duration or cost whose p50 is `p50`."""
        return p50 * (1.0 + self.width)


def band_of(ev: Evaluation, c: int) -> Band:
    """The band of configuration `c` of the evaluation (see the module docstring for the rule)."""
    space, work = ev.space, ev.workload
    a = space.catalog.assumptions.band
    shape = space.configs[c].shape
    calibration = work.calibration
    if work.measured_step_seconds > 0:
        return Band(a.floor, f"the declared workload.step_seconds: +{a.floor:.0%}, run-to-run variation only")
    if calibration is not None and c in calibration.measured_configs:
        return Band(a.floor, f"this workload was measured on this machine shape: +{a.floor:.0%}, run-to-run only")
    if work.flops_guessed:
        return Band(
            a.prior, f"the model's FLOPs per sample are not declared (workload.flops_per_sample): +{a.prior:.0%}"
        )
    if shape.is_cpu_only:
        return Band(a.prior, f"CPU-only: an assumed MFU nobody measured: +{a.prior:.0%}")
    curve = space.catalog.throughput.curves[shape.gpu_kind]
    gpu = space.catalog.gpus[shape.gpu_kind].display
    if curve.error is None:
        return Band(a.prior, f"nothing measured on {gpu}, its MFU is a prior: +{a.prior:.0%}")
    width = max(curve.error, a.floor)
    floor = f" (at least {a.floor:.0%})" if curve.error < a.floor else ""
    return Band(width, f"the time model's largest error over the measured {gpu} points: +{width:.0%}{floor}")
