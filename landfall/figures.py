"""The figures a run reports, read for showing, the same way for Landfall's trainer and for a team's own code (a
script, package or image whose metrics lines became metrics.json through schemas/user_metrics.py): its final
figures, its per-epoch figures and its headline figure. landfall/words.py prints them for the CLI and the dashboard.

What a team's code reports is hostile: a figure is shown only when it is a finite number (not true/false, not past 64
bits) under a plain name (NAME, since the dashboard's chart writes names into the page), and at most FIGURES_SHOWN of
them from the first FIELDS_READ fields of a record; anything else is left out, never an error.

The headline figure (`landfall runs`' METRIC column, the runs page's Metric) is, by the first rule that gives one:
1. the metric the run's promotion rule judged it by (run.model.promotion.metric, routes.toml [routes.promotion]);
2. its task's own figures (schemas/vocabulary.py TASK_FIGURES: accuracy; R² and RMSE; perplexity);
3. the first name in HEADLINE_PREFERENCE its final figures hold;
4. its first final figure by name that is not a count or a speed (NOT_HEADLINE).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from typing import Any

from schemas.run_metrics import FIGURES, task_figures
from schemas.run_record import RunRecord
from schemas.vocabulary import TASK_FIGURES

FIELDS_READ = 1000
"""Fields of one record looked at (a hostile record may hold thousands)."""
FIGURES_SHOWN = 24
"""Figures of one record shown at most (columns of `landfall run --metrics`, curves of a run's page)."""
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
"""A figure's name as shown: a plain word of at most 64 characters."""
LARGEST = 2.0**63
"""The largest magnitude shown: Landfall stores only numbers that fit in 64 bits (schemas/record_bounds.py)."""

HEADLINE_PREFERENCE = (
    "accuracy",
    "val_accuracy",
    "test_accuracy",
    "f1",
    "auc",
    "r2",
    "perplexity",
    "val_loss",
    "test_loss",
    "loss",
)
"""Names a run is judged by, best first, for the headline when neither a promotion rule nor a task names one."""
NOT_HEADLINE = frozenset({"epoch", "step", "mfu", *FIGURES})
"""Figures that count, size or time the work rather than judge it: never a headline by rule 4."""
FIRST_COLUMNS = ("epoch", "loss", "accuracy", "perplexity")
"""The figures shown first, in this order (trainer/metrics.py EpochResult); the others follow by name."""


def figure_value(value: object) -> float | None:
    """A value as a figure to show: a finite number within 64 bits, else None (text, true/false, NaN, Infinity)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and abs(value) >= LARGEST:
        return None
    number = float(value)
    return number if math.isfinite(number) and abs(number) < LARGEST else None


def numeric_figures(record: object) -> dict[str, float]:
    """A record's figures by name, in FIRST_COLUMNS' order then by name (a stored map's keys come back in no promised
    order): finite numbers under plain names, at most FIGURES_SHOWN; {} for anything that is not a mapping."""
    if not isinstance(record, Mapping):
        return {}
    found: dict[str, float] = {}
    for key, value in itertools.islice(record.items(), FIELDS_READ):
        if isinstance(key, str) and NAME.fullmatch(key) and (number := figure_value(value)) is not None:
            found[key] = number
    ordered = [k for k in FIRST_COLUMNS if k in found] + sorted(set(found) - set(FIRST_COLUMNS))
    return {k: found[k] for k in ordered[:FIGURES_SHOWN]}


def final_figures(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    """metrics.json's final figures (the last value of each, for a team's code), its step and epoch counters left
    out (`steps` and the per-epoch table say them)."""
    figures = numeric_figures((metrics or {}).get("final"))
    return {k: v for k, v in figures.items() if k not in ("step", "epoch")}


def epoch_figures(metrics: Mapping[str, Any] | None) -> list[dict[str, float]]:
    """metrics.json's per-epoch figures: one mapping per epoch that has an `epoch` number, in the stored order."""
    epochs = (metrics or {}).get("epochs")
    if not isinstance(epochs, list):
        return []
    rows = [numeric_figures(e) for e in epochs]
    return [row for row in rows if "epoch" in row]


def headline_figures(run: RunRecord) -> list[tuple[str, float]]:
    """The run's headline figure(s) as (label, value), by the module's rule; [] when it reports none."""
    final = final_figures(run.metrics)
    labels = dict(TASK_FIGURES.get(str(run.request.get("task")), ()))
    promotion = run.model.promotion if run.model is not None else None
    if promotion is not None and promotion.metric in final:
        return [(labels.get(promotion.metric, promotion.metric), final[promotion.metric])]
    task = task_figures(str(run.request.get("task")), run.metrics)
    if own := [(label, value) for label, value in task if figure_value(value) is not None]:
        return own
    preferred = next((name for name in HEADLINE_PREFERENCE if name in final), None)
    if preferred is not None:
        return [(preferred, final[preferred])]
    first = next((name for name in final if name not in NOT_HEADLINE), None)
    return [] if first is None else [(first, final[first])]
