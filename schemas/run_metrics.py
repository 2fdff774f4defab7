"""The parts of the trainer's metrics.json (kept whole on the run record as `metrics`) that Landfall reads back:
the warnings the trainer put on the run, and each task's own figures.

    "warnings": [{"code": "small-held-out", "message": "the held-out figures are measured on 9 rows, ..."}]
    "final": {"loss": 0.31, "accuracy": 0.95, ...}            tabular-classification
    "final": {"loss": 0.42, "r2": 0.58, "rmse": 53.1, ...}    tabular-regression (RMSE in the target's units)
    "final": {"loss": 2.1, "perplexity": 8.2, ...}            causal-lm

The trainer writes the warnings through RunWarning (trainer/sizing.py); the CLI reads them and the figures through
the functions here, so a renamed field fails here rather than showing as an empty column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from schemas.errors import SchemaError
from schemas.vocabulary import TASK_FIGURES

RUN_WARNING_CODES: Mapping[str, str] = MappingProxyType(
    {"small-held-out": "the held-out set is too small for its figures to be trusted (hparam min_held_out)"}
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
