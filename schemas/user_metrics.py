"""metrics.json of a team's own code: the JSON lines it appended to LANDFALL_METRICS_FILE
(`{"step": 10, "loss": 0.52, ...}`), turned into the document the listener records on the run, as it records the
built-in trainer's metrics.json. The launcher writes it beside the model (trainer/launcher.py); for a container image,
which runs without Landfall's launcher, the listener builds it from the model folder's metrics.jsonl.

    {"schema_version": 1, "trainer": "script", "world_size": 4, "steps": 40, "resumed_from_step": 20,
     "final": {"loss": 0.31, "accuracy": 0.9}, "loss_curve": [{"step": 1, "loss": 0.69}, ...],
     "epochs": [{"epoch": 1, "loss": 0.5, "accuracy": 0.8}, ...], "metric_lines": 40, "skipped_lines": 0}

A line may say which phase of the run it reports with `"phase"`: `"train"` (the default: the run's own figures) or
`"champion"` (the route's production model scored by the code on the same held-out rows). A champion line's fields
go to the document's `champion` section, `{"version": ..., "final": {...}}`, as the built-in trainer writes it, and
never into `final`, `epochs` or the loss curve: the code may score both models with the same function and log the
same names (`accuracy`, `test_loss`) for each. Its `version` (or `champion_version`) names the champion scored (the
LANDFALL_CHAMPION_MODEL_VERSION the job was given). A line with any other phase is skipped and counted in
`skipped_lines`, so that a misspelt phase never overwrites the run's figures.

`resumed_from_step` (the step of the checkpoint the code resumed from; 0 when it started fresh) is the last value a
line gave it, kept beside `steps` rather than in `final`, and absent when no line gave it.

`epochs` comes from the lines that carry an `epoch` number: one entry per epoch, in the order they first appear,
holding each numeric field's last value in that epoch (the lines of an epoch's steps and of its evaluation merge).
Only finite numbers are taken there (true/false are not figures), at most EPOCH_FIELDS of them per epoch and the
last EPOCHS_KEPT epochs, so that a run reporting thousands of epochs or fields stays within the stored bounds.
"""

from __future__ import annotations

import json
import math
from typing import Any

METRICS_VERSION = 1
METRICS_LINES_FILE = "metrics.jsonl"
"""Where a container's LANDFALL_METRICS_FILE points, in its model folder."""
CURVE_POINTS = 1000
"""Points of the loss curve kept (evenly thinned beyond this)."""
EPOCHS_KEPT = 100
"""Epochs kept in `epochs` (the last ones)."""
EPOCH_FIELDS = 16
"""Numeric fields kept per epoch (the first ones an epoch reports, `epoch` included)."""


PHASE_FIELD = "phase"
TRAIN_PHASE, CHAMPION_PHASE = "train", "champion"
PHASES = (TRAIN_PHASE, CHAMPION_PHASE)
"""The values `phase` may take in a metrics line (absent = TRAIN_PHASE)."""
CHAMPION_VERSION_FIELDS = ("version", "champion_version")
"""Fields of a champion line that name the version scored (the first one present wins)."""

LIFTED = "resumed_from_step"
"""A field of the lines that describes the run rather than a figure of it: its last value goes to the document's top
level, where the built-in trainer writes it (schemas/run_metrics.py reads and checks it there)."""


def _figure(value: object) -> bool:
    """A value `epochs` keeps: a finite number that is not true/false."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _add_epoch(epochs: dict[float, dict[str, Any]], record: dict[str, Any]) -> None:
    """Merge the line's numeric fields into its epoch's entry."""
    epoch = record.get("epoch")
    if not isinstance(epoch, int | float) or not _figure(epoch):
        return
    entry = epochs.setdefault(epoch, {"epoch": epoch})
    for key, value in record.items():  # JSON object keys are text
        if _figure(value) and (key in entry or len(entry) < EPOCH_FIELDS):
            entry[key] = value


def metrics_document(text: str, *, form: str, world_size: int = 0) -> dict[str, Any]:
    """metrics.json from the code's JSON lines: `final` holds each field's last value, `loss_curve` the (step,
    loss) pairs, `steps` the last step. Lines that are not JSON objects are counted and skipped."""
    final: dict[str, Any] = {}
    champion: dict[str, Any] = {}
    curve: list[dict[str, float]] = []
    epochs: dict[float, dict[str, Any]] = {}
    skipped = lines = 0
    for raw in text.splitlines():
        if not raw.strip():
            continue
        lines += 1
        try:
            record = json.loads(raw)
        except ValueError:
            skipped += 1
            continue
        phase = record.pop(PHASE_FIELD, TRAIN_PHASE) if isinstance(record, dict) else None
        if not isinstance(record, dict) or phase not in PHASES:
            skipped += 1
            continue
        if phase == CHAMPION_PHASE:
            champion.update({k: v for k, v in record.items() if isinstance(v, int | float | str | bool)})
            continue
        final.update({k: v for k, v in record.items() if isinstance(v, int | float | str | bool)})
        _add_epoch(epochs, record)
        if isinstance(record.get("loss"), int | float):
            step = record.get("step", len(curve))
            curve.append({"step": step if isinstance(step, int | float) else len(curve), "loss": record["loss"]})
    resumed = {LIFTED: final.pop(LIFTED)} if LIFTED in final else {}
    if len(curve) > CURVE_POINTS:
        stride = len(curve) / CURVE_POINTS
        curve = [curve[int(i * stride)] for i in range(CURVE_POINTS - 1)] + [curve[-1]]
    return {
        "schema_version": METRICS_VERSION,
        "trainer": form,
        "world_size": world_size,
        "steps": final.get("step", 0),
        **resumed,
        "final": {k: v for k, v in final.items() if k != "step"},
        "loss_curve": curve,
        "epochs": list(epochs.values())[-EPOCHS_KEPT:],
        "metric_lines": lines,
        "skipped_lines": skipped,
        **_champion_section(champion),
    }


def _champion_section(fields: dict[str, Any]) -> dict[str, Any]:
    """{"champion": {"version", "final"}} from the champion lines' fields; {} when there were none."""
    if not fields:
        return {}
    version = next((str(fields.pop(k)) for k in CHAMPION_VERSION_FIELDS if k in fields), "")
    for key in CHAMPION_VERSION_FIELDS:
        fields.pop(key, None)
    fields.pop("step", None)
    return {"champion": {"version": version, "final": fields}}
