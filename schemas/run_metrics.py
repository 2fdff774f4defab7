"""The parts of the trainer's metrics.json (kept whole on the run record as `metrics`) that Landfall reads back:
the warnings the trainer put on the run, and each task's own figures.

    "warnings": [{"code": "small-held-out", "message": "the held-out figures are measured on 9 rows, ..."}]
    "final": {"loss": 0.31, "accuracy": 0.95, ...}            tabular-classification
    "final": {"loss": 0.42, "r2": 0.58, "rmse": 53.1, ...}    tabular-regression (RMSE in the target's units)
    "final": {"loss": 2.1, "perplexity": 8.2, ...}            causal-lm
    "resumed_from_step": 40                                   the checkpoint's step; 0: it started fresh
    "work_lost_steps": 7, "work_lost_seconds": 21.5           trained past the checkpoints resumed from, and lost

The trainer writes the warnings through RunWarning (trainer/sizing.py); the CLI reads them and the figures through
the functions here, so a renamed field fails here rather than showing as an empty column.

Every figure a team's code or a canary reports is checked before Landfall stores or uses it (`figure_problem`): a
number must be finite and fit in 64 bits, and a figure named in FIGURES (those the planner and the canary's verdict
read) must be of its type and inside its plausible range. `stored_metrics` is metrics.json as the run keeps it: such
figures left out (and a `resumed_from_step` past the `steps` the run reached), the rest held to
schemas/record_bounds.py STORED_BOUNDS, each thing left out or cut said in a note that the listener puts on the run's
`warnings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from schemas.errors import SchemaError
from schemas.record_bounds import bounded_value, number_problem
from schemas.vocabulary import TASK_FIGURES

RUN_WARNING_CODES: Mapping[str, str] = MappingProxyType(
    {
        "small-held-out": "the held-out set is too small for its figures to be trusted (hparam min_held_out)",
        "compile-fallback": "torch.compile failed on the first step and the run trained eagerly (LANDFALL_COMPILE)",
        "image-packages-replaced": "the team's requirements replaced packages of the trainer image (they held the "
        "line landfall-replace-image-packages); the run used the versions in metrics `packages`",
    }
)
"""Every warning the trainer may put on a run, with what it means."""


@dataclass(frozen=True)
class RunWarning:
    """Something about a finished run its figures alone do not say."""

    code: str
    """One of RUN_WARNING_CODES."""
    message: str
    """What was found, why it matters and what to do."""

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def parse_run_warning(data: Any) -> RunWarning:
    if not isinstance(data, dict) or not isinstance(data.get("code"), str) or not isinstance(data.get("message"), str):
        raise SchemaError(f"metrics.warnings: expected {{'code': text, 'message': text}}, got {data!r}")
    if data["code"] not in RUN_WARNING_CODES:
        raise SchemaError(f"metrics.warnings: code {data['code']!r} is not one of {', '.join(RUN_WARNING_CODES)}")
    return RunWarning(code=data["code"], message=data["message"])


def run_warnings(metrics: Mapping[str, Any] | None) -> tuple[RunWarning, ...]:
    """The warnings in a run's metrics (none when it has no metrics, or its trainer wrote none)."""
    listed = (metrics or {}).get("warnings", [])
    if not isinstance(listed, list):
        raise SchemaError(f"metrics.warnings: expected a list, got {listed!r}")
    return tuple(parse_run_warning(w) for w in listed)


PACKAGES_SHOWN = 64
"""The most packages `landfall run` lists."""


def installed_packages(metrics: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """metrics.json `packages` (the launcher writes the installed version of each package a team's requirements
    named) as (name, version) pairs, at most PACKAGES_SHOWN; entries that are not text are left out."""
    listed = (metrics or {}).get("packages")
    if not isinstance(listed, dict):
        return []
    pairs = [(k, v) for k, v in listed.items() if isinstance(k, str) and isinstance(v, str)]
    return pairs[:PACKAGES_SHOWN]


DAY_SECONDS = 86_400


@dataclass(frozen=True)
class FigureRule:
    """The type and plausible range of a figure a team's code or a canary reports."""

    integer: bool
    """A whole number (else any number)."""
    low: float
    high: float
    """The range it must lie in, both ends included."""
    unit: str

    def problem(self, name: str, value: object) -> str | None:
        """Why `value` is not this figure (named `name`), or None when it is."""
        kind = "an integer" if self.integer else "a number"
        expected = f"{name} must be {kind} from {_shown(self.low)} to {_shown(self.high)} ({self.unit})"
        if isinstance(value, bool) or not isinstance(value, int | float) or (self.integer and isinstance(value, float)):
            return f"{expected}, got {type(value).__name__}"
        if number_problem(value) is not None or not self.low <= value <= self.high:
            return expected
        return None


def _shown(bound: float) -> str:
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"


FIGURES: Mapping[str, FigureRule] = MappingProxyType(
    {
        "step_seconds": FigureRule(False, 0, DAY_SECONDS, "seconds an optimizer step takes"),
        "startup_seconds": FigureRule(False, 0, 30 * DAY_SECONDS, "seconds before the first step"),
        "wall_time_seconds": FigureRule(False, 0, 30 * DAY_SECONDS, "seconds the training took"),
        "samples_per_second": FigureRule(False, 0, 1e9, "samples a second over every process"),
        "tokens_per_second": FigureRule(False, 0, 1e12, "tokens a second over every process"),
        "peak_memory_bytes": FigureRule(True, 0, 2**44, "bytes one process held at most: 16 TiB"),
        "peak_memory_gib": FigureRule(False, 0, 2**14, "GiB one process held at most"),
        "steps": FigureRule(True, 0, 10**12, "optimizer steps"),
        "resumed_from_step": FigureRule(True, 0, 10**12, "the step of the checkpoint the run resumed from"),
        "work_lost_steps": FigureRule(True, 0, 10**12, "steps trained and lost to stops before the resumes"),
        "work_lost_seconds": FigureRule(False, 0, 365 * DAY_SECONDS, "seconds those lost steps took"),
        "step": FigureRule(True, 0, 10**12, "the optimizer step a metrics line is for"),
        "world_size": FigureRule(True, 0, 10**6, "processes"),
        "processes": FigureRule(True, 0, 10**6, "processes"),
        "allreduce_bytes": FigureRule(True, 0, 2**44, "bytes all-reduced"),
        "allreduce_seconds": FigureRule(False, 0, 3600, "seconds the all-reduce took"),
        "allreduce_gbps": FigureRule(False, 0, 10_000, "GB/s of bus bandwidth"),
        "checkpoint_bytes": FigureRule(True, 0, 2**50, "bytes of one checkpoint"),
    }
)
"""Every figure Landfall plans or judges by, with its type and plausible range (docs/trainer-contract.md): a value
outside it is no measurement (a step of 1e9 s, Infinity bytes) and is left out with a warning. Any other number a
team's code reports needs only to be finite and fit in 64 bits."""


def figure_problem(name: str, value: object) -> str | None:
    """Why a value reported as `name` is not stored or used (a number not finite or past 64 bits, a FIGURES figure
    of the wrong type or outside its range), or None when it is kept (text, true/false and null under other names:
    they are not figures)."""
    if value is None:
        return None
    rule = FIGURES.get(name)
    if rule is not None:
        return rule.problem(name, value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        found = number_problem(value)
        return None if found is None else f"{name} must be a finite number that fits in 64 bits ({found})"
    return None


def checked_figure(name: str, value: object) -> float | None:
    """A reported figure as a number Landfall uses, or None when it is absent or figure_problem refuses it."""
    if value is None or figure_problem(name, value) is not None:
        return None
    return float(value) if isinstance(value, int | float) else None


def stored_metrics(metrics: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """metrics.json as the run keeps it, and a note for each thing left out or cut: figures figure_problem refuses,
    what lies past STORED_BOUNDS (schemas/record_bounds.py), and a `warnings` section that run_warnings cannot
    read."""
    kept, notes = bounded_value(metrics, "metrics", check=figure_problem)
    resumed = _resumed_problem(kept)
    if resumed is not None:
        del kept["resumed_from_step"]
        notes.append(f"metrics.resumed_from_step left out: {resumed}")
    if "warnings" in kept:
        try:
            run_warnings(kept)
        except SchemaError as exc:
            del kept["warnings"]
            notes.append(f"metrics.warnings left out: {exc}")
    return kept, notes


def _resumed_problem(metrics: Mapping[str, Any]) -> str | None:
    """Why the metrics' `resumed_from_step` is not kept (not an integer in its range, or past the `steps` the run
    reached), or None when it is kept or absent. Unlike other figures, text or true/false is refused too: the run's
    attempt records it (schemas/run_record.py SubmissionAttempt)."""
    if "resumed_from_step" not in metrics or (value := metrics["resumed_from_step"]) is None:
        return None
    problem = figure_problem("resumed_from_step", value)
    if problem is not None:
        return problem
    steps = metrics.get("steps")
    if figure_problem("steps", steps) is None and isinstance(steps, int) and value > steps:
        return f"{value} is past the {steps} steps the run reports it reached"
    return None


def resumed_from_step(metrics: Mapping[str, Any] | None) -> int | None:
    """The step of the checkpoint the run's code resumed training from (metrics `resumed_from_step`: 0 when it
    started fresh), or None when its metrics do not say (or say something stored_metrics refuses)."""
    value = (metrics or {}).get("resumed_from_step")
    if not isinstance(value, int) or _resumed_problem(metrics or {}) is not None:
        return None
    return value


def work_lost(metrics: Mapping[str, Any] | None) -> tuple[int, float | None] | None:
    """(steps, seconds) the run's attempts trained past the checkpoints they resumed from and lost to their stops
    (metrics `work_lost_steps`, `work_lost_seconds`: the seconds None when not said), or None when its metrics do not
    say (or say something figure_problem refuses)."""
    steps = (metrics or {}).get("work_lost_steps")
    if not isinstance(steps, int) or figure_problem("work_lost_steps", steps) is not None:
        return None
    return steps, checked_figure("work_lost_seconds", (metrics or {}).get("work_lost_seconds"))


def task_figures(task: str, metrics: Mapping[str, Any] | None) -> list[tuple[str, float]]:
    """The task's own final figures (schemas/vocabulary.py, Task.figures) as (label, value), those the metrics hold
    (empty without metrics)."""
    final = (metrics or {}).get("final")
    if not isinstance(final, dict):
        return []
    return [
        (label, float(final[key]))
        for key, label in TASK_FIGURES.get(task, ())
        if isinstance(final.get(key), int | float) and not isinstance(final.get(key), bool)
    ]
