"""metrics.json of a team's own code: the JSON lines it appended to LANDFALL_METRICS_FILE
(`{"step": 10, "loss": 0.52, ...}`), turned into the document the listener records on the run, as it records the
built-in trainer's metrics.json. The launcher writes it beside the model (trainer/launcher.py); for a container image,
which runs without Landfall's launcher, the listener builds it from the model folder's metrics.jsonl.

    {"schema_version": 1, "trainer": "script", "world_size": 4, "steps": 40, "final": {"loss": 0.31, "accuracy": 0.9},
     "loss_curve": [{"step": 1, "loss": 0.69}, ...], "metric_lines": 40, "skipped_lines": 0}
"""

from __future__ import annotations

import json
from typing import Any

METRICS_VERSION = 1
METRICS_LINES_FILE = "metrics.jsonl"
"""Where a container's LANDFALL_METRICS_FILE points, in its model folder."""
CURVE_POINTS = 1000
"""Points of the loss curve kept (evenly thinned beyond this)."""


def metrics_document(text: str, *, form: str, world_size: int = 0) -> dict[str, Any]:
    """metrics.json from the code's JSON lines: `final` holds each field's last value, `loss_curve` the (step,
    loss) pairs, `steps` the last step. Lines that are not JSON objects are counted and skipped."""
    final: dict[str, Any] = {}
    curve: list[dict[str, float]] = []
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
        if not isinstance(record, dict):
            skipped += 1
            continue
        final.update({k: v for k, v in record.items() if isinstance(v, int | float | str | bool)})
        if isinstance(record.get("loss"), int | float):
            step = record.get("step", len(curve))
            curve.append({"step": step if isinstance(step, int | float) else len(curve), "loss": record["loss"]})
    if len(curve) > CURVE_POINTS:
        stride = len(curve) / CURVE_POINTS
        curve = [curve[int(i * stride)] for i in range(CURVE_POINTS - 1)] + [curve[-1]]
    return {
        "schema_version": METRICS_VERSION,
        "trainer": form,
        "world_size": world_size,
        "steps": final.get("step", 0),
        "final": {k: v for k, v in final.items() if k != "step"},
        "loss_curve": curve,
        "metric_lines": lines,
        "skipped_lines": skipped,
    }
